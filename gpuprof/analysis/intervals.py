"""Time intervals as sorted, disjoint (start, end) arrays: union, intersection, difference
and their lengths. Touching intervals merge (as Holistic Trace Analysis merges kernels)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

Spans = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
EMPTY: Spans = (np.empty(0), np.empty(0))


def merge(starts: Iterable[float], ends: Iterable[float]) -> Spans:
    """The union of the intervals [start, end) as disjoint, sorted intervals."""
    s = np.asarray(list(starts) if not isinstance(starts, np.ndarray) else starts, float)
    e = np.asarray(list(ends) if not isinstance(ends, np.ndarray) else ends, float)
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def length(spans: Spans) -> float:
    """Total length of disjoint intervals."""
    return float(np.sum(spans[1] - spans[0]))


def union(*parts: Spans) -> Spans:
    """The union of several interval sets."""
    return merge(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def intersect(a: Spans, b: Spans) -> Spans:
    """The intersection of two disjoint interval sets."""
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    # every pair that can overlap: b intervals whose end is after a's start, start before a's end
    lo = np.searchsorted(b[1], a[0], side="right")
    hi = np.searchsorted(b[0], a[1], side="left")
    counts = np.maximum(hi - lo, 0)
    if counts.sum() == 0:
        return EMPTY
    ia = np.repeat(np.arange(a[0].size), counts)
    offsets = np.repeat(np.cumsum(counts) - counts, counts)
    ib = np.repeat(lo, counts) + np.arange(int(counts.sum())) - offsets
    starts = np.maximum(a[0][ia], b[0][ib])
    ends = np.minimum(a[1][ia], b[1][ib])
    keep = ends > starts
    return starts[keep], ends[keep]


def subtract(a: Spans, b: Spans) -> Spans:
    """What of `a` lies outside `b`."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    # the gaps of b (within a's extent) intersected with a
    lo, hi = min(a[0][0], b[0][0]), max(a[1][-1], b[1][-1])
    gap_starts = np.concatenate([[lo], b[1]])
    gap_ends = np.concatenate([b[0], [hi]])
    keep = gap_ends > gap_starts
    return intersect(a, (gap_starts[keep], gap_ends[keep]))


def clip(spans: Spans, lo: float, hi: float) -> Spans:
    """The part of `spans` inside [lo, hi)."""
    return intersect(spans, (np.array([lo]), np.array([hi])))
