"""Bad input exits 2 with one line naming the problem, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Gp


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--op", "all_gatherr"], "unknown op 'all_gatherr'"),
        (["--sizes", "1K,1Q"], "invalid size '1Q'"),
        (["-b", "1Q"], "invalid size '1Q'"),
        (["-b", "1M", "-e", "1K"], "larger than --max-bytes"),
        (["--gpus", "0"], "--gpus must be at least 1"),
        (["--dtype", "float64"], "unknown dtype 'float64'"),
        (["--sizes", "1K", "-b", "8"], "cannot be combined"),
        (["--tag", "../x"], "invalid --tag"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--suite", "huge"], "Invalid value for '--suite'"),
        (["--bogus"], "No such option"),
    ],
)
def test_bad_sweep_input(tmp_path: Path, gp: Gp, args: list[str], message: str) -> None:
    out = tmp_path / "runs"
    result = gp("sweep", "--device", "cpu", "--out", str(out), *args)
    assert result.code == 2
    assert result.err.count("\n") == 1 and message in result.err, result.err
    assert result.err.startswith("gpuprof: error: ")
    assert result.out == ""
    assert not out.exists()


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


def test_debug_shows_the_traceback(gp: Gp) -> None:
    from gpuprof.errors import UsageError

    with pytest.raises(UsageError):
        gp("--debug", "sweep", "--device", "cpu", "--gpus", "0")
