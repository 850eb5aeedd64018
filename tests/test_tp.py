"""The tensor-parallel probe: a real 2-rank gloo run of both layer kinds, its theory by hand,
the summary and the advice on known numbers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpuprof.advice.tp import tp_findings
from gpuprof.analysis.tp import summarize_tp
from gpuprof.errors import UsageError
from gpuprof.runs.store import open_run
from gpuprof.specs.tp import theory_sent
from tests.conftest import Gp


def test_theory_by_hand() -> None:
    # 1024 tokens x 512 wide x 4 bytes = 2 MiB; 2 all_reduces x 2 x 3/4 of it on 4 ranks
    assert theory_sent(4, 1024, 512) == 2 * 2 * 0.75 * 2 * 2**20
    assert theory_sent(1, 1024, 512) == 0


def _rows(n: int, nodes: int, scope: str, split: float, twin: float, alone: float) -> list[dict]:
    base = {
        "scope": scope,
        "world_size": n,
        "num_nodes": nodes,
        "group": "all",
        "case_id": "mlp",
        "layer": "mlp",
        "hidden": 512,
        "batch": 4,
        "seq": 128,
        "tokens": 512,
        "theory_sent_bytes": theory_sent(n, 512, 512),
        "activation_bytes": 512 * 512 * 4.0,
        "sent_bytes": theory_sent(n, 512, 512),
        "num_collectives": 2 if n > 1 else 0,
        "params_per_rank": 1000,
    }
    return [
        {
            **base,
            "rank": r,
            "iteration": i,
            "time_us": split,
            "forward_us": split / 3,
            "backward_us": 2 * split / 3,
            "twin_forward_us": twin / 3,
            "twin_backward_us": 2 * twin / 3,
            "comm_only_us": alone,
        }
        for r in range(n)
        for i in range(3)
    ]


def test_summary_and_advice_on_known_numbers() -> None:
    frame = pd.DataFrame(
        _rows(1, 1, "single", 9000, 9000, 0)
        + _rows(2, 1, "intra", 6000, 4500, 1000)
        + _rows(2, 2, "inter", 12000, 4500, 9000)
    )
    out = summarize_tp(frame).set_index("scope")
    assert out.loc["intra", "speedup"] == pytest.approx(1.5)
    assert out.loc["intra", "efficiency"] == pytest.approx(0.75)
    assert out.loc["intra", "exposed_comm_us"] == pytest.approx(1500)
    assert out.loc["inter", "comm_vs_compute"] == pytest.approx(2.0)
    assert out.loc["inter", "sent_ratio"] == 1 and pd.isna(out.loc["single", "comm_vs_compute"])
    (finding,) = tp_findings(summarize_tp(frame))
    assert finding.startswith("Tensor parallel mlp (hidden 512, 512 tokens), inter n=2 over 2")
    assert "take 9 ms against 4.5 ms of compute per rank (2.0x" in finding
    assert "keep tensor parallelism inside a node" in finding
    small = pd.DataFrame(_rows(1, 1, "single", 900, 900, 0) + _rows(4, 1, "intra", 2000, 300, 900))
    (finding,) = tp_findings(summarize_tp(small))
    assert "the layer is too small for 4 ways" in finding


def test_attention_heads_must_split_evenly(gp: Gp, tmp_path: Path) -> None:
    result = gp("run", "tp", "--gpus", "2", "--device", "cpu", "--out", tmp_path,
                "--tp-hidden", "192")  # fmt: skip
    assert result.code == 2 and "3 heads (--tp-hidden 192 / 64) do not divide over 2" in result.err
    assert len(result.err.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_the_suite_widens_attention_until_its_heads_split() -> None:
    """A default sweep never fails on the heads: 16 ranks (sizes 1..16) and 3 ranks widen
    the CPU preset's 8 heads to 16 and 24; explicit options keep their width."""
    from gpuprof import registry

    spec = registry.get("tp")
    for (nodes, gpus), hidden in (((1, 2), 512), ((2, 8), 1024), ((1, 3), 1536)):
        params = registry.preset(spec, "standard", "cpu", nodes, gpus)
        assert params.hidden == hidden
        params.check_job(nodes, gpus, "cpu")
    given = registry.params_for(spec, "standard", "cpu", {"tp_hidden": 256}, 2, 3)
    assert given.hidden == 256  # 4 heads: n=2 splits them, n=3 and 6 skip with the reason
    given.check_job(2, 3, "cpu")
    with pytest.raises(UsageError, match=r"4 heads .* do not divide over 3 ranks"):
        one_each = registry.params_for(spec, "standard", "cpu", {"tp_hidden": 256}, 3, 1)
        one_each.check_job(3, 1, "cpu")  # sizes 1 and 3: no group can split 4 heads


@pytest.mark.gloo("tp")
def test_tp_probe_two_ranks(tmp_path: Path, gp: Gp) -> None:
    """Both layer kinds split over 2 gloo ranks: two activation all_reduces per layer, their
    bytes the theory's, the split layer timed against its twin."""
    result = gp(
        "run", "tp", "--gpus", "2", "--device", "cpu", "--out", tmp_path,
        "--tp-hidden", "128", "--tp-batch", "2", "--tp-seq", "32",
        "--budget-ms", "100", "--min-iters", "4", "--warmup", "1",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "comm/compute" in result.out  # the table printed
    run = open_run(tmp_path / "0001_tp")
    summary = summarize_tp(run.table("tp"))
    cases = set(zip(summary["case_id"], summary["world_size"], strict=True))
    assert cases == {(k, n) for k in ("mlp", "attention") for n in (1, 2)}
    two = summary[summary["world_size"] == 2]
    assert (two["num_collectives"] == 2).all()  # forward's output, backward's input gradient
    # the replay times the same functional all_reduces the split layer issues
    assert (two["replayed_collectives"] == two["num_collectives"]).all()
    assert ((two["sent_ratio"] - 1).abs() <= 0.10).all(), two["sent_ratio"]
    for column in ("compute_us", "comm_only_us", "speedup", "exposed_comm_us"):
        assert two[column].notna().all(), column
    assert (summary["compute_us"] > 0).all()
    html = (run.path / "report.html").read_text()
    assert 'id="tp"' in html
    prom = gp("export", "prometheus", run.path).out  # its registry entry's exports
    layers = [line for line in prom.splitlines() if line.startswith("gpuprof_tp_layer_seconds")]
    assert len(layers) == len(summary) and 'layer="attention",scope="global",ranks="2"' in prom
