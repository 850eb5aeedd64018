"""Shards -> tables: one row per measured iteration per rank (`<probe>`), timeline intervals
(`<probe>_timeline`) and the nodes' telemetry samples; in memory, or written as parquet when a
run ends (`consolidate`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from gpuprof.runs.cases import (
    COMMON_COLUMNS,
    PARALLEL_BYTES,
    case_tables,
    read_parts,
    timeline_records,
)
from gpuprof.runs.records import read_jsonl


def _timeline_rows(records: Iterable[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Timeline records -> one row per interval, grouped by probe (`<probe>_timeline`)."""
    frames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        fixed = {k: rec[k] for k in COMMON_COLUMNS if k in rec}
        frames[f"{rec['probe']}_timeline"].extend({**fixed, **row} for row in rec["rows"])
    return {name: pd.DataFrame(rows) for name, rows in frames.items()}


def build_tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    """The run's tables from its shards, in memory: `<probe>` (and `<probe>_timeline`) from
    the rank shards, `telemetry` from the nodes' samples. Writes nothing."""
    return {
        name: as_pandas(table) if isinstance(table, pa.Table) else table
        for name, table in _tables(run_dir).items()
    }


def _tables(run_dir: Path, parallel_bytes: float = math.inf) -> dict[str, pa.Table | pd.DataFrame]:
    """The tables from the shards: read in two processes past `parallel_bytes` of shards
    (`runs.cases`; by default in this one), the telemetry's JSON parsed by arrow's C++ reader
    on another core meanwhile (it lets go of the GIL: 23 -> 19 s at 1,024 ranks)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        samples = pool.submit(read_telemetry, run_dir)
        parts = read_parts(run_dir, parallel_bytes)
        tables: dict[str, pa.Table | pd.DataFrame] = {
            **case_tables(parts),
            **_timeline_rows(timeline_records(parts)),
        }
        telemetry = samples.result()
    if telemetry is not None:
        tables["telemetry"] = telemetry
    return tables


def consolidate(run_dir: Path, keep: dict[str, pd.DataFrame] | None = None) -> dict[str, Path]:
    """Write the run's tables as `<table>.parquet` (when the run ends; safe to run again).
    Text columns built as dictionaries are written as parquet's own dictionary pages, their
    type plain text (no arrow schema stored: a reader gets strings, not categories). `keep`
    receives the measured tables as a reader of the files gets them, for a report written
    next in this process (reading 30 M rows back took seconds)."""
    written, tables = {}, _tables(run_dir, PARALLEL_BYTES)
    # each file written on the other core while the next table is built for the report (both
    # in arrow's C++, which lets go of the GIL): 15-20 -> 7.5 s at 1,024 ranks
    with ThreadPoolExecutor(max_workers=1) as pool:
        writes = []
        for name in list(tables):
            table = tables.pop(name)  # each table's memory given back once written
            written[name] = run_dir / f"{name}.parquet"
            writes.append(pool.submit(_write, table, written[name]))
            if keep is not None and isinstance(table, pa.Table):
                keep[name] = as_pandas(table)
        for done in writes:
            done.result()  # its error, if any, here
    return written


def _write(table: pa.Table | pd.DataFrame, path: Path) -> None:
    if isinstance(table, pd.DataFrame):
        table.to_parquet(path, index=False)
        return
    # statistics of the text columns took 40% of writing 22 M rows (a reader's filters by
    # rank, size or time still use the numbers')
    numbers = [f.name for f in table.schema if not pa.types.is_dictionary(f.type)]
    pq.write_table(table, path, store_schema=False, write_statistics=numbers)


def read_telemetry(run_dir: Path) -> pd.DataFrame | None:
    """Every node's samples (one row per sample and source), or None without telemetry.
    Read by pyarrow's JSON reader (C++, about 5x the line-by-line reader on 128 nodes'
    samples); a file it refuses (a torn last line, a damaged one) is read line by line,
    the damaged lines skipped with a warning."""
    frames = []
    for path in sorted((run_dir / "telemetry").glob("node-*.jsonl")):
        try:
            frame = pa_json.read_json(path).to_pandas()
            # its threads order the columns as they meet them: the file's own order instead
            seen = _keys_seen(path)
            frame = frame[[c for c in seen if c in frame] + sorted(set(frame) - set(seen))]
        except (pa.ArrowInvalid, OSError):
            rows = list(read_jsonl(path))
            frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
        if len(frame):
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else None


def _keys_seen(path: Path, lines: int = 1000) -> list[str]:
    """The keys of a JSONL file's first lines, in the order they first appear."""
    seen: dict[str, None] = {}
    with path.open(encoding="utf-8", errors="replace") as handle:
        for _, line in zip(range(lines), handle, strict=False):
            try:
                seen.update(dict.fromkeys(orjson.loads(line)))  # 128 nodes: 1.2 s with json, 0.3
            except (orjson.JSONDecodeError, TypeError):
                continue
    return list(seen)


