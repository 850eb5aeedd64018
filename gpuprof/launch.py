"""Sweep plan -> launcher command lines, supervision, timeouts, and the end of a run.

One job per sweep: every rank starts once and measures every scope with sub-groups.

- `local`: one node, `python -m torch.distributed.run` with the static rendezvous on loopback.
- `manual`: the same `gpuprof sweep` on every node with `--node-rank K --master-addr HOST`;
  each node runs torchrun with the static rendezvous (it works inside network namespaces,
  where c10d failed to find its own address). Node 0 holds the run folder; other nodes keep a
  copy of their own shards and send every record to node 0 through the process group.
- `slurm`: inside an allocation, `srun` starts one torchrun per node with the c10d rendezvous
  on this (the first) node and `--rdzv-id $SLURM_JOB_ID`.

torchrun's CLI defaults (static rendezvous, no restarts) differ from the Python LaunchConfig's
(etcd, 3 restarts), so both are always given explicitly (REFERENCE.md, Launching).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuprof.errors import UsageError
from gpuprof.plan import SweepPlan
from gpuprof.records import FAILED_FLAG, RANKS_DIR
from gpuprof.store import RUN_JSON, consolidate, read_json, run_events, update_run_json, utc_now

PROGRESS_GRACE_S = 30.0  # beyond the per-case timeout, before a silent job counts as hung
FAILED_GRACE_S = 3.0  # after a rank reports a failure, before the job is stopped
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


def _node_launch(plan: SweepPlan, node_rank: int, rdzv: list[str], **where: Any) -> NodeLaunch:
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
        return _node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
    if cfg.launcher == "manual":
        assert cfg.master_addr is not None
        rdzv = static_rdzv(cfg.node_rank, cfg.master_addr, cfg.master_port or DEFAULT_PORT)
        if cfg.node_rank == 0:
            return _node_launch(plan, 0, rdzv, run_dir=run_dir, home=True)
        return _node_launch(plan, cfg.node_rank, rdzv, out=out, handoff=handoff)
    if cfg.launcher == "slurm":
        return slurm_command(plan, cfg, run_dir)
    raise UsageError(f"unknown launcher {cfg.launcher!r}", f"choose from {', '.join(LAUNCHERS)}")


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
    inner = _node_launch(plan, 0, rdzv, run_dir=run_dir, home_host=host)
    return NodeLaunch(node_rank=0, argv=srun + inner.argv, env=inner.env)


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


def check_launch(plan: SweepPlan, cfg: LaunchConfig) -> LaunchConfig:
    """Validate the launcher against the plan and the environment; fill in defaults."""
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
        check_slurm(plan)
    return cfg


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


def _shard_progress(run_dir: Path | None) -> tuple[float, bool]:
    """Newest shard modification time (0 if none) and whether a rank flagged a failure."""
    if run_dir is None:
        return 0.0, False
    files = list((run_dir / RANKS_DIR).glob("*"))
    newest = max((p.stat().st_mtime for p in files if p.name.endswith(".jsonl")), default=0.0)
    return newest, any(p.name.startswith(FAILED_FLAG) for p in files)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop the launcher and every process under it. torchrun starts each rank in a session of
    its own, so the whole tree is signalled, not one process group; a stopped (SIGSTOP) rank
    is continued so it can die."""
    import psutil

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)
                process.send_signal(signal.SIGCONT)
        _, alive = psutil.wait_procs(tree, timeout=wait_s)
        if not alive:
            break
        tree = alive
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)


@dataclass(kw_only=True)
class Supervised:
    """How a launched job ended; `lost` names ranks of this node that died or were stopped."""

    returncode: int
    reason: str | None = None
    run_dir: Path | None = None
    lost: dict[int, str] = field(default_factory=dict)


