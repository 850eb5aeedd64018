"""The machine-wide factor of a stored-baseline check: how much slower (or faster) this runner
is than when the baseline was measured, every case alike, told apart from the cases that
regressed on their own.

A runner's speed drifts (a shared cloud host, thermal state, the neighbours): a check against
numbers stored yesterday sees that drift in every case at once. On the log scale, where
positive is worse, the factor of a run is the median over probes of the median over each
probe's cases of its log ratio to the baseline (a median of medians: a regression confined to
one probe, or to a minority of a probe's cases, does not move it). The baseline's own runs
have factors too (each run against the baseline's medians): their spread is what a runner's
drift looks like, and the candidate's factor is judged against it. Every case is then
compared on its ratio with the factor removed, on both sides: the baseline runs each have
their own factor removed before their spread is taken, so case thresholds measure the case's
own noise, not the machine's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from gpuprof.analysis.measured import Measured

KEYS = ["probe", "metric", "key"]
# probes a machine factor is estimated from: a probe's cases share its causes (one link, one
# kernel library), so with fewer probes a regression of one of them looks like the machine
# (a 40% slower link, the only probe of a check, was removed as a "machine shift"); with three,
# the median keeps to the probes that did not move
MIN_PROBES = 3


@dataclass(frozen=True)
class MachineFactor:
    """The candidate's factor against the baseline (log scale, positive: slower), the
    baseline runs' own factors, the threshold beyond which it is a shift, and the verdict:
    "slower" or "faster" (a machine shift), or "same"."""

    factor: float
    base_factors: tuple[float, ...]
    threshold: float
    verdict: str
    cases: int

    @property
    def pct(self) -> float:
        """The factor as a % change of speed (positive: slower)."""
        return 100 * math.expm1(self.factor)

    def line(self) -> str:
        """'this runner is 14.2% slower than its baseline, every case alike (...)'."""
        how = "slower" if self.factor > 0 else "faster"
        spread = (
            f"; the baseline's runs differ by {100 * float(np.std(self.base_factors, ddof=1)):.1f}%"
            if len(self.base_factors) > 2
            else ""
        )
        shift = "a machine shift" if self.verdict != "same" else "within its drift"
        threshold = 100 * math.expm1(self.threshold)
        return (
            f"machine: this runner is {abs(self.pct):.1f}% {how} than its baseline, every case "
            f"alike (from {self.cases} case-metrics; threshold {threshold:.1f}%{spread}): "
            f"{shift}; cases are judged with it removed"
        )


def _sign(better: pd.Series) -> np.ndarray:
    """+1 where lower is better (a slower machine makes it larger), -1 where higher is."""
    return np.where(better.to_numpy() == "lower", 1.0, -1.0)


def run_factor(worse: pd.DataFrame) -> float:
    """The weighted median of the cases' worse-is-positive logs (`w`), every probe weighing
    the same whatever its number of cases (a probe of 9 collectives must not outvote one of
    2 copies)."""
    if worse.empty:
        return 0.0
    weight = 1.0 / worse.groupby("probe")["w"].transform("count").to_numpy(float)
    order = np.argsort(worse["w"].to_numpy(float), kind="stable")
    values, cum = worse["w"].to_numpy(float)[order], np.cumsum(weight[order])
    return float(values[np.searchsorted(cum, cum[-1] / 2)])


OUTLIER_Z = 3.0  # a case this many of its own spreads away from the first estimate moved alone
SPREAD_FLOOR = 0.01  # the smallest spread a case is credited with (1%)


def candidate_factor(worse: pd.DataFrame, spread: pd.Series) -> float:
    """The candidate's factor, robust to cases that moved on their own: a first estimate over
    every case, then again without the cases further from it than OUTLIER_Z of their own
    between-run spread (a regression confined to some cases), as long as at least half the
    probes' weight is left."""
    first = run_factor(worse)
    own = worse.join(spread.rename("s"), on=KEYS)["s"].fillna(SPREAD_FLOOR)
    near = (worse["w"] - first).abs() <= OUTLIER_Z * np.maximum(own, SPREAD_FLOOR)
    kept = worse[near.to_numpy()]
    if kept.empty or kept["probe"].nunique() * 2 < worse["probe"].nunique():
        return first
    return run_factor(kept)