def read_parquet(path: Path) -> pd.DataFrame:
    """A table written by `consolidate`, as pandas reads it, each text column in one piece:
    read dictionary-encoded (as parquet stores it: half the time of reading the text) and
    decoded once. Read as pandas does, a text column of tens of millions of rows arrives in
    a hundred chunks, and every later selection of rows from it (a filter, the first row of
    each group) first joins them: a copy of the whole column each time."""
    schema = pq.read_schema(path)
    strings = (pa.types.is_string, pa.types.is_large_string)
    text = [f.name for f in schema if any(is_text(f.type) for is_text in strings)]
    return as_pandas(pq.read_table(path, read_dictionary=text), schema)


def as_pandas(table: pa.Table, schema: pa.Schema | None = None) -> pd.DataFrame:
    """An arrow table as pandas, its dictionary columns decoded into one piece each: text as
    pandas holds it (large_string: decoded to another type, pandas would convert it again),
    anything else to the type `schema` gives, else the dictionary's. The columns are decoded
    on every core at once (arrow's take lets go of the GIL): the 8 text columns of 22 M rows
    at 1,024 ranks, 3.4 s one after the other, 1.2-1.5 s on 2 cores."""

    source = table  # the columns are read from the table as given

    def decoded(index: int) -> pa.Array:
        encoded = source.column(index).combine_chunks()  # the chunks' dictionaries unified
        values = encoded.dictionary
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.large_string())
        elif schema is not None:
            values = values.cast(schema.field(source.schema[index].name).type)
        return values.take(encoded.indices)

    coded = [i for i, field in enumerate(table.schema) if pa.types.is_dictionary(field.type)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(coded), pa.cpu_count()))) as pool:
        for index, column in zip(coded, pool.map(decoded, coded), strict=True):
            name = table.schema[index].name
            table = table.set_column(index, pa.field(name, column.type), [column])
    numbers = _numbers(table)
    rest: pd.DataFrame = table.drop_columns(list(numbers)).to_pandas()
    if not numbers:
        return rest
    return pd.DataFrame(
        {name: numbers[name] if name in numbers else rest[name] for name in table.column_names},
        index=rest.index,
        copy=False,
    )


# number types whose arrow values are laid out as numpy's (bool is a bit per value in arrow)
_PLAIN = frozenset(
    pa.from_numpy_dtype(np.dtype(t)) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")
) | {pa.float32(), pa.float64()}


def _numbers(table: pa.Table) -> dict[str, np.ndarray]:
    """The table's number columns without missing values, in one piece each, as numpy arrays
    on arrow's own memory, writable (arrow's buffers are, numpy's view of them says so):
    pandas' conversion copies them into fresh memory, and on a VM the kernel's zeroing of fresh
    pages is most of that (the collectives at 1,024 ranks, 36 M rows: 13.8 -> 4.7-6.0 s). A
    frame holding them keeps the table's memory alive; nothing writes the table after."""
    meta = table.schema.pandas_metadata or {}
    if meta.get("index_columns") not in (None, []):
        return {}  # an index stored as columns: pandas' own conversion rebuilds it
    # a column pandas wrote with another dtype (nullable Int64, ...) is pandas' to rebuild
    other = {c.get("field_name"): c.get("numpy_type") for c in meta.get("columns") or []}
    out: dict[str, np.ndarray] = {}
    for field, column in zip(table.schema, table.columns, strict=True):
        # joining several chunks copies anyway, as pandas' conversion does
        if field.type not in _PLAIN or column.null_count or column.num_chunks != 1:
            continue
        dtype = np.dtype(field.type.to_pandas_dtype())
        if len(column) == 0 or other.get(field.name, dtype.name) != dtype.name:
            continue
        chunk = column.chunk(0)
        out[field.name] = np.frombuffer(
            chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize
        )
    return out


