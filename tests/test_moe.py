"""The MoE probe on real gloo ranks: every rank's dispatch bytes against a direct count of the
routing rule (Zipf shares, top-k, capacity), tokens dropped, data checked, and the report."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.analysis.moe import summarize_moe
from gpuprof.analysis.summary import summarize_run
from gpuprof.machine.systems import load_system
from gpuprof.predict.collectives import Collective
from gpuprof.predict.moe import MoEBasis, predict_moe
from gpuprof.predict.network import SystemNetwork
from gpuprof.runs.store import open_run
from gpuprof.specs.moe import MoEParams
from gpuprof.specs.routing import Routing, zipf_weights
from tests.conftest import Gp

TOKENS, HIDDEN, TOP_K, PER_RANK = 64, 32, 2, 2


def theory(ranks: int, skew: float, factor: float) -> tuple[list[int], int]:
    """Bytes each rank sends the others in a dispatch, and tokens each drops: every rank's
    2 x 64 choices over 2 experts a rank by the Zipf shares (largest remainder, each expert
    taking a token once), capped at floor(factor x 64 x 2 / experts) per expert."""
    experts = PER_RANK * ranks
    law = [1 / (e + 1) ** skew for e in range(experts)]
    exact = [TOKENS * TOP_K * w / sum(law) for w in law]
    assert max(exact) <= TOKENS  # these skews never cap an expert at the token count
    counts = [math.floor(x) for x in exact]
    for e in sorted(range(experts), key=lambda e: (counts[e] - exact[e], e))[
        : TOKENS * TOP_K - sum(counts)
    ]:
        counts[e] += 1
    cap = math.floor(factor * TOKENS * TOP_K / experts) if factor else TOKENS
    kept = [min(c, cap) for c in counts]
    sent = [
        sum(k for e, k in enumerate(kept) if e // PER_RANK != rank) * HIDDEN * 4
        for rank in range(ranks)
    ]
    return sent, sum(counts) - sum(kept)


@pytest.mark.gloo("moe")
@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_dispatch_bytes_and_drops_are_the_routing_rules(ranks: int, tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run", "moe", "--gpus", str(ranks), "--device", "cpu", "--out", tmp_path,
        "--moe-skew", "0,0.5,1", "--capacity-factor", "0,1",
        "--moe-tokens", str(TOKENS), "--moe-hidden", str(HIDDEN),
        "--budget-ms", "40", "--min-iters", "3", "--warmup", "1",
    )  # fmt: skip
    assert result.code == 0, result.err
    run = open_run(next(tmp_path.iterdir()))
    frame = run.table("moe")
    summary = summarize_moe(frame)
    assert len(summary) == 6 and (summary["nwrong"] == 0).all()
    assert (summary["sent_ratio"] == 1.0).all()
    per_rank = frame.groupby(["skew", "capacity_factor", "rank"])["sent_bytes"].agg(["min", "max"])
    for (skew, factor, rank), row in per_rank.iterrows():
        sent, dropped = theory(ranks, float(skew), float(factor))
        assert row["min"] == row["max"] == sent[int(rank)], (skew, factor, rank)
        case = summary[(summary["skew"] == skew) & (summary["capacity_factor"] == factor)]
        assert int(case["dropped"].iloc[0]) == dropped
    uniform = summary[(summary["skew"] == "0") & (summary["capacity_factor"] == 0)].iloc[0]
    skewed = summary[(summary["skew"] == "1") & (summary["capacity_factor"] == 0)].iloc[0]
    assert uniform["imbalance"] == 1.0 and skewed["imbalance"] > 1.3
    assert (summary["busbw_gbps"] > 0).all()
    html = (run.path / "report.html").read_text()
    assert 'id="moe"' in html
    prom = gp("export", "prometheus", run.path).out
    assert "gpuprof_moe_dispatch_seconds" in prom
    # the equal-split dispatches (skew 0: 2 x 64 choices, 32 per expert; capacity 1 drops
    # none) as nccl-tests' alltoall_perf: read back by `import nccl-tests`, the same row
    log = tmp_path / "alltoall.txt"
    assert gp("export", "nccl-tests", run.path, "-o", log).code == 0
    assert "alltoall_perf" in log.read_text() and "MoE dispatch, equal splits" in log.read_text()
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "imported", "--nodes", "1",
             "--gpus", str(ranks))  # fmt: skip
    assert got.code == 0, got.err
    back = summarize_run(open_run(got.out.strip().splitlines()[-1]), "collectives")
    equal = summary[(summary["skew"] == "0")]
    assert set(back["op"]) == {"all_to_all"} and len(back) == 2  # out-of-place, in-place
    assert back["size_bytes"].iloc[0] == TOKENS * TOP_K * HIDDEN * 4
    assert back["time_us"].iloc[0] == pytest.approx(equal["dispatch_us"].max(), rel=1e-3)
    assert back["busbw_gbps"].iloc[0] == pytest.approx(equal["busbw_gbps"].min(), rel=1e-2)
    # the layer at other node and expert counts, on a described system
    predicted = gp("predict", run.path, "--hardware", "dgx-h100", "--nodes", "1,4", "--experts",
                   "64")  # fmt: skip
    assert predicted.code == 0, predicted.err
    assert "MoE layer, predicted" in predicted.out and "preset dgx-h100" in predicted.out


def test_bad_moe_options_are_one_line(tmp_path: Path, gp: Gp) -> None:
    (tmp_path / "counts.txt").write_text("5 3 2")
    for argv, message in (
        (["--moe-skew", "-1"], "invalid --moe-skew"),
        (["--moe-placement", "random"], "unknown expert placement"),
        (["--moe-routing", str(tmp_path / "nope.json")], "invalid --moe-routing"),
        (["--moe-routing", str(tmp_path / "counts.txt")], "3 experts"),
    ):
        result = gp("run", "moe", "--gpus", "2", "--device", "cpu", "--dry-run", *argv)
        assert result.code == 2 and message in result.err, (argv, result.err)
        assert len(result.err.strip().splitlines()) == 1


@pytest.mark.gloo("moe")
@pytest.mark.slow
def test_hierarchical_dispatch_on_two_nodes_over_loopback(tmp_path: Path) -> None:
    """Two nodes of two ranks (the manual launcher, both on this machine): the hierarchical
    layout's two stages deliver every token (checked) and send the plan's bytes."""
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def argv(node: int) -> list[str]:
        return [
            sys.executable, "-m", "gpuprof", "run", "moe", "--launcher", "manual",
            "--nodes", "2", "--gpus", "2", "--node-rank", str(node),
            "--master-addr", "127.0.0.1", "--master-port", str(port), "--device", "cpu",
            "--out", str(tmp_path / f"n{node}"), "--moe-skew", "0,1",
            "--capacity-factor", "0,1", "--moe-tokens", "128", "--budget-ms", "40",
            "--min-iters", "3", "--warmup", "1", "--no-telemetry",
        ]  # fmt: skip

    procs = [
        subprocess.Popen(argv(n), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for n in (0, 1)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    run = open_run(next((tmp_path / "n0").iterdir()))
    summary = summarize_moe(run.table("moe"))
    assert set(summary["layout"]) == {"flat", "hierarchical"} and len(summary) == 8
    assert (summary["nwrong"] == 0).all() and (summary["sent_ratio"] == 1.0).all()


def _basis(skew: str, dispatch_us: float = 0.0, combine_us: float = 0.0) -> MoEBasis:
    """4096 tokens of 7168 bf16 values, top-8 of 8 experts a rank, measured (when the times
    are given) on 2 nodes of 8."""
    return MoEBasis(
        label=skew, weights=(), tokens=4096, hidden=7168, dtype="bfloat16", top_k=8,
        experts_per_rank=8, capacity_factor=0.0, placement="contiguous", nodes=2, gpus=8,
        dispatch_us=dispatch_us, combine_us=combine_us,
    )  # fmt: skip


class LinearNetwork:
    """An all_to_all whose time is its buffer over 10 GB/s (to read the sizes asked)."""

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        assert op == "all_to_all"
        return Collective(time_us=size / 1e4, busbw_gbps=10.0, rel=0.0, algorithm="p2p")

    def changed(self, change: object) -> LinearNetwork:
        return self


def test_predicted_dispatch_equal_splits_are_the_all_to_all() -> None:
    """Uniform routing of every rank's 4096 x 8 choices over 8 experts a rank: equal splits,
    so the layer is NCCL's all_to_all of a rank's buffer, on the preset's own model."""
    net = SystemNetwork(load_system("dgx-h100"))
    notes: list[str] = []
    found = predict_moe([_basis("0")], net, (2, 4, 16), 8, "nccl", None, notes)
    assert list(found["nodes"]) == [2, 4, 16] and not notes
    buffer = 4096 * 8 * 7168 * 2
    for row in found.to_dict("records"):
        alone = net.collective("all_to_all", row["nodes"], 8, buffer, "nccl")
        assert row["imbalance"] == 1.0
        assert row["dispatch_us"] == pytest.approx(alone.time_us, rel=1e-9)
        # the busiest rank's bytes from other nodes: (n - 8) / n of its buffer
        n = row["world_size"]
        assert row["net_bytes"] == buffer * (n - 8) // n


