"""Pure analysis: DataFrame in, DataFrame out; no torch, no pynvml, no figures.

Each probe's analysis module also has a `summarize_run(run)` (named in its registry entry)
that feeds its pure functions from a run's tables and run.json.

May import specs, machine facts (hardware peaks, topology) and the foundations; never torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pandas.core.groupby import SeriesGroupBy

from gpuprof.errors import UsageError
from gpuprof.runs.tables import group_codes, record_starts, rows_of


class RunTables(Protocol):
    """What analysis needs of a run (`gpuprof.runs.store.Run` is one)."""

    info: dict[str, Any]

    def table(self, name: str) -> pd.DataFrame: ...

    def tables(self) -> list[str]: ...


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise a UsageError naming the missing columns before any analysis starts."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UsageError(f"{what} table lacks columns {', '.join(missing)}")


def grouped(
    frame: pd.DataFrame,
    keys: list[str],
    shown: list[str] | None = None,
    starts: np.ndarray | None = None,
) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's group number (`group_codes`: one integer per combination of the keys) and
    the `shown` columns (the keys by default) of each group's first row, one row per group in
    number order. The keys and shown columns are a record's own values (a case's parameters,
    its rank), the same on each of its iterations: they are read at each record's first row
    (`record_starts`, or `starts` where the caller has them) and the numbers repeated over
    its rows. A 1,024-rank run has tens of millions of rows, 80 a record: a groupby on the
    key columns factorizes them again for every aggregation, grouping every row took
    seconds."""
    starts = record_starts(frame) if starts is None else starts
    columns = list(dict.fromkeys([*keys, *(shown or keys)]))
    records = rows_of(frame, starts, columns)
    per_record = group_codes(records, keys)
    first = np.unique(per_record, return_index=True)[1]  # a record of each group, in code order
    codes = np.repeat(per_record, np.diff(np.append(starts, len(frame))))
    return codes, records[shown or keys].iloc[first].set_axis(np.arange(len(first)))


def slowest_iterations(frame: pd.DataFrame, codes: np.ndarray) -> SeriesGroupBy[Any, Any]:
    """Each group's iterations as its slowest rank timed them (the time every rank waited
    for), grouped by group number: `.median()` is one value per group, in number order. Each
    group's iterations get a slot of their own (group g's iteration i at g's first slot + i)
    and every row's time goes to the maximum at its slot (a missing time is skipped: a slot
    whose every time is missing stays missing): no hashing of tens of millions of keys."""
    if not len(frame):
        return pd.Series([], dtype=float).groupby(np.zeros(0, dtype=np.int64))
    iteration = frame["iteration"].to_numpy(np.int64)
    groups = int(codes.max()) + 1
    span = np.zeros(groups, dtype=np.int64)
    np.maximum.at(span, codes, iteration + 1)
    first_slot = np.cumsum(span) - span
    slot = first_slot[codes] + iteration
    slowest = np.full(int(span.sum()), -np.inf)
    np.fmax.at(slowest, slot, frame["time_us"].to_numpy(float))
    slowest[slowest == -np.inf] = np.nan
    timed = np.zeros(len(slowest), dtype=bool)
    timed[slot] = True  # an iteration number no row has is no iteration
    owner = np.repeat(np.arange(groups), span)
    return pd.Series(slowest[timed]).groupby(owner[timed], sort=True)


def gpu_names(info: dict[str, Any]) -> dict[int, str]:
    """rank -> GPU name from run.json `ranks` (empty on CPU)."""
    return {int(r["rank"]): r["gpu_name"] for r in info.get("ranks") or [] if r.get("gpu_name")}


def gpu_model(info: dict[str, Any]) -> str | None:
    """The GPU name of the run (rank 0's), None on CPU."""
    ranks = info.get("ranks") or []
    return next((r["gpu_name"] for r in ranks if r.get("gpu_name")), None)
