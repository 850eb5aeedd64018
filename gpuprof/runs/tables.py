"""Shards -> tables: one row per measured iteration per rank (`<probe>`), timeline intervals
(`<probe>_timeline`) and the nodes' telemetry samples; in memory, or written as parquet when a
run ends (`consolidate`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.runs.records import iter_run_records, read_jsonl

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


def case_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec["probe"], rec["scope"], rec["world_size"], rec["group"], rec["case_id"])


def _latest_cases(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Case records, the last one per rank and case (a resumed run may repeat a case)."""
    latest = {}
    for rec in records:
        if rec.get("type") == "case":
            latest[(*case_key(rec), rec["rank"])] = rec
    return list(latest.values())


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
            latest[(*case_key(rec), rec["rank"])] = rec  # a resumed run may repeat a case
    frames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in latest.values():
        fixed = {k: rec[k] for k in COMMON_COLUMNS if k in rec}
        frames[f"{rec['probe']}_timeline"].extend({**fixed, **row} for row in rec["rows"])
    return {name: pd.DataFrame(rows) for name, rows in frames.items()}


def build_tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    """The run's tables from its shards, in memory: `<probe>` (and `<probe>_timeline`) from
    the rank shards, `telemetry` from the nodes' samples. Writes nothing."""
    records = list(iter_run_records(run_dir))  # read the shards once
    tables = {**_case_rows(records), **_timeline_rows(records)}
    telemetry = read_telemetry(run_dir)
    if telemetry is not None:
        tables["telemetry"] = telemetry
    return tables


def consolidate(run_dir: Path) -> dict[str, Path]:
    """Write the run's tables as `<table>.parquet` (when the run ends; safe to run again)."""
    written = {}
    for name, frame in build_tables(run_dir).items():
        path = run_dir / f"{name}.parquet"
        frame.to_parquet(path, index=False)
        written[name] = path
    return written


def read_telemetry(run_dir: Path) -> pd.DataFrame | None:
    """Every node's samples (one row per sample and source), or None without telemetry."""
    frames = []
    for path in sorted((run_dir / "telemetry").glob("node-*.jsonl")):
        rows = list(read_jsonl(path))
        if rows:
            frames.append(pd.DataFrame.from_records(rows))
    return pd.concat(frames, ignore_index=True) if frames else None


def incomplete_cases(frame: pd.DataFrame) -> pd.DataFrame:
    """Cases some rank of whose group has no rows (a damaged or missing shard line, or a rank
    that died in the case): case_id, scope, group, world_size and the ranks present."""
    keys = ["case_id", "scope", "group", "world_size"]
    if frame.empty or not {*keys, "rank"} <= set(frame.columns):
        return pd.DataFrame(columns=[*keys, "ranks"])
    ranks = frame.groupby(keys, dropna=False)["rank"].agg(lambda r: sorted(set(r))).reset_index()
    ranks = ranks.rename(columns={"rank": "ranks"})
    return ranks[ranks["ranks"].map(len) < ranks["world_size"]].reset_index(drop=True)
