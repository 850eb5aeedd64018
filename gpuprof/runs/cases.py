"""Rank shards -> one row per measured iteration per rank, grouped by probe, as arrow tables
(what `runs.tables` writes and hands to readers), and the timeline records.

A large run's shards are read in two parts at once: the first half of the ranks here, the
second by another Python started for it (parsing JSON holds Python's lock, so a thread would
not run beside it; a new interpreter, not a fork of this one, which holds threads, nor
multiprocessing's spawn, which runs the caller's main script again). Each part collects its
records per probe as a record's own values, once per record (`Collected`), the small thing
that crosses between the processes; the rows are built from both parts together, in rank
order, as from one.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpuprof.runs.records import read_shard, shard_paths

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

# shards of more bytes than this are read in two processes (starting one costs about a
# second: 1,024 ranks' 420 MB took 19 s to read alone)
PARALLEL_BYTES = 64 << 20


def case_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec["probe"], rec["scope"], rec["world_size"], rec["group"], rec["case_id"])


@dataclass
class Collected:
    """One probe's case records, record by record: how many iterations each has, its own
    values (`values[column]`: one entry per record, in the order columns first appeared;
    `first`: how many of them the first record has), every iteration's time, and the
    per-iteration series (`series[column]`: one entry per iteration)."""

    counts: np.ndarray
    values: dict[str, pa.Array]
    first: int
    times: np.ndarray
    series: dict[str, pa.Array]


@dataclass
class Part:
    """What one part of the shards holds: its case records per probe, its timeline records."""

    cases: dict[str, Collected]
    timelines: list[dict[str, Any]]


def read_parts(run_dir: Path, parallel_bytes: float = PARALLEL_BYTES) -> list[Part]:
    """The run's shards read in parts, in rank order: two at once past `parallel_bytes`
    (the second by another Python, `python -c` of `_other_part`, its part sent back pickled
    on a pipe; read here if that process fails), else one."""
    paths = shard_paths(run_dir)
    sizes = np.cumsum([_size(p) for p in paths])
    if len(paths) < 2 or sizes[-1] <= parallel_bytes:
        return [read_part(paths)]
    cut = max(1, min(len(paths) - 1, int(np.searchsorted(sizes, sizes[-1] / 2))))
    home = str(Path(__file__).resolve().parents[2])  # the gpuprof this process runs
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")])),
    }
    code = "from gpuprof.runs.cases import _other_part; _other_part()"
    try:
        other = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
    except OSError:  # it could not start
        return [read_part(paths[:cut]), read_part(paths[cut:])]
    with other:  # its pipes closed and the process waited for, whatever happens here
        sent = _send(other, paths[cut:])
        try:
            mine = read_part(paths[:cut])
        except BaseException:  # an error or an interrupt here: the other half is not wanted
            other.kill()
            raise
        theirs = _received(other) if sent else None
    if other.returncode != 0 or theirs is None:  # it died: read its half here
        theirs = read_part(paths[cut:])
    return [mine, theirs]


def _send(other: subprocess.Popen[bytes], paths: list[Path]) -> bool:
    """Give the other process its shards' paths (a NUL after each); False if it died."""
    try:
        if other.stdin is not None:
            with other.stdin:
                other.stdin.write(b"".join(os.fsencode(p) + b"\0" for p in paths))
        return True
    except OSError:  # it died at once
        other.kill()
        return False


def _received(other: subprocess.Popen[bytes]) -> Part | None:
    """The other process's part, or None if it sent none."""
    try:
        part = pickle.load(other.stdout) if other.stdout is not None else None
    except (EOFError, pickle.UnpicklingError, AttributeError, ImportError):
        return None
    other.wait()
    return part if isinstance(part, Part) else None