def test_predicted_dispatch_follows_the_busiest_rank_and_the_measurement() -> None:
    """Skewed: the layer waits for the busiest rank's received bytes (x n / (n - 1) as an
    all_to_all's buffer); measured at its own shape, the prediction there is the measurement
    and the ratio carries to the others; --experts fixes the expert count."""
    found = predict_moe([_basis("1.2")], LinearNetwork(), (2, 4), 8, "nccl", None, [])
    for row in found.to_dict("records"):
        n = row["world_size"]
        routing = Routing(
            ranks=n, tokens=4096, experts=8 * n, top_k=8, weights=tuple(zipf_weights(8 * n, 1.2))
        )
        flat = routing.dispatch_tokens()
        hot = max(sum(flat[s][d] for s in range(n) if s != d) for d in range(n))
        assert row["dispatch_us"] == pytest.approx(hot * 7168 * 2 * n / (n - 1) / 1e4)
        assert row["imbalance"] == round(routing.imbalance(), 3) > 1.5
    measured = _basis("1.2", dispatch_us=5000.0, combine_us=6000.0)
    found = predict_moe([measured], LinearNetwork(), (2, 4), 8, "nccl", None, [])
    assert found["dispatch_us"].iloc[0] == pytest.approx(5000.0)
    assert found["combine_us"].iloc[0] == pytest.approx(6000.0)
    model = found["model_us"]
    assert found["dispatch_us"].iloc[1] == pytest.approx(model.iloc[1] * 5000 / model.iloc[0])
    assert "measured dispatch at 2x8" in found["source"].iloc[1]
    notes: list[str] = []
    fixed = predict_moe([_basis("1.2")], LinearNetwork(), (2, 4), 8, "nccl", 256, notes)
    assert list(fixed["experts"]) == [256, 256] and not notes
    odd = predict_moe([_basis("1.2")], LinearNetwork(), (2, 3), 8, "nccl", 64, notes)
    assert list(odd["nodes"]) == [2] and "64 experts do not divide over 24 ranks" in notes[0]


