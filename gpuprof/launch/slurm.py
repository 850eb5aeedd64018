"""The Slurm launcher: inside an allocation, `srun` starts one torchrun per node with the c10d
rendezvous on this (the first) node and `--rdzv-id $SLURM_JOB_ID`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from gpuprof.errors import UsageError
from gpuprof.launch.torchrun import DEFAULT_PORT, LaunchConfig, NodeLaunch, node_launch
from gpuprof.machine.env import this_host
from gpuprof.runs.plan import SweepPlan


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


# Slurm's pseudo-steps (batch script, extern, interactive): not an srun step
PSEUDO_STEPS = ("4294967294", "4294967291", "4294967290", "4294967292")


def in_step(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a task of an srun step (SLURM_STEP_ID of a real step)."""
    step = (os.environ if environ is None else environ).get("SLURM_STEP_ID", "")
    return step.isdigit() and step not in PSEUDO_STEPS


def step_config(
    plan: SweepPlan, cfg: LaunchConfig, environ: Mapping[str, str] | None = None
) -> LaunchConfig:
    """Inside an srun step with one gpuprof per node, run this node's ranks instead of
    starting srun again: the manual launcher with node rank SLURM_NODEID and the step's first
    node as the rendezvous host (node 0 holds the run)."""
    env = os.environ if environ is None else environ
    nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or "1")
    if nodes != plan.num_nodes:
        raise UsageError(
            f"--nodes {plan.num_nodes} but this srun step has {nodes} node(s)",
            f"use --nodes {nodes}",
        )
    tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE") or "1"
    if tasks.split("(")[0] != "1":
        raise UsageError(
            f"this srun step runs {tasks.split('(')[0]} tasks per node; gpuprof starts the "
            "ranks of its node itself",
            "srun --ntasks-per-node 1 gpuprof sweep --launcher slurm ...",
        )
    hosts = slurm_hostnames(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
    if not hosts:
        raise UsageError("this srun step names no nodes (SLURM_STEP_NODELIST is empty)")
    return replace(
        cfg, launcher="manual", node_rank=int(env.get("SLURM_NODEID", "0")), master_addr=hosts[0]
    )
