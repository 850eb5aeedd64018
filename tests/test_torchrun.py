"""Probes and `gpuprof sweep` also run under torchrun directly; rank 0 holds the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.launch.torchrun import free_port


@pytest.mark.slow
@pytest.mark.parametrize("entry", [["gpuprof.probes.collectives"], ["gpuprof", "sweep"]])
def test_torchrun_module_entry(tmp_path: Path, entry: list[str]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "static",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "-m",
        *entry,
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--op",
        "all_reduce,reduce_scatter",
        "--sizes",
        "4K",
        "--budget-ms",
        "5",
    ]
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    if entry[0] == "gpuprof.probes.collectives":
        assert "busbw_GB/s" in lines[0]
    assert lines[-1].endswith("report.html")
    run = open_run("latest", tmp_path)
    assert run.info["status"] == "complete" and run.info["launcher"] == "torchrun"
    assert set(run.table("collectives")["op"]) == {"all_reduce", "reduce_scatter"}
    assert (run.path / "report.html").exists()
