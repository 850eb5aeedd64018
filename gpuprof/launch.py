"""Sweep plan -> launcher command lines, supervision, timeouts, and the end of a run.

The `local` launcher starts every rank of one node once with torchrun's static rendezvous
(`python -m torch.distributed.run --rdzv-backend static --max-restarts 0 ...`); each rank runs
`gpuprof.probes.sweep` and measures every scope inside that one job with sub-groups. Multi-node
launchers produce one such command per node (static rendezvous with the same master address).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.plan import SweepPlan
from gpuprof.records import RANKS_DIR
from gpuprof.store import consolidate, run_events, update_run_json

PROGRESS_GRACE_S = 30.0  # beyond the per-case timeout, before a silent job counts as hung


def free_port() -> int:
    """An unused TCP port on loopback for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class NodeLaunch:
    """The command one node runs, and the environment it adds."""

    node_rank: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """The command as one shell line (for --dry-run)."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def torchrun_argv(
    *, nnodes: int, nproc: int, node_rank: int, master_addr: str, master_port: int, run_dir: Path
) -> list[str]:
    """torchrun with the static rendezvous and no restarts (both set explicitly: the
    Python LaunchConfig defaults differ from the CLI's, REFERENCE.md)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--node-rank",
        str(node_rank),
        "--rdzv-backend",
        "static",
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
        "--max-restarts",
        "0",
        "-m",
        "gpuprof.probes.sweep",
        "--run-dir",
        str(run_dir),
    ]


def worker_env(gpus_per_node: int, device: str) -> dict[str, str]:
    """Environment the ranks get: threads split between the ranks of a CPU node."""
    env = {}
    if "OMP_NUM_THREADS" not in os.environ:
        cores = os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // gpus_per_node) if device == "cpu" else 1)
    return env


def local_launch(
    gpus_per_node: int, device: str, run_dir: Path, port: int | None = None
) -> NodeLaunch:
    """One node, every rank on this machine."""
    argv = torchrun_argv(
        nnodes=1,
        nproc=gpus_per_node,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=port or free_port(),
        run_dir=run_dir,
    )
    return NodeLaunch(node_rank=0, argv=argv, env=worker_env(gpus_per_node, device))


def _shard_progress(run_dir: Path) -> float:
    """The newest modification time among the rank shards (0 if none yet)."""
    times = [p.stat().st_mtime for p in (run_dir / RANKS_DIR).glob("rank-*.jsonl")]
    return max(times, default=0.0)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the launcher and every rank it started (they share a process group)."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(kw_only=True)
class Supervised:
    """How a launched job ended."""

    returncode: int
    reason: str | None = None


def supervise(launch: NodeLaunch, run_dir: Path, case_timeout_s: float) -> Supervised:
    """Run one node's command; stop it if no shard grows for the case timeout plus a grace."""
    env = {**os.environ, **launch.env}
    proc = subprocess.Popen(launch.argv, env=env, start_new_session=True)
    started = time.monotonic()
    limit = case_timeout_s + PROGRESS_GRACE_S
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            last = max(_shard_progress(run_dir) - time.time() + time.monotonic(), started)
            if time.monotonic() - last > limit:
                _stop(proc)
                return Supervised(returncode=3, reason=f"no progress for {limit:g} s")
    except KeyboardInterrupt:
        _stop(proc)
        return Supervised(returncode=130, reason="interrupted (Ctrl-C)")
    return Supervised(returncode=int(proc.returncode))


def _failures(run_dir: Path, supervised: Supervised | None) -> list[dict[str, Any]]:
    """Failures named by the ranks, else the case each rank was last in."""
    events = run_events(run_dir)
    keep = ("rank", "host", "probe", "case_id", "error")
    failures = [{k: f.get(k) for k in keep} for f in events["failure"]]
    if supervised and supervised.returncode != 0 and not failures:
        reason = supervised.reason or f"launcher exited with {supervised.returncode}"
        failures = [
            {
                "rank": m["rank"],
                "host": m["host"],
                "probe": m["probe"],
                "case_id": m["case_id"],
                "error": f"{reason}; last case started on this rank",
            }
            for m in events["last_phase"]
        ] or [{"rank": None, "host": None, "probe": None, "case_id": None, "error": reason}]
    return failures


def finish_run(
    run_dir: Path, returncode: int, supervised: Supervised | None = None, print_table: bool = False
) -> dict[str, Any]:
    """Consolidate shards, set status and failures in run.json; optionally print the table."""
    tables = consolidate(run_dir)
    failures = _failures(run_dir, supervised)
    skipped = run_events(run_dir)["skip"]
    status = "complete" if returncode == 0 and not failures else "partial" if tables else "failed"
    info = update_run_json(
        run_dir,
        status=status,
        failures=failures,
        skipped=[
            {k: s.get(k) for k in ("rank", "probe", "case_id", "scope", "reason")}
            for s in skipped
            if s.get("group_rank") == 0
        ],
        finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        tables=sorted(tables),
    )
    if print_table and "collectives" in tables:
        from gpuprof.analysis.bandwidth import summarize_collectives
        from gpuprof.reports.text import format_table
        from gpuprof.store import Run

        print(format_table(summarize_collectives(Run(run_dir).table("collectives"))))
    return info


def plan_device(request: str) -> tuple[str, int]:
    """Resolve --device (auto -> cuda if torch sees a GPU) and count the visible GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if request == "cuda" and count == 0:
        raise UsageError("--device cuda but no CUDA GPU is visible", "use --device cpu")
    device = "cuda" if request == "cuda" or (request == "auto" and count > 0) else "cpu"
    return device, count


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """Where a sweep wrote its run, and how it ended."""

    run_dir: Path
    status: str
    failures: list[dict[str, Any]]
    report: Path | None


def launch_commands(plan: SweepPlan, run_dir: Path) -> list[NodeLaunch]:
    """The command every node runs for this plan (one node for the local launcher)."""
    return [local_launch(plan.gpus_per_node, plan.device, run_dir)]


def run_sweep(
    plan: SweepPlan, out: Path, tag: str, argv: list[str], *, report: bool = True
) -> SweepResult:
    """Create the run, launch every rank once, supervise, consolidate, and write the report."""
    from gpuprof.probes.sweep import start_run

    run_dir = start_run(plan, out, tag, argv, "local")
    supervised = supervise(launch_commands(plan, run_dir)[0], run_dir, plan.case_timeout_s)
    info = finish_run(run_dir, supervised.returncode, supervised)
    report_path = None
    if report and info["tables"]:
        from gpuprof.reports.html import write_report
        from gpuprof.store import Run

        report_path = write_report(Run(run_dir))
    return SweepResult(
        run_dir=run_dir, status=info["status"], failures=info["failures"], report=report_path
    )
