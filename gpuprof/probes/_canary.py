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

import math
import statistics
from collections.abc import Callable

import numpy as np

from gpuprof.probes._timing import clock_ns, slowdown_for, stretched

BUDGET_S = 0.25  # about what one case's iterations take in the ci suite
MIN_REPEATS, MAX_REPEATS = 5, 200


def host_memory_gbps(
    size_bytes: int, budget_s: float = BUDGET_S, clock: Callable[[], int] = clock_ns
) -> float:
    """A numpy copy of `size_bytes` host bytes, counted as read plus written (as the host copy
    case counts it): GB/s at the median of its repeats (at least MIN_REPEATS, then until
    `budget_s` or MAX_REPEATS). Timed by the probes' clock, so the test-only fault hook
    reaches it (`GPUPROF_FAULT_SLOW`, as `canary/<probe>/<case_id>`)."""
    src = np.full(size_bytes, 7, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # the first touch maps the pages
    times: list[int] = []
    spent, budget_ns = 0, budget_s * 1e9
    while len(times) < MIN_REPEATS or (spent < budget_ns and len(times) < MAX_REPEATS):
        start = clock()
        np.copyto(dst, src)
        times.append(clock() - start)
        spent += times[-1]
    return 2 * size_bytes / statistics.median(times)  # bytes per ns = GB/s


def read_canary(canary: Callable[[], float] | None, probe: str, case_id: str) -> float | None:
    """One reading of a case's canary, if it has one (the fault hook reaches it as
    `canary/<probe>/<case_id>`: "*" slows it with every case, as a slower machine would;
    "memory/*" leaves it alone, as a slower copy kernel would)."""
    if canary is None:
        return None
    with stretched(slowdown_for("canary", f"{probe}/{case_id}")):
        return canary()


def bracketed(before: float | None, after: float | None) -> float | None:
    """The canary of a case read before and after its iterations: their geometric mean."""
    return None if before is None or after is None else math.sqrt(before * after)
