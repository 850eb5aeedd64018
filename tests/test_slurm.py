"""The Slurm launcher without Slurm: fake srun and scontrol on PATH run each node's torchrun
locally with the variables a real allocation sets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.launch import free_port

FAKE = Path(__file__).resolve().parent / "fake_slurm"
HOSTS = "localhost vm"  # both resolve to this machine; the first runs `gpuprof sweep`


def slurm_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{FAKE}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "fake[0-1]",
        "SLURM_JOB_NUM_NODES": "2",
        "FAKE_SLURM_HOSTS": HOSTS,
        "GPUPROF_HOST": "localhost",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def gpuprof(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )


@pytest.mark.slow
def test_fake_slurm_sweep(tmp_path: Path) -> None:
    result = gpuprof(
        "sweep",
        "--nodes",
        "2",
        "--gpus",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "-o",
        "all_reduce,broadcast",
        "--sizes",
        "4K",
        "--budget-ms",
        "5",
        "--master-port",
        str(free_port()),
        env=slurm_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = open_run("latest", tmp_path)
    assert run.info["launcher"] == "slurm" and run.info["status"] == "complete"
    assert run.info["env"]["SLURM_JOB_ID"] == "4242"
    frame = run.table("collectives")
    assert set(frame["host"]) == {"localhost", "vm"}
    assert set(frame["scope"]) == {"inter", "global"}


def test_dry_run_shows_srun_and_torchrun(tmp_path: Path) -> None:
    result = gpuprof(
        "sweep",
        "--nodes",
        "2",
        "--gpus",
        "4",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--dry-run",
        env=slurm_env(),
    )
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 1  # one srun for the job, after the estimate's comment lines
    line = commands[0]
    assert "# in all about" in result.stdout
    assert "srun --nodes 2 --ntasks 2 --ntasks-per-node 1" in line
    assert "--rdzv-backend c10d --rdzv-endpoint localhost:29500 --rdzv-id 4242" in line
    assert "--nproc-per-node 4" in line and "--home-host localhost" in line
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--nodes", "3"], {}, "--nodes 3 but the allocation has 2 node(s)"),
        (["--nodes", "2"], {"GPUPROF_HOST": "login1"}, "this host login1 is not in the allocation"),
        (["--nodes", "2", "--launcher", "slurm"], {"SLURM_JOB_ID": ""}, None),
    ],
)
def test_slurm_checks_the_allocation(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str | None
) -> None:
    environ = slurm_env(**env)
    if message is None:
        del environ["SLURM_JOB_ID"]
        message = "--launcher slurm outside a Slurm allocation"
    result = gpuprof("sweep", "--device", "cpu", "--out", str(tmp_path), *args, env=environ)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_manual_dry_run_prints_every_node(tmp_path: Path) -> None:
    result = gpuprof(
        "sweep",
        "--launcher",
        "manual",
        "--nodes",
        "2",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--master-addr",
        "10.0.0.1",
        "--out",
        str(tmp_path),
        "--dry-run",
        env={**os.environ},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "# node 0" in out and "# node 1" in out
    assert out.count("--rdzv-backend static --master-addr 10.0.0.1 --master-port 29500") == 2
    assert "--node-rank 1" in out and "--home" in out and "--out" in out


def test_manual_needs_master_addr(tmp_path: Path) -> None:
    result = gpuprof(
        "sweep",
        "--launcher",
        "manual",
        "--nodes",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        env={**os.environ},
    )
    assert result.returncode == 2 and "needs --master-addr" in result.stderr
