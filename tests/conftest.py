"""Shared fixtures: run the CLI in-process, and real gloo sweeps shared across tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from gpuprof.cli import main

# The property tests draw the same examples on every run: a new random example must not turn
# one CI run red and the next green. `pytest --hypothesis-profile explore` searches anew; add
# what it finds as an @example.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("repeatable")

FAST = ["--sizes", "1K,64K", "--budget-ms", "5", "--min-iters", "3", "--warmup", "1"]
# the training micro-benchmarks have their own tests; other sweeps leave them out for speed
BASE_PROBES = ["--probes", "collectives,p2p,memory,compute"]
TINY_DDP = ["--hidden", "64", "--layers", "2", "--batch", "1", "--seq", "16"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> list[dict[str, object]]:
        data = json.loads(self.out)
        assert isinstance(data, list)
        return data


Gp = Callable[..., Result]


@pytest.fixture
def gp(capsys: pytest.CaptureFixture[str]) -> Gp:
    """Call `gpuprof ARGS...` in this process; return exit code, stdout and stderr."""

    def call(*args: str) -> Result:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return call


def sweep_run(out: Path, gpus: int, *extra: str, gp: Gp | None = None) -> tuple[int, Path]:
    """A real quick gloo sweep through the CLI; returns the exit code and the run folder."""
    probes = [] if "--probes" in extra else BASE_PROBES
    args = ["sweep", "--gpus", str(gpus), "--device", "cpu", "--out", str(out), *FAST, *probes]
    args += extra
    code = gp(*args).code if gp else main(args)
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    return code, runs[-1]


@pytest.fixture(scope="session")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 2-rank sweep of every op, shared by the tests that only read a run."""
    out = tmp_path_factory.mktemp("sweep2")
    code, run_dir = sweep_run(out, 2)
    assert code == 0
    return run_dir
