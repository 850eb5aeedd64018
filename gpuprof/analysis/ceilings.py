"""Device ceilings: memory copy bandwidth and matmul throughput per rank, with % of peak.

Each case ran on one device, either alone in its node or with every device of the node busy
(`concurrency`: alone, together; runs from before the column ran alone); its time is the
median over iterations. Bandwidth counts
the bytes the case says it moved (`bytes_moved`: one direction for host<->device copies, read
plus written for device and host copies); TFLOP/s counts 2 n^3 per matmul.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from gpuprof.analysis import RunTables, gpu_names, require_columns
from gpuprof.machine.hardware import gpu_peaks, pct_of_peak

_KEYS = ["rank", "host", "group", "concurrency"]


def _with_concurrency(frame: pd.DataFrame) -> pd.DataFrame:
    """The table with its `concurrency` column (runs made before it ran each device alone)."""
    if "concurrency" in frame.columns:
        return frame
    return frame.assign(concurrency="alone")


def _per_case(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Median and p99 time per case, and the case's canary where it has one (one value per
    case, on every row of it: the resource's own speed between its iterations)."""
    groups = frame.groupby(keys, sort=True)
    columns = {
        "time_us": groups["time_us"].median(),
        "time_us_p99": groups["time_us"].quantile(0.99),
        "num_iterations": groups["time_us"].size(),
    }
    if "canary" in frame.columns:
        columns["canary"] = groups["canary"].first().astype(float)
    return pd.DataFrame(columns).reset_index()


def _memory_peak(kind: str, gpu: str | None) -> float | None:
    peaks = gpu_peaks(gpu)
    if peaks is None:
        return None
    return peaks.memory_gbps if kind == "d2d" else peaks.host_gbps


def summarize_memory(
    frame: pd.DataFrame, gpu_names: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """One row per rank and copy kind: bandwidth (GB/s) and % of the datasheet peak."""
    frame = _with_concurrency(frame)
    require_columns(
        frame, [*_KEYS, "kind", "size_bytes", "bytes_moved", "time_us", "nwrong"], "memory"
    )
    keys = [*_KEYS, "kind", "size_bytes", "bytes_moved"]
    summary = _per_case(frame, keys)
    summary["nwrong"] = frame.groupby(keys, sort=True)["nwrong"].first().to_numpy()
    summary["bandwidth_gbps"] = summary["bytes_moved"] / summary["time_us"] / 1e3
    names = gpu_names or {}
    summary["pct_of_peak"] = [
        pct_of_peak(bw, _memory_peak(kind, names.get(rank)))
        for bw, kind, rank in zip(
            summary["bandwidth_gbps"], summary["kind"], summary["rank"], strict=True
        )
    ]
    return summary


def summarize_compute(
    frame: pd.DataFrame, gpu_names: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """One row per rank and dtype: matmul TFLOP/s and % of the datasheet dense peak."""
    frame = _with_concurrency(frame)
    require_columns(frame, [*_KEYS, "dtype", "n", "flop", "time_us"], "compute")
    keys = [*_KEYS, "dtype", "n", "flop"]
    summary = _per_case(frame, keys)
    summary["tflops"] = summary["flop"] / summary["time_us"] / 1e6
    names = gpu_names or {}

    def peak(dtype: str, rank: int) -> float | None:
        peaks = gpu_peaks(names.get(rank))
        return peaks.tflops.get(dtype) if peaks else None

    summary["pct_of_peak"] = [
        pct_of_peak(tf, peak(dtype, rank))
        for tf, dtype, rank in zip(
            summary["tflops"], summary["dtype"], summary["rank"], strict=True
        )
    ]
    return summary


def summarize_memory_run(run: RunTables) -> pd.DataFrame:
    """The memory summary of a run (GPU names from run.json for % of peak)."""
    return summarize_memory(run.table("memory"), gpu_names(run.info))


def summarize_compute_run(run: RunTables) -> pd.DataFrame:
    """The compute summary of a run (GPU names from run.json for % of peak)."""
    return summarize_compute(run.table("compute"), gpu_names(run.info))


def matmul_ceilings(run: RunTables) -> pd.DataFrame:
    """The compute summary of a run that measured it, else an empty frame."""
    return summarize_compute_run(run) if "compute" in run.tables() else pd.DataFrame()