class _RankWatch:
    """Liveness of this node's ranks, by the pids they recorded in run.json (home node)."""

    def __init__(self) -> None:
        self.pids: dict[int, int] = {}

    def lost(self, run_dir: Path | None) -> dict[int, str]:
        import psutil

        if run_dir is not None and not self.pids and (run_dir / RUN_JSON).exists():
            ranks = read_json(run_dir / RUN_JSON).get("ranks") or []
            self.pids = {r["rank"]: r["pid"] for r in ranks if r.get("host") == this_host()}
        lost = {}
        for rank, pid in self.pids.items():
            try:
                status = psutil.Process(pid).status()
            except psutil.NoSuchProcess:
                status = psutil.STATUS_DEAD
            if status in (psutil.STATUS_DEAD, psutil.STATUS_ZOMBIE):
                lost[rank] = f"rank process {pid} died"
            elif status == psutil.STATUS_STOPPED:
                lost[rank] = f"rank process {pid} was stopped (SIGSTOP)"
        return lost


class _RootCause:
    """Passes torchrun's stderr through and keeps its "Root Cause (first observed failure)":
    the rank that failed first and its exit code (negative: killed by that signal)."""

    _FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)")

    def __init__(self, stream: IO[bytes]) -> None:
        self.rank: int | None = None
        self.exitcode: int | None = None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        in_root = False
        for raw in stream:
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            line = raw.decode("utf-8", "replace")
            in_root = in_root or "Root Cause" in line
            match = self._FIELD.match(line) if in_root else None
            if match and getattr(self, match.group(1)) is None:
                setattr(self, match.group(1), int(match.group(2)))

    def join(self) -> None:
        self._thread.join(timeout=5)

    def culprit(self) -> dict[int, str]:
        """{rank: why} when the first failure was not a watchdog exit (3) of a waiting rank."""
        if self.rank is None or self.exitcode in (None, 3):
            return {}
        code = self.exitcode
        assert code is not None
        why = (
            f"rank process killed by {signal.Signals(-code).name}"
            if code < 0
            else f"rank process exited with {code}"
        )
        return {self.rank: why}


def supervise(
    launch: NodeLaunch, run_dir: Path | None, case_timeout_s: float, handoff: Path | None = None
) -> Supervised:
    """Run one node's command and stop it early when it cannot finish: a rank process died
    (checked every 0.2 s), a rank flagged a failure (its case timed out waiting), or no shard
    grew for the case timeout plus a grace. The others get a short grace to write theirs."""
    proc = subprocess.Popen(
        launch.argv,
        env={**os.environ, **launch.env},
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    root = _RootCause(proc.stderr)
    watch = _RankWatch()
    last, newest_seen = time.monotonic(), 0.0
    trouble_at: float | None = None
    lost: dict[int, str] = {}
    result: Supervised | None = None
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            if run_dir is None and handoff is not None and handoff.exists():
                run_dir = Path(handoff.read_text("utf-8").strip() or ".")
            newest, failed = _shard_progress(run_dir)
            now = time.monotonic()
            if newest > newest_seen:
                newest_seen, last = newest, now
            seen = watch.lost(run_dir)
            lost = {**seen, **lost}  # the first reason seen for a rank stands
            if (failed or seen) and trouble_at is None:
                trouble_at = now
            if trouble_at is not None and now - trouble_at > FAILED_GRACE_S:
                result = Supervised(returncode=3, reason="a rank failed", run_dir=run_dir)
                break
            if now - last > case_timeout_s + PROGRESS_GRACE_S:
                reason = f"no record for {case_timeout_s + PROGRESS_GRACE_S:g} s"
                result = Supervised(returncode=3, reason=reason, run_dir=run_dir)
                break
    except KeyboardInterrupt:
        result = Supervised(returncode=130, reason="interrupted (Ctrl-C)", run_dir=run_dir)
    stopped = {r: why for r, why in {**lost, **watch.lost(run_dir)}.items() if "stopped" in why}
    if result is not None:
        _kill(proc)
    root.join()
    proc.stderr.close()
    if result is None:
        result = Supervised(returncode=int(proc.returncode), run_dir=run_dir)
    # Who failed first: a stopped rank, else torchrun's root cause, else the first seen dead.
    result.lost = stopped or root.culprit() or lost
    return result


def _failures(run_dir: Path, supervised: Supervised | None, since_ns: int) -> list[dict[str, Any]]:
    """Who failed: the ranks that died or were stopped (seen by the launcher, or silent inside
    a case), then the failures ranks wrote themselves (timeouts waiting for them, errors)."""
    events = run_events(run_dir, since_ns)
    keep = ("rank", "host", "probe", "case_id", "error")
    written = [{k: f.get(k) for k in keep} for f in events["failure"]]
    if not supervised or supervised.returncode == 0:
        return written
    reason = supervised.reason or f"the launcher exited with {supervised.returncode}"
    in_flight = {m["rank"]: m for m in events["in_flight"]}
    silent = [r for r in in_flight if r not in {f["rank"] for f in written}]
    culprits = []
    for rank in sorted(supervised.lost) or silent:
        marker = in_flight.get(rank, {})
        why = supervised.lost.get(rank, "no record after this case started")
        culprits.append(
            {
                "rank": rank,
                "host": marker.get("host", this_host()),
                "probe": marker.get("probe"),
                "case_id": marker.get("case_id"),
                "error": f"{why}; {reason}",
            }
        )
    failures = culprits + written
    return failures or [
        {"rank": None, "host": None, "probe": None, "case_id": None, "error": reason}
    ]


def finish_run(
    run_dir: Path, returncode: int, supervised: Supervised | None = None, print_table: bool = False
) -> dict[str, Any]:
    """Consolidate shards, set status and failures in run.json; optionally print the table."""
    tables = consolidate(run_dir)
    failures = _failures(
        run_dir, supervised, int(read_json(run_dir / RUN_JSON).get("attempt_ns", 0))
    )
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
        finished_utc=utc_now(),
        tables=sorted(tables),
    )
    if print_table:
        print_tables(run_dir)
    return info


