"""Per-iteration timing: CUDA events on GPU (the stream held first), perf_counter_ns on CPU.

Test-only fault hook: `GPUPROF_FAULT_SLOW=FACTOR[:PATTERN]` injects a slowdown of exactly FACTOR
into the CPU-timed regions of the cases whose `probe/case_id` matches PATTERN (fnmatch; default
every case), and into the canaries (`gpuprof.probes._canary`) of those whose
`canary/probe/case_id` matches it ("*" slows both, as a slower machine would; "memory/*" the
host copies alone, as a slower copy kernel would; "*memory/*" both): `clock_ns()` dilates every
interval between two of its reads by FACTOR, so each timed iteration (and each DDP phase) reads
FACTOR times as long, and the iteration counts follow as they would for slower work. Nothing
extra runs: spinning or sleeping to make the time pass would change what the other ranks compete
for (memory bandwidth, the cores), so their work would speed up and the injected factor would
not be the one measured. The regression gate's tests and its detection-rate measurement use it;
the run records it in run.json's environment like every GPUPROF_ variable. A real slowdown is
tested on the emulated cluster's shaped link.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

HOLD_US_PER_ITER = 50.0  # enqueue time per iteration the spin kernel covers (Python + c10d)
HOLD_CYCLES_PER_US = 2000  # cycles per us at ~2 GHz; a faster clock only holds less long


SLOW_ENV = "GPUPROF_FAULT_SLOW"


class _Stretch:
    """The slowdown in force (1: none), the previous real clock read and its dilated value."""

    factor = 1.0
    last: int | None = None
    last_dilated = 0


def slowdown_for(probe: str, case_id: str) -> float:
    """The test-only slowdown factor for one case (1.0 without GPUPROF_FAULT_SLOW)."""
    value = os.environ.get(SLOW_ENV)
    if not value:
        return 1.0
    factor_text, _, pattern = value.partition(":")
    factor = float(factor_text)
    if not math.isfinite(factor) or factor < 1:
        raise ValueError(f"{SLOW_ENV}={value!r}: the factor must be a finite number >= 1")
    return factor if fnmatch.fnmatchcase(f"{probe}/{case_id}", pattern or "*") else 1.0


@contextlib.contextmanager
def stretched(factor: float) -> Iterator[None]:
    """Within the block, `clock_ns()` dilates every interval between its reads by `factor`."""
    _Stretch.factor, _Stretch.last = factor, None
    try:
        yield
    finally:
        _Stretch.factor, _Stretch.last = 1.0, None


def clock_ns() -> int:
    """perf_counter_ns; under `stretched(f)`, a clock whose every interval between two reads
    is f times the real one."""
    now = time.perf_counter_ns()
    if _Stretch.factor == 1:
        return now
    if _Stretch.last is None:
        _Stretch.last, _Stretch.last_dilated = now, now
        return now
    dilated = _Stretch.last_dilated + round((now - _Stretch.last) * _Stretch.factor)
    _Stretch.last, _Stretch.last_dilated = now, dilated
    return dilated


def _time_cpu(op: Callable[[], None], iters: int) -> list[float]:
    times = []
    clock = clock_ns
    for _ in range(iters):
        start = clock()
        op()
        times.append((clock() - start) / 1e3)
    return times


def _time_cuda(op: Callable[[], None], iters: int) -> list[float]:
    """Per-iteration CUDA event times. The stream is first held by a spin kernel long enough
    for every iteration to be enqueued behind it (as nvbandwidth does), so the events time
    the GPU work back to back, not the host's launch overhead on an idle stream."""
    hold_us = max(1000.0, HOLD_US_PER_ITER * iters)
    sleep: Any = torch.cuda._sleep  # a spin kernel of that many cycles (untyped in torch)
    sleep(int(hold_us * HOLD_CYCLES_PER_US))
    starts = [
        torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        for _ in range(iters)
    ]
    ends = [
        torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        for _ in range(iters)
    ]
    for start, end in zip(starts, ends, strict=False):
        start.record()
        op()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=False)]  # ms -> us


def time_interleaved(
    op: Callable[[], None], between: Callable[[], None], iters: int, between_factor: float = 1.0
) -> tuple[list[float], list[float]]:
    """On CPU, `op` and `between` in turn, `iters` times each: both one's and the other's
    per-iteration times in us. `between` is timed by the real clock times `between_factor`
    (the fault hook's factor for it; `op` is timed by `clock_ns`, dilated as the hook says)."""
    times, between_times = [], []
    for _ in range(iters):
        start = clock_ns()
        op()
        times.append((clock_ns() - start) / 1e3)
        between_times.append(time_canary(between, between_factor))
    return times, between_times


def time_canary(run: Callable[[], None], factor: float = 1.0) -> float:
    """One run of a canary in us, by the real clock times `factor` (the fault hook's factor
    for it: `slowdown_for("canary", ...)`)."""
    start = time.perf_counter_ns()
    run()
    return (time.perf_counter_ns() - start) * factor / 1e3


def time_iterations(device: torch.device, op: Callable[[], None], iters: int) -> list[float]:
    """Per-iteration times in microseconds (CUDA events on GPU, perf_counter_ns on CPU)."""
    return _time_cuda(op, iters) if device.type == "cuda" else _time_cpu(op, iters)


def warm_up(
    timed: Callable[[int], tuple[list[float], Any]], n: int, by_wall: bool = False
) -> float:
    """Run `n` warm-up iterations of `timed` (n -> their times in us, more columns) and return
    what one costs, in us: the median after the first (which pays for connection setup).

    `by_wall`: a round of a training probe takes more measurements than its main one (DDP:
    the step, a no_sync step, its twin's step, the bucket all_reduces), so each round runs
    alone and costs its wall time on `clock_ns` (the fault hook's clock, so slowed work runs
    fewer rounds, as slower work would); DDP's `timed(1)` also takes the one more step that
    makes DDP log the round, so its rounds are sized a little short of the budget."""
    if by_wall:
        costs = []
        for _ in range(n):
            start = clock_ns()
            timed(1)
            costs.append((clock_ns() - start) / 1e3)
    else:
        costs = timed(n)[0]
    steady = sorted(costs[1:] or costs)
    return steady[len(steady) // 2]
