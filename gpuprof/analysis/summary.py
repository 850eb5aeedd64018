"""One summary per table, as `gpuprof show` prints it (the single dispatch point)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.bandwidth import summarize_collectives
from gpuprof.analysis.ceilings import summarize_compute, summarize_memory
from gpuprof.analysis.ddp import summarize_ddp
from gpuprof.analysis.p2p import summarize_p2p
from gpuprof.analysis.pipeline import summarize_pipeline
from gpuprof.errors import UsageError
from gpuprof.hardware import gpu_peaks
from gpuprof.store import Run

SUMMARIZED = ("collectives", "p2p", "memory", "compute", "ddp", "pipeline")


def gpu_names(info: dict[str, Any]) -> dict[int, str]:
    """rank -> GPU name from run.json `ranks` (empty on CPU)."""
    return {int(r["rank"]): r["gpu_name"] for r in info.get("ranks") or [] if r.get("gpu_name")}


def gpu_model(info: dict[str, Any]) -> str | None:
    """The GPU name of the run (rank 0's), None on CPU."""
    ranks = info.get("ranks") or []
    return next((r["gpu_name"] for r in ranks if r.get("gpu_name")), None)


def collective_pct_of_peak(summary: pd.DataFrame, info: dict[str, Any]) -> pd.Series:
    """busbw as % of the GPU's NVLink rate per direction, for single-node scopes; else empty
    (a network scope's peak would need the rank-to-NIC mapping)."""
    peaks = gpu_peaks(gpu_model(info))
    link = peaks.nvlink_gbps if peaks else None
    if not link:
        return pd.Series([None] * len(summary), index=summary.index, dtype="object")
    pct = 100 * summary["busbw_gbps"] / link
    return pct.where(summary["num_nodes"] == 1)


def summarize_run(run: Run, table: str) -> pd.DataFrame:
    """The summary of a run's `table`, with the other tables it needs (a pipeline's
    timeline)."""
    if table == "pipeline":
        return summarize_pipeline(run.table("pipeline"), run.table("pipeline_timeline"))
    return summarize(table, run.table(table), run.info)


def summarize(table: str, frame: pd.DataFrame, info: dict[str, Any]) -> pd.DataFrame:
    """The summary of `table` (one row per case and group or device)."""
    if table == "collectives":
        summary = summarize_collectives(frame)
        summary["pct_of_peak"] = collective_pct_of_peak(summary, info)
        return summary
    if table == "p2p":
        return summarize_p2p(frame, info)
    if table == "memory":
        return summarize_memory(frame, gpu_names(info))
    if table == "compute":
        return summarize_compute(frame, gpu_names(info))
    if table == "ddp":
        return summarize_ddp(frame)
    raise UsageError(f"no summary for table {table!r}", f"tables: {', '.join(SUMMARIZED)}")
