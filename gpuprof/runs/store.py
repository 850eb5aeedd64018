"""Run folders: creation with a counter that only grows, run.json, shard consolidation, open_run.

A run is `<out>/<NNNN>_<tag>/` holding `run.json`, `plan.json`, `ranks/rank-*.jsonl` and, once
consolidated, one `<probe>.parquet` per probe with one row per measured iteration per rank.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.errors import GpuprofError, RunNotFoundError, UsageError
from gpuprof.machine.env import gpuprof_version
from gpuprof.runs.cases import case_key
from gpuprof.runs.plan import SweepPlan
from gpuprof.runs.records import (
    FAILED_FLAG,
    RANKS_DIR,
    SCHEMA_VERSION,
    iter_run_events,
    iter_run_records,
    warn,
)
from gpuprof.runs.tables import build_tables, incomplete_cases, read_parquet

RUN_JSON = "run.json"
PLAN_JSON = "plan.json"
DEFAULT_OUT = Path("reports")
STATUSES = ("running", "complete", "partial", "failed")
_RUN_NAME_RE = re.compile(r"^(\d{4,})_")
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_out_dir(out: Path) -> None:
    """Fail with a UsageError, touching nothing, unless runs can be written under `out`."""
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UsageError(f"--out {out} is not writable: {probe} is a file", "choose a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out} is not writable", "choose a folder you can write")


def check_tag(tag: str) -> None:
    """Tags name folders: letters, digits, '.', '_' and '-' only."""
    if not _TAG_RE.match(tag):
        raise UsageError(f"invalid --tag {tag!r}", "use letters, digits, '.', '_' or '-'")


def _run_numbers(out: Path) -> list[tuple[int, Path]]:
    if not out.is_dir():
        return []
    found = []
    for child in out.iterdir():
        match = _RUN_NAME_RE.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def list_runs(out: Path) -> list[dict[str, Any]]:
    """Every run folder under `out`, oldest first: id, start time, suite, nodes x ranks,
    device, status and size on disk (a damaged run.json: status "unreadable")."""
    rows = []
    for _, path in _run_numbers(out):
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        try:
            info = read_run_json(path)
        except (GpuprofError, OSError):  # damaged, or from a newer gpuprof: listed anyway
            info = {"status": "unreadable"}
        rows.append(
            {
                "run": path.name,
                "path": str(path),
                "started": info.get("created_utc"),
                "suite": info.get("suite"),
                "nodes": info.get("num_nodes"),
                "ranks": info.get("world_size"),
                "device": info.get("device"),
                "status": info.get("status"),
                "bytes": size,
            }
        )
    return rows


def create_run_dir(out: Path, tag: str) -> Path:
    """Create `<out>/<NNNN>_<tag>` with the next free number; never reuses one."""
    check_out_dir(out)
    check_tag(tag)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {out}: {exc.strerror}") from exc
    numbers = _run_numbers(out)
    number = numbers[-1][0] + 1 if numbers else 1
    while True:
        path = out / f"{number:04d}_{tag}"
        try:
            path.mkdir()
        except FileExistsError:
            number += 1
            continue
        (path / RANKS_DIR).mkdir()
        return path


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", "utf-8")
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object gpuprof wrote (run.json, plan.json)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GpuprofError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise GpuprofError(f"cannot read {path}: not a JSON object")
    return data


def update_run_json(run_dir: Path, **changes: Any) -> dict[str, Any]:
    """Merge `changes` into run.json and write it back."""
    path = run_dir / RUN_JSON
    data = read_json(path) if path.exists() else {"schema_version": SCHEMA_VERSION}
    data.update(changes)
    write_json_atomic(path, data)
    return data


def completed_cases(run_dir: Path) -> list[list[Any]]:
    """[probe, scope, world_size, group, case_id] of every case that every rank of its group
    recorded (measured or skipped): what `--resume` does not measure again."""
    ranks: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for rec in iter_run_records(run_dir):
        if rec.get("type") in ("case", "skip"):
            ranks[case_key(rec)].add(int(rec["rank"]))
    return [list(key) for key, seen in ranks.items() if len(seen) == key[2]]


def run_events(run_dir: Path, since_ns: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The skip and failure records of a run, and each rank's case in flight: a start marker
    with no case, skip or failure record after it (the rank died or hung in that case).
    Failures and markers before `since_ns` (an earlier attempt of a resumed run) are ignored."""
    events: dict[str, list[dict[str, Any]]] = {"skip": [], "failure": [], "in_flight": []}
    started: dict[int, dict[str, Any]] = {}
    for rec in iter_run_events(run_dir):  # cases only as their type and rank
        kind, rank = rec.get("type"), rec.get("rank")
        if kind in ("failure", "phase") and rec.get("unix_ns", since_ns) < since_ns:
            continue
        if kind in ("skip", "failure"):
            events[str(kind)].append(rec)
        if kind == "phase" and rec.get("event") == "start":
            started[int(rank)] = rec  # type: ignore[arg-type]
        elif kind in ("case", "skip", "failure") and rank in started:
            del started[rank]
    events["in_flight"] = [started[r] for r in sorted(started)]
    return events