def print_tables(run_dir: Path) -> None:
    """Print the summary of every table of a run (what `gpuprof run` shows)."""
    from gpuprof.analysis.summary import SUMMARIZED, summarize_run
    from gpuprof.reports.text import format_table
    from gpuprof.store import Run

    run = Run(run_dir)
    for table in (t for t in SUMMARIZED if t in run.tables()):
        print(format_table(summarize_run(run, table), table))


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
    """Where a sweep wrote its run, and how it ended (`home`: this node holds the run)."""

    run_dir: Path | None
    status: str
    failures: list[dict[str, Any]]
    report: Path | None
    home: bool = True


def run_sweep(
    plan: SweepPlan,
    cfg: LaunchConfig,
    out: Path,
    tag: str,
    argv: list[str],
    *,
    report: bool = True,
    resume: Path | None = None,
) -> SweepResult:
    """Create the run (on the home node) or resume one, launch this node's ranks once,
    supervise, consolidate, and write the report."""
    from gpuprof.store import prepare_resume, start_run

    if cfg.launcher == "manual" and cfg.node_rank != 0:
        return _run_helper_node(plan, cfg, out)
    if resume is not None:
        run_dir = prepare_resume(resume, argv)
    else:
        run_dir = start_run(plan, out, tag, argv, cfg.launcher)
    launch = node_command(plan, cfg, run_dir=run_dir, out=out)
    supervised = supervise(launch, run_dir, plan.case_timeout_s)
    info = finish_run(run_dir, supervised.returncode, supervised)
    report_path = None
    if report and run_dir.exists():
        from gpuprof.reports.html import write_report
        from gpuprof.store import Run

        report_path = write_report(Run(run_dir))
    return SweepResult(
        run_dir=run_dir, status=info["status"], failures=info["failures"], report=report_path
    )


def _run_helper_node(plan: SweepPlan, cfg: LaunchConfig, out: Path) -> SweepResult:
    """A node other than node 0: measure, keep a local copy of this node's shards."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuprof-") as tmp:
        handoff = Path(tmp) / "run_dir"
        launch = node_command(plan, cfg, run_dir=None, out=out, handoff=handoff)
        supervised = supervise(launch, None, plan.case_timeout_s, handoff=handoff)
    status = "complete" if supervised.returncode == 0 else "failed"
    failures = (
        []
        if status == "complete"
        else [
            {
                "rank": None,
                "host": this_host(),
                "probe": None,
                "case_id": None,
                "error": supervised.reason or f"torchrun exited with {supervised.returncode}",
            }
        ]
    )
    return SweepResult(
        run_dir=supervised.run_dir, status=status, failures=failures, report=None, home=False
    )
