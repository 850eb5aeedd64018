"""The sharded data-parallel probe: DDP, ZeRO-1 and FSDP on real 2-rank gloo runs, their
theory by hand, the summary and the advice on known numbers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpuprof.advice.sharded import capacity_per_rank, sharded_findings
from gpuprof.analysis.sharded import summarize_sharded
from gpuprof.runs.store import open_run
from gpuprof.specs.ddp import activation_bytes, ddp_case_bytes, model_size
from gpuprof.specs.sharded import (
    DDP,
    FSDP,
    FSDP_BF16,
    FSDP_NORESHARD,
    STRATEGIES,
    ZERO1,
    ShardedParams,
    sent_bytes,
    sharded_case_bytes,
    theory_memory,
    theory_sent,
    what_fits,
)
from tests.conftest import TINY_DDP, Gp


def test_theory_by_hand() -> None:
    """P = 1M parameters on n = 4 ranks: (n-1)/n = 0.75."""
    p = 1_000_000
    assert theory_sent(DDP, 4, p) == pytest.approx(0.75 * 8e6)  # all_reduce: 2 x 0.75 x 4P
    assert theory_sent(ZERO1, 4, p) == pytest.approx(0.75 * 12e6)  # + broadcast 0.75 x 4P
    assert theory_sent(FSDP, 4, p) == pytest.approx(0.75 * 12e6)  # 2 gathers + reduce_scatter
    assert theory_sent(FSDP_NORESHARD, 4, p) == pytest.approx(0.75 * 8e6)
    assert theory_sent(FSDP_BF16, 4, p) == pytest.approx(0.75 * 8e6)  # 2 + 2 + 4 bytes
    assert all(theory_sent(s, 1, p) == 0 for s in STRATEGIES)
    assert theory_memory(DDP, 4, p) == 16e6
    assert theory_memory(ZERO1, 4, p) == 8e6 + 2e6
    assert theory_memory(FSDP, 4, p) == 4e6
    assert sent_bytes("all_reduce", 1000, 4) == 1500
    assert sent_bytes("all_gather", 1000, 4) == 750
    assert sent_bytes("broadcast", 1000, 1) == 0


def _frame(strategy: str, n: int, scope: str, step: float, phases: tuple[float, ...]) -> list[dict]:
    """Two iterations on each of n ranks: phases (forward, backward, optimizer) and the twin's
    (forward, backward, optimizer) in us, the replay 4000 us."""
    fwd, bwd, opt, tf, tb, to = phases
    base = {
        "scope": scope,
        "world_size": n,
        "num_nodes": 1,
        "group": "all",
        "case_id": strategy,
        "strategy": strategy,
        "num_params": 1000,
        "hidden": 64,
        "layers": 2,
        "batch": 2,
        "seq": 16,
        "samples_per_step": 2,
        "theory_sent_bytes": theory_sent(strategy, n, 1000),
        "theory_memory_bytes": theory_memory(strategy, n, 1000),
        "sent_bytes": theory_sent(strategy, n, 1000),
        "memory_bytes": 16000 / n,
        "param_bytes": 4000 / n,
        "grad_bytes": 4000 / n,
        "optim_bytes": 8000 / n,
    }
    return [
        {
            **base,
            "rank": r,
            "iteration": i,
            "time_us": step,
            "forward_us": fwd,
            "backward_us": bwd,
            "optimizer_us": opt,
            "twin_forward_us": tf,
            "twin_backward_us": tb,
            "twin_optimizer_us": to,
            "comm_only_us": 4000.0,
        }
        for r in range(n)
        for i in range(2)
    ]


def test_summary_on_known_numbers() -> None:
    frame = pd.DataFrame(
        _frame(FSDP, 1, "single", 10_000, (3000, 5000, 1500, 3000, 5000, 1000))
        + _frame(FSDP, 2, "global", 12_500, (4000, 6000, 2000, 3000, 5000, 1000))
    )
    out = summarize_sharded(frame).set_index("scope")
    glob = out.loc["global"]
    # exposed = phases - twin's = 12000 - 9000; hidden = 1 - 3000 / 4000
    assert glob["exposed_comm_us"] == 3000 and glob["hidden_pct"] == pytest.approx(25)
    assert glob["sum_pct"] == pytest.approx(100 * 12000 / 12500)
    assert glob["samples_per_s"] == pytest.approx(2 * 2 / 0.0125)
    assert glob["efficiency"] == pytest.approx(10_000 / 12_500)
    assert glob["sent_ratio"] == 1 and glob["memory_ratio"] == 1
    assert pd.isna(out.loc["single", "hidden_pct"])  # one rank communicates nothing


def _summary(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """(strategy, samples/s, bytes a rank holds) at n=8 in the global scope."""
    return pd.DataFrame(
        [
            {
                "scope": "global",
                "world_size": 8,
                "case_id": s,
                "samples_per_s": v,
                "memory_bytes": m,
                "peak_bytes": None,
                "exposed_pct": 10.0,
            }
            for s, v, m in rows
        ]
    )


def test_advice_picks_the_fastest_strategy_that_fits() -> None:
    gib = 2**30
    info = {"device": "cuda", "nodes": [{"gpus": [{"memory_bytes": 80 * gib}]}]}
    summary = _summary([(DDP, 100.0, 90 * gib), (ZERO1, 90.0, 60 * gib), (FSDP, 75.0, 20 * gib)])
    (finding,) = sharded_findings(summary, info)
    assert finding.startswith("Sharded n=8: zero1 is the fastest strategy that fits: 90 ")
    assert "of 80.0 GiB (GPU memory)" in finding
    assert "ddp 50% more memory, 10% faster" in finding and "does not fit (90.00 GiB)" in finding
    assert "fsdp 67% less memory, 20% slower" in finding
    small = {"device": "cuda", "nodes": [{"gpus": [{"memory_bytes": 16 * gib}]}]}
    (none,) = sharded_findings(summary, small)
    assert "no measured strategy fits" in none and "the smallest, fsdp, needs 20.00 GiB" in none


def test_capacity_per_rank_from_run_json() -> None:
    cpu = {
        "device": "cpu",
        "gpus_per_node": 4,
        "nodes": [{"memory_bytes": 64}, {"memory_bytes": 32}],
    }
    assert capacity_per_rank(cpu) == (8.0, "host memory / ranks per node")
    assert capacity_per_rank({"device": "cuda", "nodes": [{"gpus": []}]}) == (None, "")


@pytest.mark.gloo("sharded")
def test_sharded_probe_two_ranks(tmp_path: Path, gp: Gp) -> None:
    """Every strategy on 2 gloo ranks: the breakdown covers the step, FSDP holds less than
    DDP, and bytes and memory match the theory (the probe's own accounting)."""
    result = gp(
        "run", "sharded", "--gpus", "2", "--device", "cpu", "--out", tmp_path,
        "--no-telemetry", *TINY_DDP, "--strategies", ",".join(STRATEGIES),
        "--budget-ms", "200", "--min-iters", "4", "--warmup", "1",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "sent" in result.out and "/theory" in result.out  # the table printed
    run = open_run(tmp_path / "0001_sharded")
    frame = run.table("sharded")
    for column in ("forward_us", "twin_backward_us", "comm_only_us", "sent_bytes"):
        assert frame[column].notna().all(), column
    # DDP's buckets are counted from its logging data: the timed steps run its own allreduce
    assert frame.loc[frame["case_id"].isin([DDP, ZERO1]), "comm_hook"].isna().all()
    summary = summarize_sharded(frame)
    cases = set(zip(summary["case_id"], summary["world_size"], strict=True))
    assert cases == {(s, n) for s in STRATEGIES for n in (1, 2)}
    # the parts (the twin's compute + exposed) are the strategy's phases: within 10% of the step
    assert summary["sum_pct"].between(90, 110).all(), summary[["case_id", "sum_pct"]]
    two = summary[summary["world_size"] == 2].set_index("case_id")
    assert two.loc[FSDP, "memory_bytes"] < two.loc[ZERO1, "memory_bytes"]
    assert two.loc[ZERO1, "memory_bytes"] < two.loc[DDP, "memory_bytes"]
    assert ((two["sent_ratio"] - 1).abs() <= 0.10).all(), two["sent_ratio"]
    assert ((summary["memory_ratio"] - 1).abs() <= 0.10).all(), summary["memory_ratio"]
    html = (run.path / "report.html").read_text()
    assert 'id="sharded"' in html and "is the fastest strategy that fits" in html
    prom = gp("export", "prometheus", run.path).out  # its registry entry's exports
    held = [line for line in prom.splitlines() if line.startswith("gpuprof_sharded_memory_held")]
    assert len(held) == len(summary) and 'strategy="fsdp",scope="global",ranks="2"' in prom


def test_fsdp2_is_found_where_torch_2_4_and_2_5_keep_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.4 and 2.5 have FSDP2 only in torch.distributed._composable.fsdp (their
    torch.distributed.fsdp is FSDP1): hide the public home and the composable one serves."""
    import torch.distributed._composable.fsdp as composable
    import torch.distributed.fsdp as public

    from gpuprof.probes._harness import Unsupported
    from gpuprof.probes.sharded import fsdp2

    assert fsdp2() == (public.fully_shard, public.MixedPrecisionPolicy)
    monkeypatch.delattr(public, "fully_shard")
    assert fsdp2() == (composable.fully_shard, composable.MixedPrecisionPolicy)
    monkeypatch.delattr(composable, "fully_shard")
    with pytest.raises(Unsupported, match=r"torch\.distributed\.fsdp: .*_composable\.fsdp: "):
        fsdp2()


def test_memory_estimates_by_hand() -> None:
    """The estimates add what the probe builds: for a 2-block model of width 64 (P = 100096
    parameters), DDP holds 16 P, FSDP on 2 ranks 8 P; the twin adds 8 P and AdamW over the
    rank's share; the DDP probe keeps two DDP models (20 P each) and its buckets' replay."""
    params = ShardedParams(hidden=64, layers=2, batch=1, seq=16)
    p = model_size(params)
    assert p == 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64 == 100_096
    acts = activation_bytes(params, scores=False)
    assert acts == 2 * 18 * 16 * 64 * 4
    assert sharded_case_bytes(params, DDP, 2, scores=False) == 16 * p + 24 * p + 4 * p + acts
    block = 4 * (12 * 64 * 64 + 13 * 64)
    fsdp = 8 * p + block + 8 * p + 8 * p + 2 * block + acts
    assert sharded_case_bytes(params, FSDP, 2, scores=False) == fsdp
    assert ddp_case_bytes(params, scores=False) == 44 * p + acts
    # checkpointing keeps each block's input and one block's activations
    assert activation_bytes(params, False, checkpointed=True) == (2 * 16 * 64 + 18 * 16 * 64) * 4


def test_what_fits_names_strategies_batch_and_checkpointing() -> None:
    params = ShardedParams(hidden=64, layers=2, batch=4, seq=16)
    budget = sharded_case_bytes(params, FSDP, 2, scores=False) + 1
    fits = dict(what_fits(params, 2, False, budget))
    assert fits[FSDP] < budget and DDP not in fits and ZERO1 not in fits
    assert all(need <= budget for need in fits.values())
    roomy = dict(what_fits(params, 2, False, sharded_case_bytes(params, DDP, 2, False) - 1))
    assert "--batch 3" in roomy and "activation checkpointing" in roomy


@pytest.mark.gloo("sharded")
def test_a_strategy_that_does_not_fit_is_skipped_naming_what_fits(
    tmp_path: Path, gp: Gp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a device that holds FSDP on 2 ranks but not DDP (the fake device memory), DDP is
    skipped before it is built, with its need, the free memory and what fits; the run goes
    on and the advice names FSDP."""
    params = ShardedParams(hidden=64, layers=2, batch=1, seq=16)
    fsdp_need = sharded_case_bytes(params, FSDP, 2, scores=True)
    memory = int(fsdp_need / 0.9) + 4096
    assert sharded_case_bytes(params, DDP, 2, scores=True) > 0.9 * memory
    monkeypatch.setenv("GPUPROF_FAKE_DEVICE_MEMORY", str(memory))
    result = gp(
        "run", "sharded", "--gpus", "2", "--device", "cpu", "--out", tmp_path, "--no-telemetry",
        *TINY_DDP, "--strategies", "ddp,fsdp", "--budget-ms", "50", "--min-iters", "2",
        "--warmup", "1",
    )  # fmt: skip
    assert result.code == 0, result.err
    run = open_run(tmp_path / "0001_sharded")
    table = run.table("sharded")
    measured = set(zip(table["case_id"], table["world_size"], strict=True))
    assert measured == {(FSDP, 2)}
    skipped = {(s["case_id"], s["world_size"]): s for s in run.info["skipped"]}
    ddp = skipped[(DDP, 2)]
    assert ddp["need_bytes"] == sharded_case_bytes(params, DDP, 2, scores=True)
    assert ddp["free_bytes"] == memory and "does not fit" in ddp["reason"]
    assert [FSDP, fsdp_need] in ddp["fits_instead"]
    html = (run.path / "report.html").read_text()
    assert "Sharded ddp n=2 did not fit" in html and "What would fit: fsdp (about" in html
