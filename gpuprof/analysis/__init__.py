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
from gpuprof.runs.tables import group_codes


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
    frame: pd.DataFrame, keys: list[str], shown: list[str] | None = None
) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's group number (`group_codes`: one integer per combination of the keys) and
    the `shown` columns (the keys by default) of each group's first row, one row per group in
    number order. A 1,024-rank run has tens of millions of rows: a groupby on the key columns
    factorizes them again for every aggregation."""
    codes = group_codes(frame, keys)
    first = np.unique(codes, return_index=True)[1]  # a row of each group, in code order
    return codes, frame[shown or keys].iloc[first].set_axis(np.arange(len(first)))


def slowest_iterations(frame: pd.DataFrame, codes: np.ndarray) -> SeriesGroupBy[Any, Any]:
    """Each group's iterations as its slowest rank timed them (the time every rank waited
    for), grouped by group number: `.median()` is one value per group, in number order."""
    iteration = frame["iteration"].to_numpy(np.int64)
    span = int(iteration.max()) + 1 if len(iteration) else 1
    times = pd.Series(frame["time_us"].to_numpy(float))
    slowest = times.groupby(codes * span + iteration).max()  # per group and iteration
    return slowest.groupby(slowest.index.to_numpy() // span, sort=True)


def gpu_names(info: dict[str, Any]) -> dict[int, str]:
    """rank -> GPU name from run.json `ranks` (empty on CPU)."""
    return {int(r["rank"]): r["gpu_name"] for r in info.get("ranks") or [] if r.get("gpu_name")}


def gpu_model(info: dict[str, Any]) -> str | None:
    """The GPU name of the run (rank 0's), None on CPU."""
    ranks = info.get("ranks") or []
    return next((r["gpu_name"] for r in ranks if r.get("gpu_name")), None)
