"""Canaries: a small workload outside the code under test, measured by the rank right before
and right after a case (`Case.canary`), on the same resource and in the same conditions, so
that a check against a stored baseline can tell the machine's drift in that resource (a
shared host's memory bandwidth falling by a quarter within an hour) from a change of the case
itself.

A canary uses none of torch's kernels: a torch upgrade that slows the host copy does not slow
its canary, while a host whose memory got slower slows both. Its value is recorded as the
case's `canary` result; `gpuprof.gate.machine` judges the case against it.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

BUDGET_S = 0.25  # about what one case's iterations take in the ci suite
MIN_REPEATS, MAX_REPEATS = 5, 200


def host_memory_gbps(size_bytes: int, budget_s: float = BUDGET_S) -> float:
    """A numpy copy of `size_bytes` host bytes, counted as read plus written (as the host copy
    case counts it): GB/s at the median of its repeats (at least MIN_REPEATS, then until
    `budget_s` or MAX_REPEATS)."""
    src = np.full(size_bytes, 7, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # the first touch maps the pages
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < MIN_REPEATS or (time.perf_counter() < deadline and len(times) < MAX_REPEATS):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return 2 * size_bytes / statistics.median(times) / 1e9
