"""The pipeline probe on real gloo ranks: every schedule timed, summarised and drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.runs.store import open_run
from gpuprof.specs.pipeline import PIPELINE_SCHEDULES
from tests.conftest import Gp

SMALL = [
    "--pp-hidden",
    "128",
    "--stage-layers",
    "2",
    "--mb-rows",
    "8",
    "--budget-ms",
    "50",
    "--min-iters",
    "2",
    "--warmup",
    "1",
    "--no-telemetry",
    "--device",
    "cpu",
]


@pytest.mark.gloo("pipeline")
def test_every_schedule_on_two_ranks(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run",
        "pipeline",
        "--gpus",
        "2",
        "--out",
        tmp_path,
        *SMALL,
        "--schedules",
        ",".join(PIPELINE_SCHEDULES),
        "--micro-batches",
        "2,4",
    )
    assert result.code == 0, result.err
    assert "bubble%" in result.out and "theory%" in result.out
    run = open_run(tmp_path / "0001_pipeline")
    timeline = run.table("pipeline_timeline")
    assert {"F", "B", "W", "WAIT"} <= set(timeline["kind"])
    assert (timeline["end_us"] >= timeline["start_us"]).all()
    summary = {
        (r["schedule"], r["m"]): r
        for r in gp("show", run.path, "--table", "pipeline", "--format", "json").json()
    }
    skipped = {s["case_id"] for s in run.info["skipped"]}
    for schedule in PIPELINE_SCHEDULES:
        for m in (2, 4):
            assert (schedule, m) in summary or f"{schedule}.m{m}" in skipped, (schedule, m)
    for (schedule, m), row in summary.items():
        assert 0 <= float(row["bubble_pct"]) < 100, row  # type: ignore[arg-type]
        forwards = timeline[
            (timeline["case_id"] == f"{schedule}.m{m}")
            & (timeline["kind"] == "F")
            & (timeline["iteration"] == 0)
        ]
        v = int(row["v"])  # type: ignore[call-overload]
        assert len(forwards) == 2 * v * m  # every stage forwards every micro-batch once
        assert float(row["clock_error_us"]) < 50_000  # type: ignore[arg-type]
    assert summary[("GPipe", 4)]["theory_pct"] == 100 * 1 / 5
    html = (run.path / "report.html").read_text("utf-8")
    assert html.count("(median step; measured bubble") == len({s for s, _ in summary})
    assert 'id="pipeline-summary"' in html and 'id="pipeline-stages"' in html


def test_one_rank_is_skipped_and_bad_weights_refused(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run",
        "pipeline",
        "--gpus",
        "1",
        "--out",
        tmp_path / "one",
        *SMALL,
        "--schedules",
        "GPipe",
        "--micro-batches",
        "2",
    )
    assert result.code == 0, result.err
    run = open_run(tmp_path / "one" / "0001_pipeline")
    assert run.info["skipped"][0]["reason"] == "a pipeline needs at least 2 ranks"
    bad = gp(
        "run",
        "pipeline",
        "--gpus",
        "2",
        "--out",
        tmp_path / "bad",
        *SMALL,
        "--stage-weights",
        "1,2,1",
    )
    assert bad.code == 2 and "--stage-weights has 3 entries for 2 stages" in bad.err
    assert not (tmp_path / "bad").exists()
    for args, message in (
        (["--schedules", "Magic"], "unknown pipeline schedule"),
        (["--micro-batches", "four"], "invalid --micro-batches"),
        (["--chunks", "1"], "--chunks at least 2"),
    ):
        bad = gp("run", "pipeline", "--out", tmp_path / "bad", *SMALL, *args)
        assert bad.code == 2 and message in bad.err, bad.err


def test_sweep_takes_every_probe_option(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "sweep",
        "--dry-run",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        tmp_path,
        "--pp-hidden",
        "128",
        "--stage-weights",
        "1,2",
        "--schedules",
        "GPipe",
        "--hidden",
        "64",
        "--layers",
        "2",
        "--ddp-variants",
        "default,accum=2",
        "--p2p-bytes",
        "1M",
        "--matmul-n",
        "64",
        "--op",
        "all_reduce",
    )
    assert result.code == 0, result.err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
