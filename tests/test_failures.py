"""A rank that dies or hangs ends the sweep within --timeout, names itself, and loses nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof import open_run
from gpuprof.runs.records import iter_run_records
from tests.conftest import FAST

TIMEOUT_S = 8


def start(out: Path, *extra: str, ignore_sigint: bool = False) -> subprocess.Popen[str]:
    """A 2-rank sweep in its own session. `ignore_sigint`: started as nohup and some CI
    runners start processes, with SIGINT ignored (inherited across exec)."""
    argv = [
        sys.executable,
        "-m",
        "gpuprof",
        "sweep",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--timeout",
        str(TIMEOUT_S),
        "--sizes",
        "1K,64K,256K",
        "--budget-ms",
        "250",
        "--warmup",
        "1",
        *extra,
    ]
    if ignore_sigint:  # the shell ignores SIGINT, and exec keeps it ignored
        argv = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def processes_of(run_dir: Path) -> list[str]:
    """Command lines of the processes still working on this run (torchrun, ranks, sampler)."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(run_dir) in line:
            found.append(line)
    return found


def wait_until_gone(run_dir: Path, seconds: float = 20.0) -> list[str]:
    """Wait (bounded) until no process works on `run_dir`; what is left."""
    deadline = time.monotonic() + seconds
    while (left := processes_of(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def completed_cases(run_dir: Path) -> set[str]:
    """Cases with a record from both ranks."""
    ranks: dict[str, set[int]] = {}
    for rec in iter_run_records(run_dir):
        if rec["type"] == "case":
            ranks.setdefault(rec["case_id"], set()).add(rec["rank"])
    return {case for case, seen in ranks.items() if seen == {0, 1}}


def wait_for_cases(
    out: Path, count: int, proc: subprocess.Popen[str]
) -> tuple[Path, dict[int, int]]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list(out.glob("*/run.json"))
        if runs and proc.poll() is None:
            run_dir = runs[0].parent
            info = json.loads(runs[0].read_text())
            if info.get("ranks") and len(completed_cases(run_dir)) >= count:
                return run_dir, {r["rank"]: r["pid"] for r in info["ranks"]}
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the sweep never got going")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_lost_rank_ends_the_sweep_and_keeps_every_completed_case(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = start(tmp_path)
    run_dir, pids = wait_for_cases(tmp_path, 4, proc)
    os.kill(pids[1], sig)
    killed_at = time.monotonic()
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S + 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[1], signal.SIGKILL)  # never leave a stopped rank behind
    elapsed = time.monotonic() - killed_at
    print(f"\n{sig.name}: exit {proc.returncode} after {elapsed:.1f} s")
    assert proc.returncode == 3, err
    assert elapsed <= TIMEOUT_S + 10
    assert err.strip().splitlines()[-1].startswith("gpuprof: error: run partial: rank 1")
    run = open_run(run_dir)
    assert run.info["status"] == "partial"
    failure = run.info["failures"][0]
    assert failure["rank"] == 1 and failure["probe"] == "collectives" and failure["case_id"]
    kept = set(run.table("collectives")["case_id"])
    done = completed_cases(run_dir)
    print(f"{len(done)} cases completed before the {sig.name}; {len(kept & done)} kept")
    assert done <= kept
    html = (run_dir / "report.html").read_text()
    assert "Failure:" in html and "rank 1" in html


SIGNAL_TRIALS = 5


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(SIGNAL_TRIALS))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_a_stop_signal_ends_the_run_cleanly(
    tmp_path: Path, sig: signal.Signals, trial: int
) -> None:
    """SIGINT (Ctrl-C), SIGTERM (Slurm's time limit, timeout, Kubernetes) and SIGHUP at a
    point of the sweep that differs per trial: exit 3 with one line, run partial with the
    reason, completed cases kept, a report, nothing left running. SIGINT is sent to a
    launcher started with SIGINT ignored, the way a Ctrl-C was once lost in CI."""
    proc = start(tmp_path, ignore_sigint=sig == signal.SIGINT)
    run_dir, _ = wait_for_cases(tmp_path, 1 + trial % 4, proc)
    time.sleep(0.05 * trial)  # inside a case, between cases: a different point each trial
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 3, err
    lines = [line for line in err.splitlines() if line.startswith("gpuprof: error:")]
    assert len(lines) == 1 and f"interrupted ({sig.name})" in lines[0], err[-2000:]
    assert "Traceback" not in err  # torchrun's, when stopped, goes to the run's log
    assert (run_dir / "torchrun.log").exists()
    run = open_run(run_dir)
    assert run.info["status"] == "partial"
    assert f"interrupted ({sig.name})" in run.info["failures"][0]["error"]
    assert completed_cases(run_dir) <= set(run.table("collectives")["case_id"])
    assert (run_dir / "report.html").exists()
    assert wait_until_gone(run_dir) == []


