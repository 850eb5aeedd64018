"""Collectives: all_reduce busbw on a full NVLink node against the reference for that GPU."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis import gpu_model
from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.units import format_size


def collective_findings(summary: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    """all_reduce busbw on a full NVLink node against the known reference for that GPU."""
    peaks = gpu_peaks(gpu_model(info))
    if peaks is None or not peaks.all_reduce_busbw_gbps or summary.empty:
        return []
    one_node = summary[
        (summary["op"] == "all_reduce") & (summary["num_nodes"] == 1) & (summary["world_size"] == 8)
    ]
    if one_node.empty:
        return []
    best = one_node.loc[one_node["size_bytes"] == one_node["size_bytes"].max()]
    best = best.iloc[int(best["busbw_gbps"].to_numpy().argmax())]
    busbw = float(best["busbw_gbps"])
    ring = peaks.all_reduce_busbw_gbps
    nvls = peaks.nvls_busbw_gbps
    ref, kind = (nvls, "NVLS") if nvls else (ring, "ring")
    pct = 100 * busbw / ref
    if pct >= 90:
        verdict = "as expected"
    elif nvls and busbw >= 0.9 * ring:
        verdict = (
            "ring speed, not NVLS: check that NVLink SHARP is on (NCCL_NVLS_ENABLE not 0, "
            "NCCL_ALGO not forcing Ring, the fabric manager running; NCCL_DEBUG=INFO names "
            "the algorithm)"
        )
    else:
        verdict = (
            "below the reference: check NVLink state (nvidia-smi nvlink -s), NCCL_ALGO/"
            "NCCL_PROTO overrides and GPU clocks"
        )
    return [
        f"all_reduce on 8 x {peaks.model} reaches {busbw:.0f} GB/s busbw at "
        f"{format_size(best['size_bytes'])} ({best['scope']}), {pct:.0f}% of the ~{ref:.0f} "
        f"GB/s {kind} reference (docs/methodology.md): {verdict}."
    ]


def findings(analyzed: Analyzed) -> list[str]:
    """The collectives rules over a run."""
    if not analyzed.has("collectives"):
        return []
    return collective_findings(analyzed.summary("collectives"), analyzed.info)
