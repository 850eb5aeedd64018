"""Sweep plan -> the command each node runs (building commands only; `supervise` runs them).

One job per sweep: every rank starts once and measures every scope with sub-groups.

- `local`: one node, `python -m torch.distributed.run` with the static rendezvous on loopback.
- `manual`: the same `gpuprof sweep` on every node with `--node-rank K --master-addr HOST`;
  each node runs torchrun with the static rendezvous (it works inside network namespaces,
  where c10d failed to find its own address). Node 0 holds the run folder; other nodes keep a
  copy of their own shards and send every record to node 0 through the process group.
- `slurm` (gpuprof/slurm.py): inside an allocation, `srun` starts one torchrun per node.

torchrun's CLI defaults (static rendezvous, no restarts) differ from the Python LaunchConfig's
(etcd, 3 restarts), so both are always given explicitly.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.plan import SweepPlan

LAUNCHERS = ("auto", "local", "manual", "slurm")
DEFAULT_PORT = 29500


def free_port() -> int:
    """An unused TCP port on loopback for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def this_host() -> str:
    """This node's name as gpuprof records it (GPUPROF_HOST overrides, for emulated nodes)."""
    return os.environ.get("GPUPROF_HOST") or socket.gethostname()


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    """Which launcher, and this node's place in a multi-node job."""

    launcher: str = "local"
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None


@dataclass(frozen=True, kw_only=True)
class NodeLaunch:
    """The command one node runs, and the environment it adds."""

    node_rank: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    local: bool = True  # the ranks run on this machine (not srun's remote nodes)

    def shell(self) -> str:
        """The command as one shell line (for --dry-run)."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def resolve_launcher(requested: str, environ: Mapping[str, str] | None = None) -> str:
    """auto -> 'torchrun' in a torchrun worker, else 'slurm' in an allocation, else local."""
    if requested != "auto":
        return requested
    from gpuprof.env import detect_launcher

    return detect_launcher(environ)


def torchrun_argv(*, nnodes: int, nproc: int, rdzv: list[str]) -> list[str]:
    """torchrun (as `python -m torch.distributed.run`) with no restarts."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        *rdzv,
        "--max-restarts",
        "0",
    ]


def static_rdzv(node_rank: int, addr: str, port: int) -> list[str]:
    """torchrun's static rendezvous: fixed node ranks, node 0 hosts the store."""
    return [
        "--node-rank",
        str(node_rank),
        "--rdzv-backend",
        "static",
        "--master-addr",
        addr,
        "--master-port",
        str(port),
    ]


def worker_argv(plan: SweepPlan, **where: Any) -> list[str]:
    """The rank-side entry with this node's run folder arguments (run_dir/out/home/...)."""
    argv = [
        "-m",
        "gpuprof.probes.sweep",
        "--device",
        plan.device,
        "--timeout",
        f"{plan.case_timeout_s:g}",
    ]
    for key, value in where.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (None, False):
            argv += [flag, str(value)]
    return argv


def worker_env(gpus_per_node: int, device: str) -> dict[str, str]:
    """Environment the ranks get: threads split between the ranks of a CPU node."""
    env = {}
    if "OMP_NUM_THREADS" not in os.environ:
        cores = os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // gpus_per_node) if device == "cpu" else 1)
    return env


def node_launch(plan: SweepPlan, node_rank: int, rdzv: list[str], **where: Any) -> NodeLaunch:
    argv = torchrun_argv(nnodes=plan.num_nodes, nproc=plan.gpus_per_node, rdzv=rdzv)
    return NodeLaunch(
        node_rank=node_rank,
        argv=argv + worker_argv(plan, **where),
        env=worker_env(plan.gpus_per_node, plan.device),
    )


def node_command(
    plan: SweepPlan,
    cfg: LaunchConfig,
    *,
    run_dir: Path | None,
    out: Path,
    handoff: Path | None = None,
) -> NodeLaunch:
    """What this node runs: node 0 (or the only node) holds the run folder."""
    if cfg.launcher == "local":
        rdzv = static_rdzv(0, "127.0.0.1", cfg.master_port or free_port())
        return node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
    if cfg.launcher == "manual":
        assert cfg.master_addr is not None
        rdzv = static_rdzv(cfg.node_rank, cfg.master_addr, cfg.master_port or DEFAULT_PORT)
        if cfg.node_rank == 0:
            return node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
        return node_launch(plan, cfg.node_rank, rdzv, out=out, handoff=handoff)
    if cfg.launcher == "slurm":
        from gpuprof.slurm import slurm_command

        return slurm_command(plan, cfg, run_dir)
    raise UsageError(f"unknown launcher {cfg.launcher!r}", f"choose from {', '.join(LAUNCHERS)}")


def dry_run_commands(plan: SweepPlan, cfg: LaunchConfig, out: Path) -> list[str]:
    """Every command the launch would run, one line per node (manual: one per node rank)."""
    run_dir = out / "NNNN_<tag>"
    if cfg.launcher == "manual":
        lines = []
        for node in range(plan.num_nodes):
            node_cfg = LaunchConfig(
                launcher="manual",
                node_rank=node,
                master_addr=cfg.master_addr,
                master_port=cfg.master_port,
            )
            launch = node_command(plan, node_cfg, run_dir=run_dir, out=out)
            lines.append(f"# node {node}\n{launch.shell()}")
        return lines
    return [node_command(plan, cfg, run_dir=run_dir, out=out).shell()]


def check_port_free(port: int) -> None:
    """A UsageError when this node cannot listen on `port` (the rendezvous would fail). The
    probe socket allows address reuse as the rendezvous store's own listener does, so the
    TIME_WAIT connections a run that just ended leaves on the port do not count; a process
    listening there does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            raise UsageError(
                f"port {port} is not free on this node ({exc.strerror})",
                "pass another --master-port",
            ) from None


def check_launch(plan: SweepPlan, cfg: LaunchConfig) -> LaunchConfig:
    """Validate the launcher against the plan and the environment; fill in defaults. Inside
    an srun step, `slurm` runs this node's ranks (gpuprof.slurm.step_config)."""
    if cfg.launcher == "slurm":
        from gpuprof.slurm import in_step, step_config

        if in_step():
            cfg = step_config(plan, cfg)
    # the node that hosts the rendezvous store must be able to listen on its port
    if cfg.launcher == "local" and cfg.master_port is not None:
        check_port_free(cfg.master_port)
    elif cfg.launcher == "slurm" or (cfg.launcher == "manual" and cfg.node_rank == 0):
        check_port_free(cfg.master_port or DEFAULT_PORT)
    if cfg.launcher == "local" and plan.num_nodes != 1:
        raise UsageError(
            f"--nodes {plan.num_nodes} needs --launcher manual or slurm",
            "the local launcher runs one node",
        )
    if cfg.launcher == "manual":
        if not cfg.master_addr:
            raise UsageError("--launcher manual needs --master-addr", "give node 0's address")
        if not 0 <= cfg.node_rank < plan.num_nodes:
            raise UsageError(f"--node-rank {cfg.node_rank} is outside 0..{plan.num_nodes - 1}")
    if cfg.launcher == "slurm":
        from gpuprof.slurm import check_slurm

        check_slurm(plan)
    return cfg
