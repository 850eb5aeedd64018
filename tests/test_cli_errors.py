"""Bad input exits 2 with one line naming the problem, and writes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import Gp


def test_unwritable_out(tmp_path: Path, gp: Gp) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = gp("sweep", "--device", "cpu", "--out", str(blocker / "runs"))
    assert result.code == 2
    assert "is not writable" in result.err and result.err.count("\n") == 1
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["show", "report"])
def test_missing_run(tmp_path: Path, gp: Gp, command: str) -> None:
    for spec in ("latest", "7", str(tmp_path / "nope")):
        result = gp(command, spec, "--out", str(tmp_path))
        assert result.code == 2
        assert "no run" in result.err and result.err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_show_unknown_table(two_rank_run: Path, gp: Gp) -> None:
    result = gp("show", str(two_rank_run), "--table", "telemetry")
    assert result.code == 2 and "'telemetry' is not one of" in result.err


def test_cuda_without_gpu(tmp_path: Path, gp: Gp) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = gp("sweep", "--device", "cuda", "--out", str(tmp_path / "r"))
    assert result.code == 2 and "no CUDA GPU is visible" in result.err


def test_gpus_per_node_is_gpus_as_slurm_spells_it(gp: Gp) -> None:
    plain = gp("sweep", "--gpus", "3", "--suite", "ci", "--dry-run", "--force")
    slurm = gp("sweep", "--gpus-per-node", "3", "--suite", "ci", "--dry-run", "--force")
    assert plain.code == slurm.code == 0, slurm.err
    assert "--nproc-per-node 3" in slurm.out
    assert re.sub(r"--master-port \d+", "", plain.out) == re.sub(
        r"--master-port \d+", "", slurm.out
    )


def test_shell_completion_as_the_readme_says() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "COMP_WORDS": "gpuprof pre", "COMP_CWORD": "1",
           "_GPUPROF_COMPLETE": "bash_complete"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gpuprof"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert "plain,predict" in done.stdout.split(), done.stdout + done.stderr  # click: type,value
