"""The torchrun command one node runs (building commands only; `supervise` runs them).

One job per sweep: every rank starts once and measures every scope with sub-groups. Each node
runs `python -m torch.distributed.run ... -m gpuprof.probes.sweep`. torchrun's CLI defaults
(static rendezvous, no restarts) differ from the Python LaunchConfig's (etcd, 3 restarts), so
both are always given explicitly.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.runs.plan import SweepPlan

DEFAULT_PORT = 29500


def free_port() -> int:
    """An unused TCP port on loopback for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    solo: bool = False  # the one rank itself, started without torchrun

    def shell(self) -> str:
        """The command as one shell line (for --dry-run)."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


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
    """torchrun with this node's rendezvous, starting the rank-side sweep."""
    argv = torchrun_argv(nnodes=plan.num_nodes, nproc=plan.gpus_per_node, rdzv=rdzv)
    return NodeLaunch(
        node_rank=node_rank,
        argv=argv + worker_argv(plan, **where),
        env=worker_env(plan.gpus_per_node, plan.device),
    )


def solo_launch(plan: SweepPlan, **where: Any) -> NodeLaunch:
    """A job of one rank on this machine: the rank-side sweep started directly, a world of
    one whose store lives in the rank (`gpuprof.probes._harness.init`). torchrun would add a
    second Python with its own torch import and a rendezvous: 2-4 s of every launch, which an
    A/B check pays six times or more."""
    return NodeLaunch(
        node_rank=0,
        argv=[sys.executable, *worker_argv(plan, **where)],
        env=worker_env(1, plan.device),
        solo=True,
    )


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
