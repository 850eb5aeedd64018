"""Supervising one node's launched job: pass torchrun's (or a lone rank's) output through,
watch the ranks, and stop the job early when it cannot finish (a rank died, was stopped,
flagged a failure, or no record arrived for longer than a case may take)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from gpuprof.launch.torchrun import NodeLaunch
from gpuprof.machine.env import LAUNCHER_PID_ENV, this_host
from gpuprof.runs.records import FAILED_FLAG, RANKS_DIR
from gpuprof.runs.store import RUN_JSON, read_json

PROGRESS_GRACE_S = 30.0  # beyond the per-case timeout, before a silent job counts as hung
FAILED_GRACE_S = 3.0  # after a rank reports a failure, before the job is stopped
TORCHRUN_LOG = "torchrun.log"  # in the run folder: everything torchrun printed


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
    """Liveness of this node's ranks, by the pids they recorded in run.json (home node). A
    node is its host name and, where known, its node rank (two nodes may share a name)."""

    def __init__(self, node_rank: int | None = None) -> None:
        self.pids: dict[int, int] = {}
        self.node_rank = node_rank

    def mine(self, rank: dict[str, Any]) -> bool:
        """Whether a run.json `ranks` entry runs on this node."""
        same_node = self.node_rank is None or rank.get("node_rank") == self.node_rank
        return rank.get("host") == this_host() and same_node

    def lost(self, run_dir: Path | None) -> dict[int, str]:
        if run_dir is not None and not self.pids and (run_dir / RUN_JSON).exists():
            ranks = read_json(run_dir / RUN_JSON).get("ranks") or []
            self.pids = {r["rank"]: r["pid"] for r in ranks if self.mine(r)}
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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):  # noqa: N818 - a signal, like KeyboardInterrupt
    """A stop signal arrived while the job ran."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class SignalGuard:
    """SIGINT, SIGTERM and SIGHUP end a running job the same way: while it runs they raise
    `Interrupted` in the main thread, whatever disposition the process inherited (a process
    started with SIGINT ignored, as nohup and some CI runners do, would otherwise ignore
    Ctrl-C); while the run is being finished they are only remembered, so the run is always
    consolidated and its status written. `restore` puts the previous handlers back."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.late: list[str] = []

    def _install(self, handler: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may handle signals
        for sig in STOP_SIGNALS:
            old = signal.signal(sig, handler)
            self.previous.setdefault(sig, old)

    def stop_on_signal(self) -> None:
        """From now on a stop signal raises Interrupted."""

        def stop(signum: int, frame: Any) -> None:
            raise Interrupted(signal.Signals(signum).name)

        self._install(stop)

    def defer(self) -> None:
        """From now on a stop signal is remembered, not obeyed (the run is being finished)."""

        def remember(signum: int, frame: Any) -> None:
            self.late.append(signal.Signals(signum).name)

        self._install(remember)

    def restore(self) -> None:
        """The handlers from before."""
        for sig, old in self.previous.items():
            signal.signal(sig, old)
        self.previous.clear()


class _RootCause:
    """Passes torchrun's stderr through (and into `log`), and keeps its "Root Cause (first
    observed failure)": the rank that failed first and its exit code (negative: killed by that
    signal). Once `quiet`, lines go to the log only (torchrun's traceback when it is stopped)."""

    _FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)")

    def __init__(self, stream: IO[bytes], log: Path | None = None) -> None:
        self.rank: int | None = None
        self.exitcode: int | None = None
        self.quiet = False
        self._log = log.open("ab") if log is not None else None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        in_root = False
        for raw in stream:
            if self._log is not None:
                self._log.write(raw)
                self._log.flush()
            if not self.quiet:
                sys.stderr.buffer.write(raw)
                sys.stderr.flush()
            line = raw.decode("utf-8", "replace")
            in_root = in_root or "Root Cause" in line
            match = self._FIELD.match(line) if in_root else None
            if match and getattr(self, match.group(1)) is None:
                setattr(self, match.group(1), int(match.group(2)))

    def join(self) -> None:
        self._thread.join(timeout=5)
        if self._log is not None:
            self._log.close()

    def culprit(self) -> dict[int, str]:
        """{rank: why} when the first failure was not a watchdog exit (3) of a waiting rank."""
        if self.rank is None or self.exitcode in (None, 3):
            return {}
        assert self.exitcode is not None
        return {self.rank: _exit_reason(self.exitcode)}


def _exit_reason(code: int) -> str:
    """A rank process's exit code in words (negative: killed by that signal)."""
    if code < 0:
        return f"rank process killed by {signal.Signals(-code).name}"
    return f"rank process exited with {code}"


def supervise(
    launch: NodeLaunch,
    run_dir: Path | None,
    case_timeout_s: float,
    handoff: Path | None = None,
    node_rank: int | None = None,
    guard: SignalGuard | None = None,
    progress: Any = None,
    env: dict[str, str] | None = None,
) -> Supervised:
    """Run one node's command and stop it early when it cannot finish: a rank process died
    (checked every 0.2 s), a rank flagged a failure (its case timed out waiting), no shard
    grew for the case timeout plus a grace, or a stop signal arrived (SIGINT, SIGTERM,
    SIGHUP with a `guard`). The others get a short grace to write theirs. torchrun's output
    goes to the terminal and to `<run>/torchrun.log`; once the job is being stopped, to the
    log only."""
    log = run_dir / TORCHRUN_LOG if run_dir is not None else None
    # ranks on this machine watch this process: if it is killed (SIGKILL, the OOM killer),
    # they exit within seconds instead of running on as orphans
    watched = {LAUNCHER_PID_ENV: str(os.getpid())} if launch.local else {}
    proc = subprocess.Popen(
        launch.argv,
        env={**os.environ, **launch.env, **watched, **(env or {})},
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    root = _RootCause(proc.stderr, log)
    watch = _RankWatch(node_rank)
    last, newest_seen = time.monotonic(), 0.0
    trouble_at: float | None = None
    lost: dict[int, str] = {}
    result: Supervised | None = None
    try:
        if guard is not None:
            guard.stop_on_signal()
        while proc.poll() is None:
            time.sleep(0.2)
            if run_dir is None and handoff is not None and handoff.exists():
                run_dir = Path(handoff.read_text("utf-8").strip() or ".")
            if progress is not None:
                progress.poll(run_dir)
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
        result = Supervised(returncode=3, reason="interrupted (SIGINT)", run_dir=run_dir)
    except Interrupted as exc:
        result = Supervised(returncode=3, reason=f"interrupted ({exc.name})", run_dir=run_dir)
    finally:
        if guard is not None:
            guard.defer()  # the job is ending: a further signal must not cut the teardown
        if progress is not None:
            progress.close()
    stopped = {r: why for r, why in {**lost, **watch.lost(run_dir)}.items() if "stopped" in why}
    if result is not None:
        root.quiet = True  # torchrun's traceback from being stopped: the log, not the terminal
        _kill(proc)
    root.join()
    proc.stderr.close()
    if result is None:
        result = Supervised(returncode=int(proc.returncode), run_dir=run_dir)
    # Who failed first: a stopped rank, else torchrun's root cause, else the first seen dead
    # (a rank started without torchrun is the launched process: its own exit code)
    result.lost = stopped or root.culprit() or lost
    if launch.solo and not result.lost and result.returncode not in (0, 3):
        result.lost = {0: _exit_reason(result.returncode)}
    return result
