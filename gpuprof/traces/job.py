"""A job's traces: find the per-rank files, read each rank (in parallel, each reduced as it is
read), and put the ranks together into tables."""

from __future__ import annotations

import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.errors import UsageError
from gpuprof.traces.breakdown import device_rows, flop_rows, rank_breakdown, top_ops
from gpuprof.traces.collectives import (
    clock_offsets,
    match,
    rank_collectives,
    rank_waits,
    stragglers,
)
from gpuprof.traces.reader import read_rank

SUFFIXES = (".json", ".json.gz")
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


@dataclass
class RankResult:
    """What one rank's trace reduces to."""

    path: str
    rank: int
    world_size: int | None
    host: str | None
    base_ns: int | None
    backend: str | None
    events: int
    unknown: dict[str, int]  # event categories not read, and how many events each
    steps: list[dict[str, Any]]
    total: dict[str, Any]
    top: list[dict[str, Any]]
    flops: list[dict[str, Any]]  # per op with FLOPs
    devices: list[dict[str, Any]]  # per GPU, when one process drives several
    collectives: pd.DataFrame


@dataclass
class TraceTables:
    """A job's trace analysis as tables (one row per rank, step, collective, ...)."""

    ranks: pd.DataFrame
    steps: pd.DataFrame
    ops: pd.DataFrame
    collectives: pd.DataFrame
    waits: pd.DataFrame
    stragglers: pd.DataFrame
    info: dict[str, Any]
    flops: pd.DataFrame = field(default_factory=pd.DataFrame)
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)

    def named(self) -> dict[str, pd.DataFrame]:
        """The tables by the names they are written under."""
        return {
            "trace_ranks": self.ranks,
            "trace_steps": self.steps,
            "trace_ops": self.ops,
            "trace_collectives": self.collectives,
            "trace_waits": self.waits,
            "trace_stragglers": self.stragglers,
            "trace_flops": self.flops,
            "trace_devices": self.devices,
        }


def trace_files(directory: Path) -> list[Path]:
    """The trace files in a folder (not its subfolders), or one file; a UsageError if none."""
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such folder")
    found = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not found:
        raise UsageError(
            f"{directory}: no trace files (*.json or *.json.gz, as torch.profiler's "
            "tensorboard_trace_handler writes them)"
        )
    return found


def read_one(path: Path) -> RankResult:
    """Read and reduce one rank's trace (in a worker process)."""
    trace = read_rank(path)
    steps, total = rank_breakdown(trace)
    colls = rank_collectives(trace)
    return RankResult(
        path=str(path),
        rank=trace.rank,
        world_size=trace.world_size,
        host=trace.host,
        base_ns=trace.base_ns,
        backend=trace.backend,
        events=trace.events,
        unknown=trace.unknown,
        steps=steps,
        total=total,
        top=top_ops(trace),
        flops=flop_rows(trace),
        devices=device_rows(trace),
        collectives=colls,
    )


def _ranks(results: list[RankResult]) -> None:
    """Give every trace a rank: its own, else one from its file name, else its order."""
    for i, res in enumerate(results):
        if res.rank < 0:
            found = RANK_IN_NAME.search(Path(res.path).name)
            res.rank = int(found.group(1)) if found else i
        res.collectives["rank"] = res.rank
        for row in (*res.steps, res.total, *res.top, *res.flops, *res.devices):
            row["rank"] = res.rank
    seen: dict[int, str] = {}
    for res in results:
        if res.rank in seen:
            raise UsageError(
                f"two traces of rank {res.rank}: {seen[res.rank]} and {res.path} "
                "(give a folder with one trace per rank)"
            )
        seen[res.rank] = res.path


def read_job(directory: Path, jobs: int | None = None) -> TraceTables:
    """Every rank's trace in `directory`, analysed; `jobs` processes (default: the cores)."""
    files = trace_files(directory)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(files)))
    if workers == 1:
        results = [read_one(p) for p in files]
    else:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(read_one, files))
    _ranks(results)
    results.sort(key=lambda r: r.rank)
    return assemble(results)


def assemble(results: list[RankResult]) -> TraceTables:
    """The job's tables from its ranks' results."""
    world = max((r.world_size or 0 for r in results), default=0) or len(results)
    bases = [r.base_ns for r in results if r.base_ns is not None]
    ref = min(bases) if bases else 0
    frames = []
    for res in results:
        shift = ((res.base_ns or ref) - ref) / 1e3  # us
        frame = res.collectives.copy()
        frame[["start_us", "end_us"]] += shift
        frames.append(frame)
    arrivals = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    hosts = {r.rank: r.host for r in results}
    offsets = clock_offsets(arrivals, hosts)
    if not arrivals.empty:
        arrivals["start_us"] -= arrivals["rank"].map(offsets)
        arrivals["end_us"] -= arrivals["rank"].map(offsets)
    matched = match(arrivals, world) if not arrivals.empty else pd.DataFrame()
    steps = pd.DataFrame([row for r in results for row in r.steps])
    ranks = [r.rank for r in results]
    unread = (Counter(r.unknown) for r in results)  # event categories not read, summed
    info = {
        "traces": len(results),
        "world_size": world,
        "backend": next((r.backend for r in results if r.backend), None),
        "hosts": sorted({r.host for r in results if r.host}),
        "timeline": results[0].total.get("timeline") if results else None,
        "events": sum(r.events for r in results),
        "unknown_categories": dict(sum(unread, Counter()).most_common()),
        "clock_offsets_us": {str(k): v for k, v in offsets.items() if v},
        "files": [r.path for r in results],
    }
    return TraceTables(
        ranks=pd.DataFrame([r.total for r in results]),
        steps=steps,
        ops=pd.DataFrame([row for r in results for row in r.top]),
        collectives=matched,
        waits=rank_waits(arrivals, matched) if not arrivals.empty else pd.DataFrame(),
        stragglers=stragglers(matched, steps, ranks),
        info=info,
        flops=pd.DataFrame([row for r in results for row in r.flops]),
        devices=pd.DataFrame([row for r in results for row in r.devices]),
    )
