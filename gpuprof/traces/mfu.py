"""Achieved FLOP/s and model FLOPs utilization from a rank's trace.

A step's FLOPs are those of the ops it ran (`traces.flops`: recorded by the profiler, else
counted from shapes; the recorded ones where a trace has any; none for a step with an op
that could not be counted). Achieved FLOP/s = the step's
FLOPs / its span (the step as users know it); utilization = achieved / the dense peak of
the datasheet for the dtype that carries most FLOPs (the trace's GPU name, `deviceProperties`)
and, with a sweep of the same machine (`gpuprof trace --run`), / the matmul ceiling it
measured. Per op (the window's steps): its FLOPs over the time of the work it ran: on a GPU
the device's busy time for the kernels it launched (its thread's launches during the op), on a
host the op's own time.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from gpuprof.analysis.intervals import length, merge
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.traces.flops import DTYPES
from gpuprof.traces.reader import RankTrace


def _flops(trace: RankTrace) -> tuple[np.ndarray, ...]:
    """The FLOP ops' start, end, tid, name, FLOPs (NaN: none) and dtype index."""
    start, end, tid, name, recorded, counted, dtype = trace.flop_ops.arrays()
    flops = recorded if np.isfinite(recorded).any() else counted
    keep = np.isfinite(flops)
    return start[keep], end[keep], tid[keep], name[keep], flops[keep], dtype[keep]


def uncounted(trace: RankTrace) -> np.ndarray:
    """The starts of the ops whose FLOPs could not be counted (a convolution without its
    arguments, as older torch recorded them): a step with one has no FLOPs total."""
    start, _, _, _, recorded, counted, _ = trace.flop_ops.arrays()
    missing: np.ndarray = start[:0] if np.isfinite(recorded).any() else start[~np.isfinite(counted)]
    return missing


def step_flops(trace: RankTrace) -> dict[int, float]:
    """FLOPs per step number (ops that started in the host step; NaN where one could not be
    counted); empty without any."""
    start, *_, flops, _ = _flops(trace)
    if not flops.size:
        return {}
    missing = uncounted(trace)
    out = {}
    for n, lo, hi in trace.steps:
        whole = not ((missing >= lo) & (missing < hi)).any()
        out[n] = float(flops[(start >= lo) & (start < hi)].sum()) if whole else np.nan
    return out


def main_dtype(trace: RankTrace) -> str | None:
    """The datasheet dtype that carries most of the rank's FLOPs."""
    *_, flops, dtype = _flops(trace)
    totals = np.bincount(dtype.astype(np.int64), weights=flops, minlength=len(DTYPES))
    return DTYPES[int(totals.argmax())] if flops.size and totals.max() > 0 else None


def datasheet_tflops(trace: RankTrace, dtype: str | None) -> float | None:
    """The dense peak of the trace's GPU for a dtype, where the presets know the GPU."""
    peaks = gpu_peaks(trace.gpu) if trace.gpu else None
    return peaks.tflops.get(dtype) if peaks and dtype else None


def op_flops_rows(trace: RankTrace, before: float, device: Any = None) -> list[dict[str, Any]]:
    """Per op name over the window (ops that started before `before`): count, FLOPs, the
    time of the work it ran (us) and TFLOP/s."""
    start, end, tid, name, flops, _ = _flops(trace)
    kept = start < before
    start, end, tid, name, flops = start[kept], end[kept], tid[kept], name[kept], flops[kept]
    per: dict[int, list[Any]] = defaultdict(lambda: [0, 0.0, [], []])
    if device is not None:
        corr, ts, launch_tid = trace.launches.arrays()
        order = np.argsort(ts, kind="stable")
        corr, ts, launch_tid = corr[order], ts[order], launch_tid[order]
        by_corr = {int(c): i for i, c in enumerate(device.corr)}
    for i in range(flops.size):
        row = per[int(name[i])]
        row[0] += 1
        row[1] += float(flops[i])
        if device is None:
            row[2].append(float(start[i]))
            row[3].append(float(end[i]))
            continue
        lo, hi = np.searchsorted(ts, [start[i], end[i]])
        for c in corr[lo:hi][launch_tid[lo:hi] == tid[i]]:
            if (k := by_corr.get(int(c))) is not None:
                row[2].append(float(device.start[k]))
                row[3].append(float(device.end[k]))
    out = []
    for ident, (count, total, starts, ends) in per.items():
        busy = (
            length(merge(starts, ends))
            if device is not None
            else float(np.sum(ends) - np.sum(starts))
        )
        out.append(
            {
                "rank": trace.rank,
                "name": trace.names[ident],
                "count": count,
                "flops": total,
                "time_us": busy,
                "tflops": total / busy / 1e6 if busy > 0 else float("nan"),
            }
        )
    return sorted(out, key=lambda r: -r["flops"])
