"""Rank-side records and their JSONL shards (stdlib and orjson: importable without torch,
pandas or numpy).

Each rank appends to `ranks/rank-NNNNN.jsonl` and flushes after every case, so a crash loses at
most the case in flight. One line per event:

- `case`: one measured case on one rank, with every timed iteration in `times_us` (and, for
  probes that measure several things per iteration, more per-iteration columns in `series`);
- `phase`: a case start marker (wall clock, for telemetry attribution and for naming the case a
  dead rank was in);
- `skip`: a case that was not measured, and why (for example a dtype the backend lacks);
- `failure`: a case that failed on this rank, with the error;
- `timeline`: intervals inside a case's iterations (a pipeline step's forward, backward and
  waits), consolidated into `<probe>_timeline.parquet`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

SCHEMA_VERSION = 1

RANKS_DIR = "ranks"
FAILED_FLAG = "failed-"  # ranks/failed-<rank>: this rank wrote a failure; the launcher stops soon


@dataclass(frozen=True, kw_only=True)
class Where:
    """Who measured: the rank, its node, and the group (scope) the case ran in."""

    rank: int
    node_rank: int
    host: str
    scope: str
    group: str
    world_size: int
    num_nodes: int
    group_rank: int


@dataclass(frozen=True, kw_only=True)
class CaseRecord:
    """Every timed iteration of one case on one rank."""

    probe: str
    case_id: str
    where: Where
    params: dict[str, Any]
    times_us: list[float]
    results: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)  # more per-iteration columns
    warmup_iters: int = 0
    start_unix_ns: int = 0
    end_unix_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready dict tagged `type: case`."""
        data = asdict(self)
        data.update(data.pop("where"))
        return {"type": "case", **data}


def collective_case_id(op: str, dtype: str, redop: str, in_place: bool, size_bytes: int) -> str:
    """Stable id of a collectives case within a scope (the requested size names it)."""
    return f"{op}.{dtype}.{redop}.{'ip' if in_place else 'oop'}.{size_bytes}"


def phase_marker(probe: str, case_id: str, where: Where, event: str) -> dict[str, Any]:
    """A `phase` line: `event` is 'start' or 'end', stamped with the wall clock in ns."""
    return {
        "type": "phase",
        "probe": probe,
        "case_id": case_id,
        "event": event,
        "unix_ns": time.time_ns(),
        **asdict(where),
    }


def skip_record(
    probe: str, case_id: str, where: Where, reason: str, **details: Any
) -> dict[str, Any]:
    """A `skip` line: the case was not measured, and why (`details`: the numbers behind the
    reason, such as the memory a case needs and the memory free)."""
    record = {"type": "skip", "probe": probe, "case_id": case_id, "reason": reason}
    return {**record, **details, **asdict(where)}


def failure_record(
    probe: str, case_id: str, where: Where, error: str, traceback: str | None = None
) -> dict[str, Any]:
    """A `failure` line: the case failed on this rank with `error` (and its traceback, when an
    exception raised it)."""
    record = {
        "type": "failure",
        "probe": probe,
        "case_id": case_id,
        "error": error,
        "unix_ns": time.time_ns(),
        **asdict(where),
    }
    if traceback:
        record["traceback"] = traceback
    return record


def timeline_record(
    probe: str, case_id: str, where: Where, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """A `timeline` line: interval rows (iteration, kind, start_us, end_us, ...) of one case."""
    return {"type": "timeline", "probe": probe, "case_id": case_id, "rows": rows, **asdict(where)}


def shard_path(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` writes its records."""
    return run_dir / RANKS_DIR / f"rank-{rank:05d}.jsonl"


class ShardWriter:
    """Append-only JSONL writer that flushes after every line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()  # the watchdog thread may write a failure

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and push it to the OS, so a crash of this process loses nothing."""
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def flag_failure(self) -> None:
        """Tell the launcher watching this folder that this rank failed."""
        (self.path.parent / (FAILED_FLAG + self.path.stem.split("-")[-1])).touch()

    def sync(self) -> None:
        """Force the shard to disk (end of a probe)."""
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the shard."""
        self._file.close()


def warn(message: str) -> None:
    """A warning on stderr (reading a damaged run goes on without the damaged part)."""
    print(f"gpuprof: warning: {message}", file=sys.stderr, flush=True)


def read_jsonl(
    path: Path, brief: Callable[[str], dict[str, Any] | None] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of one JSONL file. A line that does not parse (damage, or a
    crash mid-write: the torn last line) is skipped with a warning naming the file and line.
    `brief(line)`, where it gives a record, stands for the line unparsed."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            short = brief(line) if brief else None
            if short is not None:
                yield short
                continue
            record = _parsed(line) if line.endswith("\n") else None
            if isinstance(record, dict):
                yield record
            elif line.strip():
                what = "is incomplete" if not line.endswith("\n") else "is not a JSON record"
                warn(f"{path}:{number} {what}; skipped")


def _parsed(line: str) -> Any:
    """One JSON line's value, or None where it does not parse. orjson first (about 3x
    Python's json on a shard's floats: most of the time of consolidating 1,024 ranks), then
    Python's json for what orjson refuses and the writer may have written (NaN, Infinity,
    integers past 64 bits)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return None


def read_shard(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of one rank shard (damaged lines skipped with a warning)."""
    yield from read_jsonl(path)


# the opening of the lines ShardWriter writes for measured cases and timelines (compact JSON,
# `type` first): their bulk (every iteration's time) need not be parsed to know they are there
_BULK = ('{"type":"case",', '{"type":"timeline",')


def shard_paths(run_dir: Path) -> list[Path]:
    """The run's rank shards, in rank order."""
    return sorted((run_dir / RANKS_DIR).glob("rank-*.jsonl"))


def iter_run_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    """The records of every rank shard, rank by rank, a measured case or timeline only as
    `{"type": ..., "rank": R}` (a shard holds one rank's lines): a run's events (skips,
    failures, the case in flight) read without parsing its measurements again."""
    for path in shard_paths(run_dir):
        rank = int(path.stem.rpartition("-")[2])

        def brief(line: str, rank: int = rank) -> dict[str, Any] | None:
            if line.startswith(_BULK) and line.endswith("}\n"):
                return {"type": line[9 : line.index('"', 9)], "rank": rank}
            return None

        yield from read_jsonl(path, brief)


def iter_run_records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of every rank shard of a run, rank by rank."""
    for path in shard_paths(run_dir):
        yield from read_shard(path)
