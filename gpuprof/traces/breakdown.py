"""Where one rank's step time goes, per step and over the job's window, from its reduced trace.

Two timelines, by what the trace holds:
- **device** (a GPU trace): the union of the rank's kernels, copies and sets on every stream.
  span = first start to last end; compute = the union of compute kernels; communication = the
  union of NCCL kernels; overlap = their intersection; exposed communication = communication
  - overlap; other = the rest of the busy time (copies, sets, other kernels); idle = span -
  busy. These are Holistic Trace Analysis's temporal breakdown and overlap (its
  non-compute time = exposed communication + other; its overlap % = overlap / communication).
  A kernel belongs to the step whose host code launched it.
- **host** (a CPU trace, e.g. gloo): the step's span on the host. input = the data loader's
  spans; compute = host ops outside them (not `c10d::*` calls); communication = the gloo
  worker threads' collectives and the `c10d::*` calls; exposed communication = communication
  while neither compute nor input ran; other = the rest (outside any op: Python, the
  framework); a process is never idle.
The parts compute + exposed communication + other + input (host) + idle add up to the span.

The window (as HTA's): every step but the last one when there are two or more (the last
step's kernels may run past the end of the recording), and on a device, everything launched
before the last step.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property
from typing import Any

import numpy as np

from gpuprof.analysis.intervals import EMPTY, Spans, clip, intersect, length, merge, subtract, union
from gpuprof.traces.mfu import (
    datasheet_tflops,
    main_dtype,
    op_flops_rows,
    step_flops,
    uncounted,
)
from gpuprof.traces.phases import spans_of, step_phases
from gpuprof.traces.reader import KINDS, RankTrace

PARTS = ["compute_us", "exposed_comm_us", "other_us", "input_us", "idle_us"]
TOP_OPS = 10


def _window(trace: RankTrace) -> tuple[list[tuple[int, float, float]], float]:
    """The analysed steps and the time before which device work is counted."""
    if len(trace.steps) >= 2:
        return trace.steps[:-1], trace.steps[-1][1]
    return trace.steps, np.inf


def _parts(compute: Spans, comm: Spans, other: Spans, inputs: Spans, span: float) -> dict[str, Any]:
    """The step's parts from its interval sets (each already inside the step)."""
    overlap = length(intersect(comm, compute))
    exposed = length(subtract(subtract(comm, compute), inputs))
    input_us = length(subtract(inputs, compute)) if inputs[0].size else 0.0
    busy_other = length(subtract(subtract(other, compute), comm))
    busy = length(union(compute, comm, other, inputs))
    return {
        "span_us": span,
        "compute_us": length(compute),
        "comm_us": length(comm),
        "overlap_us": overlap,
        "exposed_comm_us": exposed,
        "other_us": busy_other,
        "input_us": input_us,
        "idle_us": max(span - busy, 0.0),
    }


