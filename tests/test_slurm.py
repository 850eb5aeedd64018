"""The Slurm launcher without Slurm: fake srun and scontrol on PATH run each node's torchrun
locally with the variables a real allocation sets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.launch.torchrun import free_port

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
        "--op",
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


def step_env(node: int, **extra: str) -> dict[str, str]:
    """What srun sets in each task of a 2-node step with one task per node."""
    step = {
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": str(node),
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "fake[0-1]",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    }
    return slurm_env(**{**step, **extra})


def test_inside_an_srun_step_each_node_runs_its_own_ranks(tmp_path: Path) -> None:
    """`srun --ntasks-per-node 1 gpuprof sweep --launcher slurm`: no nested srun; node k runs
    its torchrun with node rank SLURM_NODEID against the step's first node."""
    args = ["sweep", "--launcher", "slurm", "--nodes", "2", "--gpus", "1", "--device", "cpu"]
    dry = gpuprof(*args, "--out", str(tmp_path), "--dry-run", env=step_env(1))
    assert dry.returncode == 0, dry.stderr
    assert "srun --nodes" not in dry.stdout and "# node 1" in dry.stdout
    assert "--master-addr localhost" in dry.stdout
    port = str(free_port())
    fast = ["--op", "all_reduce", "--sizes", "4K", "--budget-ms", "5", "--probes", "collectives"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuprof",
                *args,
                *fast,
                "--master-port",
                port,
                "--out",
                str(tmp_path / f"n{node}"),
                "--no-report",
            ],
            env=step_env(node, GPUPROF_HOST=["localhost", "vm"][node]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    run = open_run("latest", tmp_path / "n0")
    assert run.info["status"] == "complete"
    assert set(run.table("collectives")["host"]) == {"localhost", "vm"}


@pytest.mark.parametrize(
    ("extra", "args", "message"),
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "8(x2)"}, [], "this srun step runs 8 tasks per node"),
        ({}, ["--nodes", "3"], "--nodes 3 but this srun step has 2 node(s)"),
    ],
)
def test_an_srun_step_that_does_not_fit_is_refused(
    tmp_path: Path, extra: dict[str, str], args: list[str], message: str
) -> None:
    base = ["sweep", "--launcher", "slurm", "--device", "cpu", "--nodes", "2", "--gpus", "1"]
    result = gpuprof(*base, *args, "--out", str(tmp_path), env=step_env(0, **extra))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and not tmp_path.joinpath("0001_sweep").exists()
