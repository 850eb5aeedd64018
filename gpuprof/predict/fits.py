"""Latency-bandwidth (alpha-beta) fits of the measured collectives (docs/methodology.md,
"Scaling predictions").

For every op, dtype, scope and world size with at least two sizes: time(S) = alpha + S / beta,
fitted to the slowest group's median time per size (a collective ends when its slowest group
does; in-place and out-of-place pooled, as the same algorithm). The fit minimises *relative*
residuals with a soft-L1 loss (scipy.optimize.least_squares, f_scale 5%): relative, so the
latency-bound small sizes (the plateau of nearly equal times) weigh as much as the
bandwidth-bound large ones instead of vanishing beside them; soft-L1, so a few sizes off the
line (a protocol or algorithm switch between sizes, a noisy point) pull the fit far less than
squares would. alpha >= 0 and beta > 0 are bounds of the fit.

From a fit at n ranks and the op's ring algorithm (hops h(n), bus factor f(n)): per-hop latency
alpha / h(n) and per-link bandwidth f(n) x beta (the busbw the size tends to). The half-
performance size is where the two terms are equal: alpha x beta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprof.errors import UsageError
from gpuprof.units import bus_factor, format_size

# the ops whose algorithm the predictions model (a ring on both backends; broadcast and
# reduce are flat, chained or tree-shaped depending on the backend and size: not predicted)
MODELED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
LOSS_SCALE = 0.05  # soft-L1: relative residuals beyond about 5% count linearly, not squared
FIT_KEYS = ["op", "dtype", "scope", "world_size", "num_nodes"]


def ring_hops(op: str, n: int) -> int:
    """Messages on a ring algorithm's critical path: 2(n-1) for all_reduce, n-1 for the
    one-pass ops, 1 for a send/recv."""
    if op == "sendrecv":
        return 1
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1
    raise ValueError(f"no ring model for op {op!r}")


@dataclass(frozen=True, kw_only=True)
class Piece:
    """time(S) = alpha_us + S / beta for sizes up to `upto` bytes."""

    upto: float  # the largest size it covers (inf: every larger size)
    alpha_us: float
    beta_gbps: float  # algbw the size tends to, GB/s (1e9 B/s)

    def time_us(self, size: float) -> float:
        return self.alpha_us + size / (self.beta_gbps * 1e3)


@dataclass(frozen=True, kw_only=True)
class Fit:
    """The alpha-beta fit of one op, dtype, scope and world size: one piece, or two where
    the sizes show a switch between a small-size and a large-size regime."""

    op: str
    dtype: str
    scope: str
    world_size: int
    num_nodes: int
    pieces: tuple[Piece, ...]
    r2: float
    worst_rel: float  # the largest |fitted / measured - 1| over the sizes fitted
    points: int
    smallest: int
    largest: int

    def piece(self, size: float) -> Piece:
        """The piece that covers `size`."""
        return next(p for p in self.pieces if size <= p.upto)

    def time_us(self, size: float) -> float:
        """The fitted time of one operation on `size` bytes."""
        return self.piece(size).time_us(size)

    @property
    def alpha_us(self) -> float:
        """The latency of the small-size regime."""
        return self.pieces[0].alpha_us

    @property
    def beta_gbps(self) -> float:
        """The algbw the large sizes tend to."""
        return self.pieces[-1].beta_gbps

    @property
    def switch_bytes(self) -> float | None:
        """Where the small-size regime ends, if the sizes showed two."""
        return self.pieces[0].upto if len(self.pieces) > 1 else None

    @property
    def half_bytes(self) -> float:
        """The size where latency and bandwidth terms are equal (half the asymptotic algbw)."""
        return self.alpha_us * self.beta_gbps * 1e3

    @property
    def hop_us(self) -> float:
        """Per-message latency of the ring this op runs on `world_size` ranks."""
        return self.alpha_us / ring_hops(self.op, self.world_size)

    @property
    def link_gbps(self) -> float:
        """Per-link bandwidth: the busbw the size tends to."""
        return bus_factor(self.op, self.world_size) * self.beta_gbps


SPLIT_WORST = 0.10  # a single line this far off somewhere is tried as two regimes
SPLIT_GAIN = 2.0  # and split where that divides its worst residual by this much or more


def _line(s: np.ndarray, t: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(alpha_us, us per byte, relative residuals): soft-L1 on relative residuals."""
    # deferred: loads scipy
    from scipy.optimize import least_squares

    t_unit, b_unit = float(t.min()), float(t.max() / s.max())
    slope = max((t[-1] - t[0]) / (s[-1] - s[0]), 1e-9 * b_unit)

    def residuals(x: np.ndarray) -> np.ndarray:
        fitted: np.ndarray = (x[0] * t_unit + x[1] * b_unit * s) / t - 1
        return fitted

    start = np.array([max(t[0] - slope * s[0], 0.0) / t_unit, slope / b_unit])
    found = least_squares(
        residuals,
        start,
        bounds=([0.0, 1e-9], [np.inf, np.inf]),
        loss="soft_l1",
        f_scale=LOSS_SCALE,
    )
    return float(found.x[0] * t_unit), float(found.x[1] * b_unit), residuals(found.x)


