"""How many held-out published rows any predictor of a simple, physical shape can have within 15%.

    python benchmarks/predict_bound.py

The held-out rows are `benchmarks/predict_published.py`'s (each system calibrated at its
smallest node count across nodes, every larger count scored). A predictor is within 15% of a
row when its time lies in [0.85, 1.15] x the published time. Two shapes:

- **monotone in size**: on one series (system, op, GPUs per node, forced algorithm) and node
  count, a larger buffer never takes less time than a smaller one;
- **monotone in size and node count**: also, more nodes never take less time for the same
  buffer; and, tighter, a predicted row never takes less than what the calibrating count
  measured at the same size (only the same size: the measured curve's own spikes do not
  bind the larger sizes).

Rows u <= v (in every ordered dimension) conflict when 0.85 x time(u) > 1.15 x time(v): no
such predictor is within 15% of both. A set of rows without a conflicting pair can all be
met (predict at v the largest 0.85 x time(u) of the set's u <= v: monotone, within 15% of
each), so the bound is the largest conflict-free set of each series: a maximum independent
set, solved exactly as a 0/1 program (scipy's HiGHS). Prints the bounds, per system.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from gpuprof.predict.published import BOUND, held_out, published_time, scale_rows, series_key

Point = tuple[int, int, float]  # nodes, size (bytes), published time (us)


def _largest_compatible(points: Sequence[Point], below: Callable[[Point, Point], bool]) -> int:
    """The most points one monotone predictor can be within BOUND of (`below(u, v)`: u's
    shape is at most v's)."""
    conflicts = [
        (a, b)
        for a, u in enumerate(points)
        for b, v in enumerate(points)
        if a != b and below(u, v) and (1 - BOUND) * u[2] > (1 + BOUND) * v[2]
    ]
    if not conflicts:
        return len(points)
    matrix = lil_matrix((len(conflicts), len(points)))
    for row, (a, b) in enumerate(conflicts):
        matrix[row, a] = matrix[row, b] = 1
    result = milp(
        -np.ones(len(points)),
        constraints=LinearConstraint(matrix.tocsr(), -np.inf, 1),
        integrality=np.ones(len(points)),
        bounds=Bounds(0, 1),
    )
    if not result.success:
        sys.exit(f"error: the 0/1 program did not solve: {result.message}")
    return round(-result.fun)


def _by_size(u: Point, v: Point) -> bool:
    return u[0] == v[0] and u[1] <= v[1]


def _by_size_and_nodes(u: Point, v: Point) -> bool:
    return u[0] <= v[0] and u[1] <= v[1]


def main() -> None:
    scored, _ = held_out()
    series: dict[tuple[str, ...], list[Point]] = defaultdict(list)
    base: dict[tuple[str, ...], int] = {}
    for h in scored:
        key = series_key(h.row)
        series[key].append((int(h.row["nodes"]), int(h.row["size_bytes"]), h.published))
        base[key] = h.calibrated_at
    measured: dict[tuple[str, ...], dict[int, float]] = defaultdict(dict)
    for row in scale_rows():
        key = series_key(row)
        if key in base and int(row["nodes"]) == base[key]:
            measured[key][int(row["size_bytes"])] = published_time(row)
    total = len(scored)
    for name, below, floor in (
        ("monotone in size", _by_size, False),
        ("monotone in size and node count", _by_size_and_nodes, False),
        (
            "monotone in size and node count, never under the measured count at a size",
            _by_size_and_nodes,
            True,
        ),
    ):
        reach: Counter[str] = Counter()
        rows: Counter[str] = Counter()
        for key, points in series.items():
            if floor:  # a row under 0.85 x what fewer nodes measured at its size is out of reach
                kept = [p for p in points if measured[key].get(p[1], 0.0) <= (1 + BOUND) * p[2]]
            else:
                kept = list(points)
            reach[key[0]] += _largest_compatible(kept, below)
            rows[key[0]] += len(points)
        got = sum(reach.values())
        print(f"{name}: at most {got} of {total} within 15% ({100 * got / total:.1f}%)")
        for system in rows:
            if reach[system] < rows[system]:
                print(f"  {system[:60]}: {reach[system]} of {rows[system]}")


if __name__ == "__main__":
    main()
