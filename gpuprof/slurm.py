"""The Slurm launcher: inside an allocation, `srun` starts one torchrun per node with the c10d
rendezvous on this (the first) node and `--rdzv-id $SLURM_JOB_ID`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpuprof.errors import UsageError
from gpuprof.launch import DEFAULT_PORT, LaunchConfig, NodeLaunch, node_launch, this_host
from gpuprof.plan import SweepPlan


def slurm_command(plan: SweepPlan, cfg: LaunchConfig, run_dir: Path | None) -> NodeLaunch:
    """srun with one torchrun per node, c10d rendezvous on this node, id = the Slurm job."""
    host = this_host()
    job = os.environ.get("SLURM_JOB_ID", "JOBID")
    rdzv = [
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{host}:{cfg.master_port or DEFAULT_PORT}",
        "--rdzv-id",
        job,
    ]
    srun = [
        "srun",
        "--nodes",
        str(plan.num_nodes),
        "--ntasks",
        str(plan.num_nodes),
        "--ntasks-per-node",
        "1",
        "--kill-on-bad-exit=1",
    ]
    inner = node_launch(plan, 0, rdzv, run_dir=run_dir, home_host=host)
    return NodeLaunch(node_rank=0, argv=srun + inner.argv, env=inner.env, local=False)


def slurm_hostnames(nodelist: str) -> list[str]:
    """Expand a Slurm nodelist with `scontrol show hostnames`."""
    try:
        result = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"cannot expand the Slurm nodelist {nodelist!r}: {exc}") from exc
    return result.stdout.split()


def _slurm_gpus(environ: Mapping[str, str]) -> int | None:
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = environ.get(name, "")
        if value:
            return int(value.split(":")[-1].split("(")[0])
    return None


def check_slurm(plan: SweepPlan, environ: Mapping[str, str] | None = None) -> list[str]:
    """The allocation's hosts; a UsageError when N and G do not fit it."""
    env = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in env:
        raise UsageError(
            "--launcher slurm outside a Slurm allocation",
            "run inside salloc/sbatch, or use --launcher local or manual",
        )
    hosts = slurm_hostnames(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")))
    if plan.num_nodes > len(hosts):
        raise UsageError(
            f"--nodes {plan.num_nodes} but the allocation has {len(hosts)} node(s)",
            f"use --nodes {len(hosts)} or fewer",
        )
    gpus = _slurm_gpus(env)
    if plan.device == "cuda" and gpus is not None and plan.gpus_per_node > gpus:
        raise UsageError(
            f"--gpus {plan.gpus_per_node} but the allocation has {gpus} per node",
            f"use --gpus {gpus} or fewer",
        )
    if this_host() not in hosts:
        raise UsageError(
            f"this host {this_host()} is not in the allocation ({', '.join(hosts)})",
            "run gpuprof sweep from the batch script, on the first node",
        )
    return hosts
