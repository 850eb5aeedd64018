"""Pure analysis: DataFrame in, DataFrame out; no torch, no pynvml, no figures.

Each probe's analysis module also has a `summarize_run(run)` (named in its registry entry)
that feeds its pure functions from a run's tables and run.json.

May import specs, machine facts (hardware peaks, topology) and the foundations; never torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import pandas as pd

from gpuprof.errors import UsageError


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


def gpu_names(info: dict[str, Any]) -> dict[int, str]:
    """rank -> GPU name from run.json `ranks` (empty on CPU)."""
    return {int(r["rank"]): r["gpu_name"] for r in info.get("ranks") or [] if r.get("gpu_name")}


def gpu_model(info: dict[str, Any]) -> str | None:
    """The GPU name of the run (rank 0's), None on CPU."""
    ranks = info.get("ranks") or []
    return next((r["gpu_name"] for r in ranks if r.get("gpu_name")), None)