def baseline_factors(base: Measured) -> pd.Series:
    """Each baseline run's factor against the baseline's medians (run -> log factor)."""
    values = base.values[base.values["value"] > 0]
    if values.empty:
        return pd.Series(dtype=float)
    median = values.groupby(KEYS)["value"].transform("median")
    worse = values.assign(w=_sign(values["better"]) * np.log(values["value"] / median))
    return pd.Series({run: run_factor(part) for run, part in worse.groupby("run")}, dtype=float)


def adjust(measured: Measured, factors: pd.Series | float) -> Measured:
    """The values (and samples) with their run's factor removed: a factor f scales every
    lower-is-better value by exp(-f) and every higher-is-better one by exp(f)."""
    values = measured.values
    f = (
        values["run"].map(factors).fillna(0.0).to_numpy(float)
        if isinstance(factors, pd.Series)
        else np.full(len(values), float(factors))
    )
    scaled = values.assign(value=values["value"] * np.exp(-_sign(values["better"]) * f))
    samples = measured.samples
    if not isinstance(factors, pd.Series) and len(samples):
        better = values.drop_duplicates(KEYS)[[*KEYS, "better"]]
        joined = samples.merge(better, on=KEYS, how="left")
        sign = _sign(joined["better"].fillna("lower"))
        samples = samples.assign(value=samples["value"].to_numpy(float) * np.exp(-sign * factors))
    return Measured(values=scaled, samples=samples)


def probes_compared(base: Measured, cand: Measured) -> int:
    """How many probes have cases on both sides."""
    both = set(base.values["probe"]) & set(cand.values["probe"])
    return len(both)


def machine_factor(
    base: Measured, cand: Measured, *, min_effect: float, alpha: float
) -> tuple[MachineFactor, Measured, Measured]:
    """The candidate's machine factor and both sides with their factors removed (callers
    estimate it only from MIN_PROBES probes up: `probes_compared`)."""
    per_run = baseline_factors(base)
    base_adj = adjust(base, per_run)
    b = base_adj.values[base_adj.values["value"] > 0].groupby(KEYS)
    reference = b["value"].median()
    # each case's own spread between the baseline's runs, the machine's drift removed, as it
    # would spread a new run's value (x sqrt(1 + 1/K))
    k_runs = max(base.num_runs, 1)
    case_spread = b["value"].agg(
        lambda v: float(np.std(np.log(v), ddof=1)) if len(v) > 2 else np.nan
    ) * math.sqrt(1 + 1 / k_runs)
    c = (
        cand.values[cand.values["value"] > 0]
        .groupby(KEYS)
        .agg(value=("value", "median"), better=("better", "first"))
    )
    joined = c.join(reference.rename("base"), how="inner")
    joined = joined.reset_index()
    worse = joined.assign(w=_sign(joined["better"]) * np.log(joined["value"] / joined["base"]))
    factor = candidate_factor(worse, case_spread)
    spread = float(np.std(per_run, ddof=1)) if len(per_run) > 2 else 0.0
    k = len(per_run)
    drift = stats.t.ppf(1 - alpha / 2, k - 1) * spread * math.sqrt(1 + 1 / k) if k > 2 else 0.0
    threshold = max(math.log1p(min_effect), drift)
    verdict = "same" if abs(factor) <= threshold else ("slower" if factor > 0 else "faster")
    found = MachineFactor(
        factor=factor,
        base_factors=tuple(float(v) for v in per_run),
        threshold=threshold,
        verdict=verdict,
        cases=len(worse),
    )
    return found, base_adj, adjust(cand, factor)
