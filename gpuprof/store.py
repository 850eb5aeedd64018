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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.env import gpuprof_version
from gpuprof.errors import RunNotFoundError, UsageError
from gpuprof.plan import SweepPlan
from gpuprof.records import FAILED_FLAG, RANKS_DIR, SCHEMA_VERSION, iter_run_records

RUN_JSON = "run.json"
PLAN_JSON = "plan.json"
DEFAULT_OUT = Path("reports")
STATUSES = ("running", "complete", "partial", "failed")
_RUN_NAME_RE = re.compile(r"^(\d{4,})_")
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
COMMON_COLUMNS = (
    "probe",
    "case_id",
    "rank",
    "node_rank",
    "host",
    "world_size",
    "num_nodes",
    "scope",
    "group",
    "group_rank",
    "iteration",
    "time_us",
)


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
    """Read a JSON object."""
    data = json.loads(path.read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def update_run_json(run_dir: Path, **changes: Any) -> dict[str, Any]:
    """Merge `changes` into run.json and write it back."""
    path = run_dir / RUN_JSON
    data = read_json(path) if path.exists() else {"schema_version": SCHEMA_VERSION}
    data.update(changes)
    write_json_atomic(path, data)
    return data


def _case_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec["probe"], rec["scope"], rec["world_size"], rec["group"], rec["case_id"])


def _latest_cases(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Case records, the last one per rank and case (a resumed run may repeat a case)."""
    latest = {}
    for rec in records:
        if rec.get("type") == "case":
            latest[(*_case_key(rec), rec["rank"])] = rec
    return list(latest.values())


def completed_cases(run_dir: Path) -> list[list[Any]]:
    """[probe, scope, world_size, group, case_id] of every case that every rank of its group
    recorded (measured or skipped): what `--resume` does not measure again."""
    ranks: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    for rec in iter_run_records(run_dir):
        if rec.get("type") in ("case", "skip"):
            ranks[_case_key(rec)].add(int(rec["rank"]))
    return [list(key) for key, seen in ranks.items() if len(seen) == key[2]]


def _case_rows(records: Iterable[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Expand case records into one row per iteration, grouped by probe."""
    columns: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    for rec in _latest_cases(records):
        probe, times = rec["probe"], rec["times_us"]
        cols, start, num = columns[probe], counts[probe], len(times)
        fixed = {k: rec[k] for k in COMMON_COLUMNS if k not in ("iteration", "time_us")}
        extra = {**rec.get("params", {}), **rec.get("results", {})}
        extra["start_unix_ns"] = rec.get("start_unix_ns", 0)
        extra["end_unix_ns"] = rec.get("end_unix_ns", 0)
        extra["warmup_iters"] = rec.get("warmup_iters", 0)
        for key, value in {**fixed, **extra}.items():
            col = cols[key]
            col.extend([None] * (start - len(col)))  # a column new in this record
            col.extend([value] * num)
        cols["iteration"].extend(range(num))
        cols["time_us"].extend(float(t) for t in times)
        for key, values in (rec.get("series") or {}).items():
            col = cols[key]
            col.extend([None] * (start - len(col)))
            col.extend(values[i] if i < len(values) else None for i in range(num))
        counts[probe] = start + num
    tables = {}
    for probe, cols in columns.items():
        for col in cols.values():
            col.extend([None] * (counts[probe] - len(col)))
        tables[probe] = pd.DataFrame(cols)
    return tables


def _timeline_rows(records: Iterable[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Timeline records -> one row per interval, grouped by probe (`<probe>_timeline`)."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in records:
        if rec.get("type") == "timeline":
            latest[(*_case_key(rec), rec["rank"])] = rec  # a resumed run may repeat a case
    frames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in latest.values():
        fixed = {k: rec[k] for k in COMMON_COLUMNS if k in rec}
        frames[f"{rec['probe']}_timeline"].extend({**fixed, **row} for row in rec["rows"])
    return {name: pd.DataFrame(rows) for name, rows in frames.items()}


def run_events(run_dir: Path, since_ns: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The skip and failure records of a run, and each rank's case in flight: a start marker
    with no case, skip or failure record after it (the rank died or hung in that case).
    Failures and markers before `since_ns` (an earlier attempt of a resumed run) are ignored."""
    events: dict[str, list[dict[str, Any]]] = {"skip": [], "failure": [], "in_flight": []}
    started: dict[int, dict[str, Any]] = {}
    for rec in iter_run_records(run_dir):
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


def consolidate(run_dir: Path) -> dict[str, Path]:
    """Turn the rank shards into `<probe>.parquet` tables and the nodes' samples into
    `telemetry.parquet`; safe to run again after a crash."""
    written = {}
    records = list(iter_run_records(run_dir))  # read the shards once
    tables = {**_case_rows(records), **_timeline_rows(records)}
    for probe, frame in tables.items():
        path = run_dir / f"{probe}.parquet"
        frame.to_parquet(path, index=False)
        written[probe] = path
    telemetry = read_telemetry(run_dir)
    if telemetry is not None:
        written["telemetry"] = run_dir / "telemetry.parquet"
        telemetry.to_parquet(written["telemetry"], index=False)
    return written


def read_telemetry(run_dir: Path) -> pd.DataFrame | None:
    """Every node's samples (one row per sample and source), or None without telemetry."""
    frames = []
    for path in sorted((run_dir / "telemetry").glob("node-*.jsonl")):
        with path.open(encoding="utf-8") as handle:
            lines = [line for line in handle if line.endswith("\n")]  # a torn last line
        if lines:
            frames.append(pd.DataFrame.from_records(json.loads(line) for line in lines))
    return pd.concat(frames, ignore_index=True) if frames else None


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
        "status": "running",
        "failures": [],
    }


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


class Run:
    """A run folder: its description (run.json) and its tables as pandas DataFrames."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.info: dict[str, Any] = read_json(self.path / RUN_JSON)

    @property
    def status(self) -> str:
        """running, complete, partial or failed."""
        return str(self.info.get("status", "running"))

    def tables(self) -> list[str]:
        """Names of the tables this run has (consolidating shards if needed)."""
        self._ensure_consolidated()
        return sorted(p.stem for p in self.path.glob("*.parquet"))

    def table(self, name: str) -> pd.DataFrame:
        """One row per measured iteration per rank for probe table `name`."""
        self._ensure_consolidated()
        path = self.path / f"{name}.parquet"
        if not path.exists():
            have = ", ".join(self.tables()) or "none"
            raise UsageError(f"run {self.path} has no table {name!r}", f"tables: {have}")
        return pd.read_parquet(path)

    def _ensure_consolidated(self) -> None:
        shards = [
            *(self.path / RANKS_DIR).glob("rank-*.jsonl"),
            *(self.path / "telemetry").glob("node-*.jsonl"),
        ]
        if not shards:
            return
        newest_shard = max(p.stat().st_mtime for p in shards)
        tables = list(self.path.glob("*.parquet"))
        if not tables or min(p.stat().st_mtime for p in tables) < newest_shard:
            consolidate(self.path)


def open_run(spec: str | Path, out: str | Path = DEFAULT_OUT) -> Run:
    """Open a run by path, 'latest' or run number (inside `out`)."""
    return Run(resolve_run(spec, Path(out)))