def group_codes(frame: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """One integer per row, the same for rows that agree on every key (a group's number, in
    order of first appearance): each column factorized once and the codes combined, where a
    groupby on the columns themselves factorizes them again for every aggregation (tens of
    millions of rows at 1,024 ranks). A case record's rows lie together in a table, so the
    rows are first cut into runs of equal keys (each row against the one before: no hashing)
    and only each run's first row is factorized."""
    n = len(frame)
    change = np.ones(n, dtype=bool)
    if n > 1:
        change[1:] = False
        for key in keys:
            change[1:] |= _differs_from_previous(frame[key])
    codes = np.zeros(int(change.sum()), dtype=np.int64)
    for key in keys:
        column, uniques = pd.factorize(_rows(frame[key], change), use_na_sentinel=False)
        codes = codes * max(1, len(uniques)) + column
        codes = pd.factorize(codes)[0]  # renumber: the product never overflows
    return np.repeat(codes, np.diff(np.append(np.flatnonzero(change), n)))


def _arrow(column: pd.Series) -> pa.ChunkedArray | pa.Array | None:
    """A column's arrow data as pandas holds it (no copy), or None for numpy-backed ones."""
    if isinstance(column.dtype, pd.StringDtype | pd.ArrowDtype):
        try:
            return pa.array(column.array)
        except (pa.ArrowInvalid, TypeError):  # python-backed strings: numpy's way
            return None
    return None


def _differs_from_previous(column: pd.Series) -> np.ndarray:
    """Row i + 1 against row i (n - 1 flags); a missing value counts as a change (which only
    splits a run: equal keys still get one code)."""
    values = _arrow(column)
    if values is not None:
        differs = pc.not_equal(values[1:], values[:-1]).fill_null(True)
        flags: np.ndarray = differs.to_numpy(zero_copy_only=False)
        return flags
    plain = column.to_numpy()
    try:
        return np.asarray(plain[1:] != plain[:-1], dtype=bool)
    except (TypeError, ValueError):  # pd.NA's comparisons are NA: every row its own run
        return np.ones(len(plain) - 1, dtype=bool)


def _rows(column: pd.Series, mask: np.ndarray) -> pd.Series | np.ndarray:
    """The rows of `mask`: arrow data filtered chunk by chunk (arrow's take on a chunked
    string column first joins its chunks: the whole column copied)."""
    values = _arrow(column)
    if values is not None:
        return pd.Series(values.filter(pa.array(mask)).to_pandas())
    rows: np.ndarray = column.to_numpy()[mask]
    return rows


def record_starts(frame: pd.DataFrame) -> np.ndarray:
    """The first row of every measured record (one rank's iterations of one case, which lie
    together in a table): a row starts one where its iteration does not follow the row
    before's, or its rank or start time differs. Numbers only: what needs a record's values,
    not its iterations', reads these rows (tens of times fewer at 1,024 ranks)."""
    n = len(frame)
    if "iteration" not in frame.columns or n < 2:
        return np.arange(n)
    new = np.ones(n, dtype=bool)
    iteration = frame["iteration"].to_numpy()
    try:
        new[1:] = np.asarray(iteration[1:] != iteration[:-1] + 1, dtype=bool)
    except (TypeError, ValueError):  # not plain numbers: every row its own record
        return np.arange(n)
    for key in ("rank", "start_unix_ns"):
        if key in frame.columns:
            new[1:] |= _differs_from_previous(frame[key])
    return np.flatnonzero(new)


def rows_of(frame: pd.DataFrame, rows: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """`frame.iloc[rows][columns]`, each chosen column's rows taken alone: a selection of
    rows takes every column (23 of 22 M rows for the collectives at 1,024 ranks) and a
    choice of columns first copies every row of the table's blocks."""
    return pd.DataFrame({c: frame[c].iloc[rows].array for c in columns}, index=frame.index[rows])


def incomplete_cases(frame: pd.DataFrame) -> pd.DataFrame:
    """Cases some rank of whose group has no rows (a damaged or missing shard line, or a rank
    that died in the case): case_id, scope, group, world_size and the ranks present."""
    keys = ["case_id", "scope", "group", "world_size"]
    if frame.empty or not {*keys, "rank"} <= set(frame.columns):
        return pd.DataFrame(columns=[*keys, "ranks"])
    # a rank is there by its records: their first rows
    frame = rows_of(frame, record_starts(frame), [*keys, "rank"])
    codes = group_codes(frame, keys)
    ranks = pd.Series(frame["rank"].to_numpy()).groupby(codes).nunique()
    sizes = pd.Series(frame["world_size"].to_numpy()).groupby(codes).first()
    short = ranks.index[ranks.to_numpy() < sizes.to_numpy()]
    rows = frame[np.isin(codes, short)]
    if rows.empty:
        return pd.DataFrame(columns=[*keys, "ranks"])
    found = rows.groupby(keys, dropna=False)["rank"].agg(lambda r: sorted(set(r))).reset_index()
    return found.rename(columns={"rank": "ranks"}).reset_index(drop=True)
