"""Per-iteration timing: CUDA events on GPU (the stream held first), perf_counter_ns on CPU."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

HOLD_US_PER_ITER = 50.0  # enqueue time per iteration the spin kernel covers (Python + c10d)
HOLD_CYCLES_PER_US = 2000  # cycles per us at ~2 GHz; a faster clock only holds less long


def _time_cpu(op: Callable[[], None], iters: int) -> list[float]:
    times = []
    clock = time.perf_counter_ns
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


def time_iterations(device: torch.device, op: Callable[[], None], iters: int) -> list[float]:
    """Per-iteration times in microseconds (CUDA events on GPU, perf_counter_ns on CPU)."""
    return _time_cuda(op, iters) if device.type == "cuda" else _time_cpu(op, iters)