class _Device:
    """A rank's device events as arrays, each with the time its launch happened."""

    def __init__(self, trace: RankTrace) -> None:
        self.start, self.end, codes, self.name, self.corr, self.gpu = trace.device.arrays()
        self.kind = codes  # an index of KINDS
        # a kernel whose launch was not recorded (launched before the recording began)
        # belongs to no step and is outside the window, as HTA counts it; a trace with no
        # launches at all (device activity only) is windowed by the kernels' own starts
        unknown = np.full(self.start.size, np.nan) if len(trace.launches) else self.start
        self.launch = trace.launch_times(self.corr, unknown)

    def in_window(self, before: float) -> np.ndarray:
        """What the window holds: launched before `before`; with no window (fewer than two
        steps), everything, unrecorded launches too (as HTA keeps all events then)."""
        return self.launch < before if np.isfinite(before) else np.ones(self.launch.size, bool)

    @cached_property
    def _merged(self) -> tuple[Spans, Spans, Spans]:
        """Every compute kernel, communication kernel and other device work, each merged
        once (a step clips them)."""
        code = [KINDS.index(k) for k in ("computation", "comm")]
        rest = ~np.isin(self.kind, code)
        return (
            merge(self.start[self.kind == code[0]], self.end[self.kind == code[0]]),
            merge(self.start[self.kind == code[1]], self.end[self.kind == code[1]]),
            merge(self.start[rest], self.end[rest]),
        )

    def step_spans(self, steps: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
        """The steps as users know them (the profiler viewer's rule): from ProfilerStep#N's
        start, data loading included, to the end of the device work it launched (or of the
        host step, if later); a step whose predecessor's work ran into it starts when that
        work ended, so steps never overlap; the first starts after device work from before it
        (`_before_first`)."""
        out, before = [], self._before_first(steps)
        for number, lo, hi in steps:
            launched = (self.launch >= lo) & (self.launch < hi)
            device_end = float(self.end[launched].max()) if launched.any() else -np.inf
            start = max(before, lo)
            end = max(hi, device_end, start)
            out.append((number, start, end))
            before = end
        return out

    def _before_first(self, steps: list[tuple[int, float, float]]) -> float:
        """When the first step can start: after device work launched in no step (before the
        recording's first step) that ended before the step's own first device work, as the
        profiler viewer counts it."""
        if not steps:
            return -np.inf
        in_steps = np.zeros(self.launch.size, bool)
        for _, lo, hi in steps:
            in_steps |= (self.launch >= lo) & (self.launch < hi)
        first = (self.launch >= steps[0][1]) & (self.launch < steps[0][2])
        if not first.any():
            return -np.inf
        ended = ~in_steps & (self.end < self.start[first].min())
        return float(self.end[ended].max()) if ended.any() else -np.inf

    def step_parts(self, lo: float, hi: float, host_inputs: Spans) -> dict[str, Any]:
        """One step's parts over [lo, hi), by time: compute, exposed communication and other
        device work as in `parts`; of the time the device had nothing to run, input = while
        the data loader ran on the host, idle = the rest (waiting for the host: Python,
        launches, host ops). The parts add up to the span."""
        compute, comm, other = (clip(spans, lo, hi) for spans in self._merged)
        busy = union(compute, comm, other)
        row = _parts(compute, comm, other, EMPTY, hi - lo)
        row["input_us"] = length(subtract(host_inputs, busy))
        row["idle_us"] = max(row["idle_us"] - row["input_us"], 0.0)
        return row

    def parts(self, mask: np.ndarray, host_inputs: Spans) -> dict[str, Any]:
        if not mask.any():
            return {}
        start, end, kind = self.start[mask], self.end[mask], self.kind[mask]
        span = float(end.max() - start.min())
        code = {k: KINDS.index(k) for k in ("computation", "comm")}
        sets = {k: merge(start[kind == c], end[kind == c]) for k, c in code.items()}
        rest = ~np.isin(kind, list(code.values()))
        row = _parts(sets["computation"], sets["comm"], merge(start[rest], end[rest]), EMPTY, span)
        row["input_us"] = length(host_inputs)  # host time, not a part of the device's span
        return row


def rank_breakdown(trace: RankTrace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per step rows, and the rank's row over the window."""
    steps, before = _window(trace)
    inputs = spans_of(trace.inputs)
    rows: list[dict[str, Any]] = []
    if trace.on_device:
        device = _Device(trace)
        spans = device.step_spans(trace.steps)
        phases = step_phases(trace, trace.steps, device, spans)
        for number, lo, hi in spans:
            parts = device.step_parts(lo, hi, clip(inputs, lo, hi))
            rows.append({"step": number, **parts, **phases.get(number, {})})
        # the data loader's time in the window's steps (the last step's is outside it)
        window = clip(inputs, steps[0][1], before) if steps else inputs
        total = device.parts(device.in_window(before), window)
        kept = {s[0] for s in steps}
        total.update(_sum_rows([phases[n] for n in sorted(kept & set(phases))]))
        timeline = "device"
    else:
        op_start, op_end, _, _ = trace.ops.arrays()
        ops = merge(op_start, op_end)
        comm = union(
            spans_of([(c.start, c.end) for c in trace.collectives]), spans_of(trace.comm_calls)
        )
        phases = step_phases(trace, trace.steps)
        for number, lo, hi in trace.steps:
            step_inputs = clip(inputs, lo, hi)
            compute = subtract(clip(ops, lo, hi), step_inputs)
            row = _parts(compute, clip(comm, lo, hi), EMPTY, step_inputs, hi - lo)
            # a process has no idle: outside ops it runs Python and the framework
            row["other_us"], row["idle_us"] = row["idle_us"], 0.0
            rows.append({"step": number, **row, **phases.get(number, {})})
        kept = {s[0] for s in steps}
        total = _sum_rows([r for r in rows if r["step"] in kept])
        timeline = "host"
    for row in rows:
        row.update(rank=trace.rank, timeline=timeline)
    total.update(rank=trace.rank, timeline=timeline, steps=len(steps))
    _with_flops(trace, rows, total, {s[0] for s in steps})
    return rows, total


def _with_flops(
    trace: RankTrace, rows: list[dict[str, Any]], total: dict[str, Any], kept: set[int]
) -> None:
    """Each step's FLOPs and TFLOP/s; the window's, with the datasheet's peak and MFU."""
    flops = step_flops(trace)
    if not flops:
        return
    for row in rows:
        row["flops"] = flops.get(row["step"], 0.0)
        row["tflops"] = row["flops"] / row["span_us"] / 1e6 if row["span_us"] else np.nan
    window = sum(row["span_us"] for row in rows if row["step"] in kept)
    total["flops"] = sum(flops.get(n, 0.0) for n in kept)
    total["tflops"] = total["flops"] / window / 1e6 if window else np.nan
    dtype = main_dtype(trace)
    peak = datasheet_tflops(trace, dtype)
    total.update(gpu=trace.gpu, flops_dtype=dtype, peak_tflops=peak)
    total["uncounted_ops"] = int(uncounted(trace).size)
    total["mfu_pct"] = 100 * total["tflops"] / peak if peak else np.nan


def device_rows(trace: RankTrace) -> list[dict[str, Any]]:
    """Per GPU of a process that drives several (one trace, kernels on more than one device),
    each device's own breakdown over the window; none for one GPU (the rank's row is it)."""
    if not trace.on_device:
        return []
    device = _Device(trace)
    gpus = np.unique(device.gpu)
    if gpus.size < 2:
        return []
    _, before = _window(trace)
    kept = device.in_window(before)
    rows = []
    for gpu in gpus:
        row = device.parts(kept & (device.gpu == gpu), EMPTY)
        if row:
            row.pop("input_us")  # the host's, not a device's
            rows.append({"rank": trace.rank, "device": int(gpu), **row})
    return rows


def flop_rows(trace: RankTrace) -> list[dict[str, Any]]:
    """Per op with FLOPs over the window: FLOPs, the time of its work, TFLOP/s."""
    _, before = _window(trace)
    return op_flops_rows(trace, before, _Device(trace) if trace.on_device else None)


def _sum_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = defaultdict(float)
    for row in rows:
        for key, value in row.items():
            if key.endswith("_us"):
                out[key] += value
    return dict(out)


def top_ops(trace: RankTrace) -> list[dict[str, Any]]:
    """The rank's kernels (device) or outermost host ops by total time in the window."""
    steps, before = _window(trace)
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0, 0])
    kinds: dict[int, str] = {}
    if trace.on_device:
        device = _Device(trace)
        kept = device.in_window(before)
        for name, start, end in zip(
            device.name[kept], device.start[kept], device.end[kept], strict=True
        ):
            totals[int(name)][0] += end - start
            totals[int(name)][1] += 1
        for name, kind in zip(device.name[kept], device.kind[kept], strict=True):
            kinds[int(name)] = KINDS[int(kind)]
    elif steps:
        lo, hi = steps[0][1], steps[-1][2]
        start, end, tid, name = trace.ops.arrays()
        inside = (start >= lo) & (start < hi)
        start, end, tid, name = start[inside], end[inside], tid[inside], name[inside]
        order = np.lexsort((-end, start))
        reach: dict[int, float] = {}
        for i in order:  # the outermost op of each thread: not inside one already counted
            t = int(tid[i])
            if start[i] < reach.get(t, -np.inf):
                continue
            reach[t] = float(end[i])
            totals[int(name[i])][0] += float(end[i] - start[i])
            totals[int(name[i])][1] += 1
            kinds[int(name[i])] = "host"
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
    return [
        {
            "rank": trace.rank,
            "name": trace.names[name],
            "kind": kinds[name],
            "count": int(count),
            "total_us": total,
        }
        for name, (total, count) in ranked
    ]