@pytest.mark.slow
def test_ranks_do_not_outlive_a_killed_launcher(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) on the launcher: torchrun and the ranks notice and exit
    within seconds instead of running on as orphans."""
    proc = start(tmp_path)
    run_dir, _ = wait_for_cases(tmp_path, 1, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert wait_until_gone(run_dir, 30.0) == []


@pytest.mark.slow
def test_resume_measures_only_the_missing_cases(tmp_path: Path) -> None:
    proc = start(tmp_path)
    run_dir, pids = wait_for_cases(tmp_path, 4, proc)
    os.kill(pids[1], signal.SIGKILL)
    proc.communicate(timeout=60)
    before = completed_cases(run_dir)
    first_times = {
        (rec["case_id"], rec["rank"]): rec["times_us"]
        for rec in iter_run_records(run_dir)
        if rec["type"] == "case"
    }
    # the dry run says what a resume would still measure, and writes nothing
    preview = subprocess.run(
        [sys.executable, "-m", "gpuprof", "sweep", "--resume", run_dir.name, "--out",
         str(tmp_path), "--dry-run"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert preview.returncode == 0, preview.stderr[-2000:]
    measured = len(before)  # case ids both ranks recorded (one scope here)
    assert f"# collectives: {measured} of 27 cases measured, {27 - measured} left" in preview.stdout
    assert completed_cases(run_dir) == before
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprof",
            "sweep",
            "--resume",
            run_dir.name,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = open_run(run_dir)
    assert run.info["status"] == "complete" and run.info["failures"] == []
    assert run.info["attempts"][0]["completed_before"] == len(before)
    frame = run.table("collectives")
    assert frame["case_id"].nunique() == 27  # 9 op/mode pairs x 3 sizes, each once
    assert frame.groupby(["case_id", "rank"])["iteration"].apply(lambda s: s.is_unique).all()
    for case_id in before:  # completed cases were not measured again
        rows = frame[(frame["case_id"] == case_id) & (frame["rank"] == 0)]
        assert list(rows.sort_values("iteration")["time_us"]) == first_times[(case_id, 0)]


def test_a_rank_that_raises_leaves_its_traceback_and_every_ranks_log(
    tmp_path: Path, gp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 raises in its second case (the test-only hook): the traceback is in run.json's
    failures and in the report's failure banner, and each rank's output in logs/."""
    monkeypatch.setenv("GPUPROF_FAULT_RAISE", "1:collectives/*all_reduce*65536*")
    args = ["sweep", "--device", "cpu", "--out", str(tmp_path), "--timeout", "30", *FAST]
    result = gp(*args, "--probes", "collectives", "--op", "all_reduce", "--no-telemetry")
    assert result.code == 3, result.err
    run = open_run("latest", tmp_path)
    failure = run.info["failures"][0]  # the rank that raised, named first
    assert failure["rank"] == 1 and "RuntimeError: test fault" in failure["traceback"]
    assert "gpuprof: error: run partial: rank 1" in result.err
    assert "Traceback (most recent call last)" in failure["traceback"]
    html = (run.path / "report.html").read_text()
    assert "<summary>traceback</summary>" in html and "RuntimeError: test fault" in html
    logs = {p.name: p.read_text() for p in (run.path / "logs").iterdir()}
    assert set(logs) == {"rank-00000.log", "rank-00001.log"}
    assert "all_reduce float32 1 KiB" in logs["rank-00000.log"]  # the case lines rank 0 printed
    assert "RuntimeError: test fault" in logs["rank-00001.log"]


def test_the_rank_that_raised_comes_before_a_rank_stopped_with_the_job() -> None:
    """Rank 1 raised and wrote why; torchrun names it as the first failure and ends the group,
    stopping rank 0 inside the collective before it could write anything (a race CI once lost:
    rank 0 was then named first). Rank 1 comes first, rank 0 after it; with no rank lost (a
    hang), a silent rank still comes first."""
    from dataclasses import dataclass, field

    from gpuprof.runs import finish

    events = {
        "skip": [],
        "failure": [
            {
                "rank": 1,
                "host": "h",
                "probe": "collectives",
                "case_id": "c",
                "error": "E",
                "traceback": "Traceback ... RuntimeError",
            }
        ],
        "in_flight": [{"rank": 0, "host": "h", "probe": "collectives", "case_id": "c"}],
    }

    @dataclass
    class End:
        returncode: int = 1
        reason: str | None = None
        lost: dict[int, str] = field(default_factory=dict)

    raised = finish._failures(events, End(lost={1: "rank process exited with 1"}))
    assert [f["rank"] for f in raised] == [1, 0]
    assert "traceback" in raised[0] and "no record after this case started" in raised[1]["error"]
    assert [f["rank"] for f in finish._failures(events, End())] == [0, 1]