def new_run_record(
    plan: SweepPlan, run_dir: Path, argv: list[str], launcher: str
) -> dict[str, Any]:
    """The run.json a run starts with; ranks add nodes and versions, the end adds status."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "created_utc": utc_now(),
        "argv": argv,
        "gpuprof_version": gpuprof_version(),
        "launcher": launcher,
        "num_nodes": plan.num_nodes,
        "gpus_per_node": plan.gpus_per_node,
        "world_size": plan.world_size,
        "device": plan.device,
        "backend": "nccl" if plan.device == "cuda" else "gloo",
        "suite": plan.suite,
        "probes": list(plan.probes),
        "model": _trained_model(plan),
        "status": "running",
        "failures": [],
    }


def _trained_model(plan: SweepPlan) -> str | None:
    """The user's model the training probes train (`--model`), if they train one and it is."""
    for name in plan.probes:
        model = getattr(plan.params.get(name), "model", None)
        if model:
            return str(model)
    return None


def start_run(plan: SweepPlan, out: Path, tag: str, argv: list[str], launcher: str) -> Path:
    """Create the run folder with plan.json and run.json (status running)."""
    run_dir = create_run_dir(out, tag)
    write_json_atomic(run_dir / PLAN_JSON, plan.to_dict())
    write_json_atomic(run_dir / RUN_JSON, new_run_record(plan, run_dir, argv, launcher))
    return run_dir


RESUME_JSON = "resume.json"


def prepare_resume(run_dir: Path, argv: list[str]) -> Path:
    """Make a run ready to measure its missing cases: resume.json lists the completed ones,
    failure flags of the last attempt go, and run.json records the new attempt."""
    completed = completed_cases(run_dir)
    write_json_atomic(run_dir / RESUME_JSON, {"completed": completed})
    for flag in (run_dir / RANKS_DIR).glob(FAILED_FLAG + "*"):
        flag.unlink()
    info = read_json(run_dir / RUN_JSON)
    attempts = [
        *info.get("attempts", []),
        {"argv": argv, "completed_before": len(completed), "started_utc": utc_now()},
    ]
    # ranks: the new attempt's processes replace the old ones (the launcher watches their pids)
    update_run_json(
        run_dir, status="running", attempts=attempts, attempt_ns=time.time_ns(), ranks=[]
    )
    return run_dir


def resume_plan(run_dir: Path) -> SweepPlan:
    """The plan of a run being resumed (its own, whatever the command line says)."""
    return SweepPlan.from_dict(read_json(run_dir / PLAN_JSON))


def utc_now() -> str:
    """Now, as run.json writes times (ISO 8601, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def utc_seconds(stamp: Any) -> float | None:
    """A time as run.json writes it (`utc_now`), in seconds since the epoch; None when there
    is none, or it is not one."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def resolve_run(spec: str | Path, out: Path = DEFAULT_OUT) -> Path:
    """A RUN argument -> a run folder: a path, 'latest', or a run number (prefix) inside `out`."""
    text = str(spec)
    for path in (Path(text), out / text):  # a path, or a folder name inside `out`
        if (path / RUN_JSON).is_file():
            return path
    if text == "latest":
        runs = [p for _, p in _run_numbers(out) if (p / RUN_JSON).is_file()]
        if runs:
            return runs[-1]
        raise RunNotFoundError(f"no runs under {out}", "run `gpuprof sweep` first or pass --out")
    if text.isdigit():
        matches = [p for n, p in _run_numbers(out) if n == int(text)]
        if len(matches) == 1 and (matches[0] / RUN_JSON).is_file():
            return matches[0]
    raise RunNotFoundError(
        f"no run {text!r} (looked for a folder with run.json, 'latest' or a run number in {out})",
        "list runs with `ls " + str(out) + "`",
    )


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """run.json of a run; one line naming the file if it is damaged or from a newer gpuprof."""
    path = run_dir / RUN_JSON
    info = read_json(path)
    version = info.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        writer = info.get("gpuprof_version") or "a newer gpuprof"
        raise UsageError(
            f"{path} has run format {version!r} (written by gpuprof {writer}); this gpuprof "
            f"{gpuprof_version()} reads format {SCHEMA_VERSION} and older",
            f"read it with gpuprof {writer} or later",
        )
    return info