def fit_alpha_beta(
    sizes: list[float], times_us: list[float]
) -> tuple[tuple[Piece, ...], float, float]:
    """(pieces, r2, worst relative residual) of time = alpha + size / beta.

    One line first; where it is more than SPLIT_WORST off at some size and the sizes allow
    two lines of at least 2 sizes each, the split that fits best (smallest worst residual)
    is kept if it divides the worst residual by SPLIT_GAIN: a protocol or algorithm switch
    between two sizes. A UsageError says why when the points cannot define the parameters:
    fewer than two distinct sizes, a time that is not positive, or a largest size no slower
    than the fastest size (no growth to fit). Growth is judged against the fastest size, not
    the smallest: a preempted small size (3.5 ms where 0.4 ms is usual, on a busy CI runner)
    is an outlier for the soft-L1 loss to set aside, not a reason to fit nothing.
    """
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float)
    if len(np.unique(s)) < 2:
        raise UsageError("an alpha-beta fit needs at least 2 different sizes")
    if not (np.isfinite(t).all() and (t > 0).all()):
        raise UsageError("an alpha-beta fit needs positive, finite times")
    order = np.argsort(s)
    s, t = s[order], t[order]
    if t[-1] <= t.min() * (1 + 1e-9):
        raise UsageError(
            "the times do not grow with size (the largest size is the fastest): there is no "
            "bandwidth to fit; measure larger sizes"
        )
    alpha, per_byte, resid = _line(s, t)
    pieces: tuple[Piece, ...] = (
        Piece(upto=math.inf, alpha_us=alpha, beta_gbps=1 / per_byte / 1e3),
    )
    worst = float(np.abs(resid).max())
    distinct = len(np.unique(s))
    if worst > SPLIT_WORST and distinct >= 4:
        best: tuple[float, tuple[Piece, ...], np.ndarray] | None = None
        for k in range(2, len(s) - 1):
            if s[k - 1] == s[k] or len(np.unique(s[:k])) < 2 or len(np.unique(s[k:])) < 2:
                continue
            a1, b1, r1 = _line(s[:k], t[:k])
            a2, b2, r2_ = _line(s[k:], t[k:])
            both = np.concatenate([r1, r2_])
            score = float(np.abs(both).max())
            if best is None or score < best[0]:
                split = (
                    Piece(upto=float(s[k - 1]), alpha_us=a1, beta_gbps=1 / b1 / 1e3),
                    Piece(upto=math.inf, alpha_us=a2, beta_gbps=1 / b2 / 1e3),
                )
                best = (score, split, both)
        if best is not None and best[0] * SPLIT_GAIN <= worst:
            worst, pieces, resid = best
    fitted = t * (1 + resid)
    total = float(((t - t.mean()) ** 2).sum())
    r2 = 1 - float(((t - fitted) ** 2).sum()) / total if total > 0 else float("nan")
    return pieces, r2, worst


def slowest_group_times(summary: pd.DataFrame) -> pd.DataFrame:
    """Per op, dtype, scope, world size and size: the slowest group's time (modes pooled by
    their median)."""
    keys = [*FIT_KEYS, "size_bytes"]
    per_group = summary.groupby([*keys, "group"], as_index=False)["time_us"].median()
    slowest: pd.DataFrame = per_group.groupby(keys, as_index=False)["time_us"].max()
    return slowest


def correct_only(summary: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The measured cases whose results were right or not checked, and a line per op and
    shape naming the sizes left out for wrong results (gpuprof's check, nccl-tests' #wrong):
    no fit or calibration stands on a broken measurement."""
    if "nwrong" not in summary or summary.empty:
        return summary, []
    wrong = summary["nwrong"].fillna(0).astype("int64") > 0
    lines = []
    for (op, dtype, nodes, world), cases in summary[wrong].groupby(
        ["op", "dtype", "num_nodes", "world_size"], sort=True
    ):
        sizes = ", ".join(format_size(int(s)) for s in sorted(set(cases["size_bytes"])))
        lines.append(
            f"{op} {dtype} at {nodes} node(s), {world} ranks: {sizes} left out of the fits and "
            "calibration (wrong results: measure again once the check passes)"
        )
    return summary[~wrong], lines


def fit_collectives(summary: pd.DataFrame) -> tuple[list[Fit], list[str]]:
    """Every fit the collectives summary supports, and a line per key it could not fit (or
    left sizes out of: `correct_only`)."""
    fits: list[Fit] = []
    summary, notes = correct_only(summary)
    if summary.empty:
        return fits, [*notes, "no collectives measured"]
    times = slowest_group_times(summary[summary["op"].isin(MODELED_OPS)])
    for key, rows in times.groupby(FIT_KEYS, sort=True):
        op, dtype, scope = (str(k) for k in key[:3])
        world, nodes = int(str(key[3])), int(str(key[4]))
        if world < 2:
            continue
        label = f"{op} {dtype} {scope} n={world}"
        try:
            pieces, r2, worst = fit_alpha_beta(list(rows["size_bytes"]), list(rows["time_us"]))
        except UsageError as exc:
            notes.append(f"{label}: not fitted: {exc.message}")
            continue
        fits.append(
            Fit(
                op=op,
                dtype=dtype,
                scope=scope,
                world_size=world,
                num_nodes=nodes,
                pieces=pieces,
                r2=r2,
                worst_rel=worst,
                points=len(rows),
                smallest=int(rows["size_bytes"].min()),
                largest=int(rows["size_bytes"].max()),
            )
        )
    return fits, notes


def fits_frame(fits: list[Fit]) -> pd.DataFrame:
    """The fits as a table (what `predict --format json` and the report show)."""
    return pd.DataFrame(
        [
            {
                **{k: getattr(f, k) for k in FIT_KEYS},
                "alpha_us": f.alpha_us,
                "beta_gbps": f.beta_gbps,
                "hop_us": f.hop_us,
                "link_gbps": f.link_gbps,
                "half_bytes": f.half_bytes,
                "switch_bytes": f.switch_bytes,
                "r2": f.r2,
                "worst_rel_pct": 100 * f.worst_rel,
                "points": f.points,
                "smallest": f.smallest,
                "largest": f.largest,
            }
            for f in fits
        ]
    )


def finite(value: float) -> bool:
    """Whether a model output is usable."""
    return value is not None and math.isfinite(value)
