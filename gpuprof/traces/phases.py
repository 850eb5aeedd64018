"""Forward, backward and optimizer per step, from what torch writes into every trace.

On the host, along each `ProfilerStep#N`:
- **backward** starts at the step's first autograd op (`autograd::engine::evaluate_function:
  ...`, or `...Backward`/`AccumulateGrad` as torch 1.8-1.9 named them, on whichever thread ran
  them) and lasts until the optimizer's step begins (DDP's wait for its last gradients is part
  of it), or until the last autograd op ends when no optimizer step follows;
- **optimizer**: torch.optim's own `Optimizer.step#...` and `Optimizer.zero_grad#...` spans;
- **forward**: DDP's or FSDP's `...DataParallel.forward` spans where the model is wrapped in
  one, else from the end of the step's data loading (or the step's start) to the backward's
  start, the loss included;
and none counts another's time (a `zero_grad` between the forward and the backward is the
optimizer's) or the data loader's. On a GPU, a phase's time is the device's busy
time for the work launched during it (its kernels, copies and sets, merged), in the step as
users know it. A step without autograd ops (inference, or a recording without them) has none.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from gpuprof.analysis.intervals import EMPTY, Spans, clip, length, merge, subtract
from gpuprof.traces.reader import RankTrace

BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|AccumulateGrad")
PHASES = ("forward_us", "backward_us", "optimizer_us")


def spans_of(rows: list[tuple[float, float]]) -> Spans:
    """(start, end) rows as one merged interval set."""
    return merge([r[0] for r in rows], [r[1] for r in rows]) if rows else EMPTY


def _autograd_ops(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """The starts and ends of the rank's autograd ops."""
    start, end, _, name = trace.ops.arrays()
    backward_name = np.array([bool(BACKWARD.search(n)) for n in trace.names] or [False])
    chosen = backward_name[name.astype(np.int64)]
    return start[chosen], end[chosen]


def host_phases(
    trace: RankTrace, autograd: tuple[np.ndarray, np.ndarray], lo: float, hi: float
) -> dict[str, Spans] | None:
    """One host step's phases as interval sets, None when the step ran no backward."""
    start, end = autograd
    backward = (start >= lo) & (start < hi)
    if not backward.any():
        return None
    b0 = float(start[backward].min())
    optimizer = [(a, b) for kind, a, b in trace.marks if kind == "optimizer" and lo <= a < hi]
    forward_marks = [(a, b) for kind, a, b in trace.marks if kind == "forward" and lo <= a < b0]
    after = [a for a, _ in optimizer if a >= b0]
    b1 = min(after) if after else float(end[backward].max())
    inputs = clip(spans_of(trace.inputs), lo, hi)
    opt = spans_of(optimizer)
    if forward_marks:
        forward = spans_of(forward_marks)
    else:
        before = [b for a, b in trace.inputs if lo <= b <= b0]
        forward = spans_of([(max([lo, *before]), b0)])
    return {
        "forward_us": subtract(subtract(forward, inputs), opt),
        "backward_us": subtract(spans_of([(b0, b1)]), opt),
        "optimizer_us": clip(opt, lo, hi),
    }


def step_phases(
    trace: RankTrace,
    host_steps: list[tuple[int, float, float]],
    device: Any = None,
    device_steps: list[tuple[int, float, float]] | None = None,
) -> dict[int, dict[str, float]]:
    """Per step number, each phase's time (us): host time, or on a GPU (`device`, a
    breakdown `_Device`, and its steps as users know them) the device's busy time for the
    work launched in each phase."""
    out: dict[int, dict[str, float]] = {}
    spans = {n: (lo, hi) for n, lo, hi in device_steps or []}
    autograd = _autograd_ops(trace)
    for number, lo, hi in host_steps:
        phases = host_phases(trace, autograd, lo, hi)
        if phases is None:
            continue
        if device is None:
            out[number] = {k: length(v) for k, v in phases.items()}
            continue
        d_lo, d_hi = spans.get(number, (lo, hi))
        row = {}
        for key, host in phases.items():
            launched = np.zeros(device.launch.size, bool)
            for a, b in zip(*host, strict=True):
                launched |= (device.launch >= a) & (device.launch < b)
            busy = merge(device.start[launched], device.end[launched])
            row[key] = length(clip(busy, d_lo, d_hi))
        out[number] = row
    return out
