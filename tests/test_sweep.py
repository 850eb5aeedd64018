"""Real sweeps through the CLI: torchrun + gloo on CPU with 1, 2 and 4 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.analysis.bandwidth import bus_factor
from gpuprof.specs.collectives import OPS
from tests.conftest import FAST, Gp, sweep_run


def _every_op_every_size(rows: list[dict[str, object]], scope: str, n: int) -> None:
    seen = {
        (r["op"], r["size_bytes"]) for r in rows if r["scope"] == scope and r["world_size"] == n
    }
    per_rank = {"all_gather", "reduce_scatter", "all_to_all"}
    for op in OPS:
        if op == "sendrecv" and n == 1:
            continue
        for size in (1024, 64 << 10):
            assert (op, size - size % (4 * n) if op in per_rank else size) in seen, (op, size)


def test_two_rank_sweep_lists_every_op_and_size(two_rank_run: Path, gp: Gp) -> None:
    result = gp("show", str(two_rank_run), "--format", "json")
    assert result.code == 0
    rows = result.json()
    _every_op_every_size(rows, "global", 2)
    for row in rows:
        assert row["nwrong"] == 0
        factor = bus_factor(str(row["op"]), int(row["world_size"]))  # type: ignore[call-overload]
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor)  # type: ignore[operator]
        assert row["time_us"] > 0  # type: ignore[operator]
    # all_gather and reduce_scatter are measured both in place and out of place
    modes = {r["in_place"] for r in rows if r["op"] == "all_gather"}
    assert modes == {True, False}


def test_two_rank_run_describes_itself(two_rank_run: Path) -> None:
    run = open_run(two_rank_run)
    info = run.info
    assert info["status"] == "complete"
    assert (info["device"], info["backend"], info["world_size"]) == ("cpu", "gloo", 2)
    assert info["versions"]["torch"]
    assert info["nodes"][0]["cpu"]["logical_cores"] >= 1
    assert [r["rank"] for r in info["ranks"]] == [0, 1]
    assert info["argv"][:2] == ["gpuprof", "sweep"]
    frame = run.table("collectives")
    assert set(frame["rank"]) == {0, 1}
    assert (two_rank_run / "report.html").exists()


def test_one_rank_sweep(tmp_path: Path, gp: Gp) -> None:
    code, run_dir = sweep_run(tmp_path, 1, gp=gp)
    assert code == 0
    rows = gp("show", str(run_dir), "--format", "json").json()
    _every_op_every_size(rows, "global", 1)
    assert all(r["busbw_gbps"] == 0 for r in rows if r["op"] == "all_reduce")
    skipped = open_run(run_dir).info["skipped"]
    assert {s["case_id"].split(".")[0] for s in skipped} == {"sendrecv"}


@pytest.mark.slow
def test_four_rank_sweep_measures_intra_and_global(tmp_path: Path, gp: Gp) -> None:
    code, run_dir = sweep_run(tmp_path, 4, "--op", "all_reduce,all_gather,sendrecv", gp=gp)
    assert code == 0
    rows = gp("show", str(run_dir), "--format", "json").json()
    scopes = {(r["scope"], r["world_size"]) for r in rows}
    assert scopes == {("intra", 2), ("global", 4)}
    assert all(r["nwrong"] == 0 for r in rows)
    csv = gp("show", str(run_dir), "--format", "csv").out.splitlines()
    assert csv[0].startswith("case_id,op,dtype") and len(csv) == len(rows) + 1


def test_correctness_check_catches_a_corrupted_rank(
    tmp_path: Path, gp: Gp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPROF_FAULT_RANK", "0")
    code, run_dir = sweep_run(tmp_path, 2, "--dtype", "bfloat16", gp=gp)
    assert code == 0  # wrong results are data, not a crash
    rows = gp("show", str(run_dir), "--format", "json").json()
    assert {r["op"] for r in rows if r["nwrong"] > 0} == set(OPS)  # type: ignore[operator]
    assert "returned wrong results" in (run_dir / "report.html").read_text()


@pytest.mark.gloo("collectives")
def test_gpuprof_run_prints_an_nccl_tests_table(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run",
        "collectives",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--op",
        "all_reduce",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "2",
        "--budget-ms",
        "5",
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "busbw_GB/s" in lines[0] and "#wrong" in lines[0]
    assert [line.split()[4] for line in lines[1:4]] == ["1", "2", "4"]  # 1 KiB .. 4 KiB


def test_dry_run_prints_the_launch_and_writes_nothing(tmp_path: Path, gp: Gp) -> None:
    out = tmp_path / "runs"
    result = gp("sweep", "--gpus", "3", "--device", "cpu", "--out", str(out), "--dry-run")
    assert result.code == 0
    assert "torch.distributed.run" in result.out and "--nproc-per-node 3" in result.out
    assert "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0" in result.out
    assert not out.exists()


def test_sweep_flags_reach_the_plan(tmp_path: Path) -> None:
    code, run_dir = sweep_run(tmp_path, 2, "--op", "broadcast", "--mode", "out_of_place")
    assert code == 0
    frame = open_run(run_dir).table("collectives")
    assert set(frame["op"]) == {"broadcast"} and set(frame["in_place"]) == {True}
    assert FAST[1] == "1K,64K" and set(frame["size_bytes"]) == {1024, 65536}


def test_no_check_leaves_nwrong_missing_not_zero(tmp_path: Path, gp: Gp) -> None:
    code, run_dir = sweep_run(tmp_path, 2, "--op", "all_reduce", "--no-check", gp=gp)
    assert code == 0
    rows = gp("show", str(run_dir), "--format", "json").json()
    assert rows and all(r["nwrong"] is None for r in rows)
    assert "not checked for correctness" in (run_dir / "report.html").read_text()