def test_a_models_config_sets_the_layer(tmp_path: Path, gp: Gp) -> None:
    """--moe-config reads a Hugging Face config.json as each family names its MoE layer;
    --moe-top-k and --moe-hidden given too keep their own values."""
    from gpuprof import registry

    spec = registry.get("moe")
    configs = {  # the keys as the models' own config.json files name them
        "mixtral.json": ({"hidden_size": 4096, "num_local_experts": 8,
                          "num_experts_per_tok": 2}, (8, 2, 4096)),
        "deepseek_v3.json": ({"hidden_size": 7168, "n_routed_experts": 256,
                              "num_experts_per_tok": 8, "n_shared_experts": 1}, (256, 8, 7168)),
        "dbrx.json": ({"d_model": 6144, "ffn_config": {"moe_num_experts": 16,
                                                       "moe_top_k": 4}}, (16, 4, 6144)),
    }  # fmt: skip
    for name, (config, (experts, top_k, hidden)) in configs.items():
        path = tmp_path / name
        path.write_text(json.dumps(config))
        params = registry.params_for(spec, "standard", "cpu", {"moe_config": str(path)}, 1, 8)
        assert isinstance(params, MoEParams)
        assert (params.experts(8), params.top_k, params.hidden) == (experts, top_k, hidden)
    mine = registry.params_for(
        spec, "standard", "cpu",
        {"moe_config": str(tmp_path / "mixtral.json"), "moe_top_k": 1, "moe_hidden": 64},
    )  # fmt: skip
    assert isinstance(mine, MoEParams) and (mine.top_k, mine.hidden) == (1, 64)
    (tmp_path / "dense.json").write_text('{"hidden_size": 4096}')
    result = gp("run", "moe", "--gpus", "2", "--device", "cpu", "--dry-run",
                "--moe-config", tmp_path / "dense.json")  # fmt: skip
    assert result.code == 2 and "no MoE layer in it" in result.err
    assert len(result.err.strip().splitlines()) == 1