class Run:
    """A run folder: its description (run.json) and its tables as pandas DataFrames.

    Reading never writes. A run that ended has `<table>.parquet` files; a run still running
    (or whose launcher died before the end) is read from its shards in memory."""

    def __init__(self, path: Path, tables: Mapping[str, pd.DataFrame] | None = None) -> None:
        """`tables`: some of its tables as they were just written (instead of reading them)."""
        self.path = Path(path)
        self.info: dict[str, Any] = read_run_json(self.path)
        self._given = dict(tables or {})
        self._frames: dict[str, pd.DataFrame] = {}
        self._from_shards: dict[str, pd.DataFrame] | None = None

    @property
    def status(self) -> str:
        """running, complete, partial or failed."""
        return str(self.info.get("status", "running"))

    @cached_property
    def consolidated(self) -> bool:
        """The run ended and its tables were written (reads use the parquet files)."""
        if self.status == "running":
            return False
        listed = self.info.get("tables")
        if listed is None:  # older runs: whatever parquet files there are
            return any(self.path.glob("*.parquet"))
        return bool(listed) and all((self.path / f"{t}.parquet").is_file() for t in listed)

    def _shard_tables(self) -> dict[str, pd.DataFrame]:
        if self._from_shards is None:
            if self.status == "running":
                warn(
                    f"run {self.path} is still running (or its launcher died): its tables are "
                    "read from the shards as they are now"
                )
            self._from_shards = build_tables(self.path)
        return self._from_shards

    def tables(self) -> list[str]:
        """Names of the tables this run has (looked up once per Run)."""
        return list(self._names)

    @cached_property
    def _names(self) -> list[str]:
        if self.consolidated:
            return sorted(p.stem for p in self.path.glob("*.parquet"))
        return sorted(self._shard_tables())

    def table(self, name: str) -> pd.DataFrame:
        """One row per measured iteration per rank for table `name`."""
        if name not in self._frames:
            if name not in self._names:
                have = ", ".join(self._names) or "none"
                raise UsageError(f"run {self.path} has no table {name!r}", f"tables: {have}")
            frame = self._given.pop(name, None)
            if frame is None and self.consolidated:
                frame = self._read_parquet(name)
            elif frame is None:
                frame = self._shard_tables()[name]
            self._frames[name] = frame
            self._say_incomplete(name, frame)
        return self._frames[name]

    def _say_incomplete(self, name: str, frame: pd.DataFrame) -> None:
        """A table that lost some rank's rows says so (its summaries use the ranks left)."""
        if name == "telemetry" or name.endswith("_timeline"):
            return
        if self.info.get("source") == "nccl-tests":  # one row per case: nccl-tests' average
            return
        cases = incomplete_cases(frame)
        if not cases.empty:
            first = cases.iloc[0]
            warn(
                f"{name}: {len(cases)} case(s) lack some rank's rows (e.g. {first['case_id']} "
                f"in {first['scope']} n={first['world_size']} has ranks {first['ranks']}): a "
                "damaged shard, or a rank that died in the case; their summaries use the "
                "ranks left"
            )

    def _read_parquet(self, name: str) -> pd.DataFrame:
        path = self.path / f"{name}.parquet"
        try:
            return read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise GpuprofError(
                f"cannot read {path}: {exc}",
                f"write the tables again from the shards: gpuprof consolidate {self.path}",
            ) from None


def open_run(spec: str | Path, out: str | Path = DEFAULT_OUT) -> Run:
    """Open a run by path, 'latest' or run number (inside `out`)."""
    return Run(resolve_run(spec, Path(out)))
