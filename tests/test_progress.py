"""The live progress line: through a real pseudo-terminal it advances case by case; without a
terminal (CI logs) the per-case lines print and no control character does; -q prints neither."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

PLAN = [
    "sweep", "--device", "cpu", "--probes", "collectives", "--op", "all_reduce,all_gather",
    "--sizes", "1K,64K,1M", "--budget-ms", "200", "--no-report", "--no-telemetry",
]  # fmt: skip
DEADLINE_S = 240


def test_the_progress_line_advances_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuprof", *PLAN, "--out", str(tmp_path)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(leader)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text[-3000:]
    frames = re.findall(r"probe (\d)/1 collectives\s+\[[#-]+\]\s+(\d+)/(\d+)", text)
    done = [int(d) for _, d, _ in frames]
    assert len(set(done)) >= 3 and done == sorted(done), frames  # it moved, never back
    assert {int(total) for *_, total in frames} == {9}  # 3 sizes x (all_reduce + ag twice)
    assert "\r" in text  # redrawn in place
    assert "all_reduce float32 1 KiB in-place:" not in text  # the per-case lines stay off
    run = next(tmp_path.iterdir())
    assert "all_reduce float32 1 KiB in-place:" in (run / "logs" / "rank-00000.log").read_text()


def test_without_a_terminal_the_case_lines_print_and_no_control_character(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuprof", *PLAN, "--out", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    both = done.stdout + done.stderr
    assert "all_reduce float32 1 KiB in-place:" in both
    assert "\r" not in both and "\x1b" not in both
    quiet = subprocess.run(
        [sys.executable, "-m", "gpuprof", *PLAN, "--out", str(tmp_path / "b"), "-q"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        stdin=subprocess.DEVNULL,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "in-place:" not in quiet.stdout + quiet.stderr
    assert quiet.stdout.strip().endswith("0001_sweep")