def _other_part() -> None:
    """The other process of `read_parts`: its shards' paths on stdin, a NUL after each; the
    part pickled on stdout."""
    paths = [Path(os.fsdecode(p)) for p in sys.stdin.buffer.read().split(b"\0") if p]
    pickle.dump(read_part(paths), sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused: parsed records hold no cycles, yet every few hundred
    dicts and lists kept, it walks all those kept so far (half of reading 256 ranks' shards:
    5.5 -> 2.7 s). Reference counting still frees what is dropped."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_part(paths: list[Path]) -> Part:
    """These shards' records, collected (a shard holds one rank: a rank's latest record of
    a case is found within its part)."""
    with _no_cycle_collection():
        return _read_part(paths)


def _read_part(paths: list[Path]) -> Part:
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    timelines: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in chain.from_iterable(read_shard(p) for p in paths):
        kind = rec.get("type")
        if kind == "case":  # a resumed run may repeat a case: its last record counts
            latest[(*case_key(rec), rec["rank"])] = rec
        elif kind == "timeline":
            timelines[(*case_key(rec), rec["rank"])] = rec
    per_probe: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in latest.values():
        per_probe[rec["probe"]].append(rec)
    return Part(
        cases={probe: collect(recs) for probe, recs in per_probe.items()},
        timelines=list(timelines.values()),
    )


def _own(rec: dict[str, Any]) -> dict[str, Any]:
    """A record's values that hold for every one of its iterations."""
    return {
        **{k: rec[k] for k in COMMON_COLUMNS if k not in ("iteration", "time_us")},
        **rec.get("params", {}),
        **rec.get("results", {}),
        "start_unix_ns": rec.get("start_unix_ns", 0),
        "end_unix_ns": rec.get("end_unix_ns", 0),
        "warmup_iters": rec.get("warmup_iters", 0),
    }


def collect(records: list[dict[str, Any]]) -> Collected:
    """One probe's case records, a record's own values kept once (arrow infers each column's
    type from all of them, as it would from the rows). Built column by column (a list per
    column, C-level loops), not record by record: a Python step per record and key took
    most of reading 1,024 ranks' shards."""
    counts = np.array([len(rec["times_us"]) for rec in records], dtype=np.int64)
    owns = [_own(rec) for rec in records]
    names = dict.fromkeys(chain.from_iterable(owns))  # in the order they first appear
    values = {key: [own.get(key) for own in owns] for key in names}
    return Collected(
        counts=counts,
        values={k: pa.array(v) for k, v in values.items()},  # a type error as pandas' gave it
        first=len(owns[0]),
        times=_times(records, counts),
        series=_series(records, counts),
    )


def _series(records: list[dict[str, Any]], counts: np.ndarray) -> dict[str, pa.Array]:
    """The per-iteration series, one value per iteration of every record (missing: None)."""
    given = [rec.get("series") or {} for rec in records]
    keys = dict.fromkeys(chain.from_iterable(given))
    series = {}
    for key in keys:
        column: list[Any] = []
        for got, num in zip((g.get(key) or [] for g in given), counts.tolist(), strict=True):
            column += got[:num] if len(got) >= num else [*got, *[None] * (num - len(got))]
        series[key] = pa.array(column)
    return series


def _times(records: list[dict[str, Any]], counts: np.ndarray) -> np.ndarray:
    """Every iteration's time, record after record."""

    def every() -> Iterator[Any]:  # no array per record
        return chain.from_iterable(rec["times_us"] for rec in records)

    try:
        return np.fromiter(every(), dtype=float, count=int(counts.sum()))
    except (TypeError, ValueError):  # a missing time (null) among them: NaN, as numpy reads it
        return np.array(list(every()), dtype=float)


def case_tables(parts: list[Part]) -> dict[str, pa.Table]:
    """Each probe's rows from every part, in part order."""
    probes = dict.fromkeys(p for part in parts for p in part.cases)
    return {
        probe: expand([part.cases[probe] for part in parts if probe in part.cases])
        for probe in probes
    }


def _joined(pieces: list[pa.Array | None], lengths: list[int]) -> pa.Array:
    """One column from the parts' pieces (None: a part without the column, all missing);
    parts of other types are joined as arrow would infer them from all the values."""
    present = [p for p in pieces if p is not None]
    kind = present[0].type
    if all(p.type == kind for p in present):
        whole = [
            p if p is not None else pa.nulls(n, kind) for p, n in zip(pieces, lengths, strict=True)
        ]
        return pa.concat_arrays(whole)
    everything: list[Any] = []
    for piece, n in zip(pieces, lengths, strict=True):
        everything += piece.to_pylist() if piece is not None else [None] * n
    return pa.array(everything)


def expand(parts: list[Collected]) -> pa.Table:
    """One probe's rows, one per iteration: the first record's own columns, the iteration and
    its time, the columns later records added, then the per-iteration series. A record's own
    values are repeated over its iterations by numpy (a run of 1,024 ranks has tens of
    millions of iterations: a Python value per row and column took most of its
    consolidation), text as a dictionary: each record's value once, its rows pointing at it
    (parquet stores text so; encoding 22 M strings again took 17 s)."""
    counts = np.concatenate([p.counts for p in parts])
    records = [len(p.counts) for p in parts]
    iterations = [int(p.counts.sum()) for p in parts]
    names = list(dict.fromkeys(k for p in parts for k in p.values))

    @cache
    def rows() -> pa.Array:  # each row's record, for what numpy cannot repeat
        return pa.array(np.repeat(np.arange(len(counts)), counts))

    def repeated(key: str) -> pa.Array:
        per_record = _joined([p.values.get(key) for p in parts], records)
        if pa.types.is_string(per_record.type):
            text = per_record.dictionary_encode()
            indices = np.repeat(text.indices.fill_null(0).to_numpy(), counts)
            missing = per_record.is_null().to_numpy(zero_copy_only=False)
            mask = np.repeat(missing, counts) if missing.any() else None
            return pa.DictionaryArray.from_arrays(pa.array(indices, mask=mask), text.dictionary)
        if per_record.null_count == 0 and pa.types.is_primitive(per_record.type):
            plain = per_record.to_numpy(zero_copy_only=False)
            return pa.array(np.repeat(plain, counts), type=per_record.type)
        return per_record.take(rows())  # missing values, lists, ...

    first = parts[0].first
    columns: dict[str, pa.Array] = {k: repeated(k) for k in names[:first]}
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    columns["iteration"] = pa.array(np.arange(int(counts.sum())) - starts)
    columns["time_us"] = pa.array(np.concatenate([p.times for p in parts]))
    columns.update({k: repeated(k) for k in names[first:]})
    for key in dict.fromkeys(k for p in parts for k in p.series):
        columns[key] = _joined([p.series.get(key) for p in parts], iterations)
    return pa.table(columns)


def timeline_records(parts: Iterable[Part]) -> list[dict[str, Any]]:
    """Every part's timeline records, in part order."""
    return [rec for part in parts for rec in part.timelines]
