"""One summary per table, as `gpuprof show` prints it (the single dispatch point)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.bandwidth import summarize_collectives
from gpuprof.analysis.ceilings import summarize_compute, summarize_memory
from gpuprof.analysis.p2p import summarize_p2p
from gpuprof.errors import UsageError

SUMMARIZED = ("collectives", "p2p", "memory", "compute")


def gpu_names(info: dict[str, Any]) -> dict[int, str]:
    """rank -> GPU name from run.json `ranks` (empty on CPU)."""
    return {int(r["rank"]): r["gpu_name"] for r in info.get("ranks") or [] if r.get("gpu_name")}


def summarize(table: str, frame: pd.DataFrame, info: dict[str, Any]) -> pd.DataFrame:
    """The summary of `table` (one row per case and group or device)."""
    if table == "collectives":
        return summarize_collectives(frame)
    if table == "p2p":
        return summarize_p2p(frame, info)
    if table == "memory":
        return summarize_memory(frame, gpu_names(info))
    if table == "compute":
        return summarize_compute(frame, gpu_names(info))
    raise UsageError(f"no summary for table {table!r}", f"tables: {', '.join(SUMMARIZED)}")
