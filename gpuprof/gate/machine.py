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

A case whose probe measures a canary (`Metric.canary`: a workload outside the code under test,
on the case's resource, run between its iterations) is judged against its canary instead: a
shared host's memory bandwidth can fall by a quarter within an hour while its cores keep their
speed, which one factor for every case cannot follow. Such a case's factor, in every run on
both sides, is its canary's log ratio to the baseline's median canary; the canary's own shift
is reported as a line of its own, and the machine-wide factor comes from the other cases.
A canary can drift against its case too (a numpy copy 11-20% faster than in its baseline, for
an hour, beside a torch copy whose bandwidth held within 3%): `gpuprof.gate.check` calls such a
case only where its change as measured agrees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from gpuprof import registry
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
    canaries: tuple[CanaryShift, ...] = ()
    estimated: bool = True  # False: too few probes to tell the machine from one probe
    probes: int = 0  # the probes compared, when not estimated
    # the case-metrics (probe, metric, key) judged against their canaries
    canary_cases: frozenset[tuple[str, str, str]] = frozenset()

    @property
    def pct(self) -> float:
        """The factor as a % change of speed (positive: slower)."""
        return 100 * math.expm1(self.factor)

    def line(self) -> str:
        """'this runner is 14.2% slower than its baseline, every case alike (...)'."""
        if not self.estimated:
            return (
                f"machine: not estimated (it takes cases of {MIN_PROBES} probes or more, this "
                f"check has {self.probes}): cases are judged on their raw ratios"
                + (" or against their canaries" if self.canaries else "")
            )
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

    @property
    def shifted(self) -> bool:
        """Whether the machine-wide factor or a canary is a machine shift."""
        return self.verdict != "same" or any(c.verdict != "same" for c in self.canaries)


@dataclass(frozen=True)
class CanaryShift:
    """A canary's shift against the baseline (log scale, positive: slower) over the cases of
    one probe and metric that carry it, its threshold from the baseline runs' own spread of
    it, and the verdict ("slower", "faster" or "same")."""

    what: str  # the Metric.canary description
    probe: str
    metric: str
    factor: float
    threshold: float
    verdict: str
    cases: int

    @property
    def pct(self) -> float:
        return 100 * math.expm1(self.factor)

    def line(self) -> str:
        """'machine: host memory bandwidth (...) is 24.1% slower than in its baseline ...'."""
        how = "slower" if self.factor > 0 else "faster"
        shift = "a machine shift" if self.verdict != "same" else "within its drift"
        return (
            f"machine: {self.what} is {abs(self.pct):.1f}% {how} than in its baseline "
            f"(threshold {100 * math.expm1(self.threshold):.1f}%): {shift}; the "
            f"{self.probe} probe's {self.cases} case(s) [{self.metric}] are judged against "
            "it, not the machine-wide factor"
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


def adjust(
    measured: Measured, factors: pd.Series | float, own: np.ndarray | None = None
) -> Measured:
    """The values (and samples) with their run's factor removed: a factor f scales every
    lower-is-better value by exp(-f) and every higher-is-better one by exp(f). `own`, per
    value row, is the factor of a case judged against its canary (NaN for the others); a
    case's samples take the median of its rows' own factors."""
    values = measured.values
    f = (
        values["run"].map(factors).fillna(0.0).to_numpy(float)
        if isinstance(factors, pd.Series)
        else np.full(len(values), float(factors))
    )
    if own is not None:
        f = np.where(np.isfinite(own), own, f)
    scaled = values.assign(value=values["value"] * np.exp(-_sign(values["better"]) * f))
    samples = measured.samples
    if not isinstance(factors, pd.Series) and len(samples):
        per_case = values[KEYS].assign(f=f).groupby(KEYS)["f"].median()
        better = values.drop_duplicates(KEYS)[[*KEYS, "better"]]
        joined = samples.merge(better, on=KEYS, how="left").join(per_case, on=KEYS)
        sign = _sign(joined["better"].fillna("lower"))
        g = joined["f"].fillna(float(factors)).to_numpy(float)
        samples = samples.assign(value=samples["value"].to_numpy(float) * np.exp(-sign * g))
    return Measured(values=scaled, samples=samples)


def canary_logs(base: Measured, cand: Measured) -> tuple[np.ndarray, np.ndarray]:
    """Per value row of each side, the worse-is-positive log of its canary against the
    baseline's median canary of its case-metric; NaN for the rows of cases that are not
    judged against a canary (none recorded, or not in every run of both sides)."""

    def has(values: pd.DataFrame) -> pd.Series:
        if "canary" not in values:
            return pd.Series(dtype=bool)
        ok = np.isfinite(values["canary"].to_numpy(float)) & (values["canary"] > 0)
        return values.assign(ok=ok.to_numpy()).groupby(KEYS)["ok"].all()

    covered = has(base.values) & has(cand.values)
    covered = covered[covered.fillna(False).astype(bool)]
    if covered.empty:
        return np.full(len(base.values), np.nan), np.full(len(cand.values), np.nan)
    reference = base.values.groupby(KEYS)["canary"].median()[covered.index]

    def logs(values: pd.DataFrame) -> np.ndarray:
        ref = values.join(reference.rename("_ref"), on=KEYS)["_ref"].to_numpy(float)
        return np.asarray(-np.log(values["canary"].to_numpy(float) / ref), dtype=float)

    return logs(base.values), logs(cand.values)


def canary_shifts(
    base: Measured,
    cand: Measured,
    base_own: np.ndarray,
    cand_own: np.ndarray,
    *,
    min_effect: float,
    alpha: float,
) -> tuple[CanaryShift, ...]:
    """Each canary's shift, per probe and metric: the median over its cases of the
    candidate's factors, judged against the spread of the baseline runs' own (each run the
    median over the cases)."""
    shifts = []
    whats = {(s.name, m.column): m.canary for s in registry.specs().values() for m in s.metrics}
    b = base.values.assign(f=base_own).dropna(subset=["f"])
    c = cand.values.assign(f=cand_own).dropna(subset=["f"])
    for (p, m), rows in c.groupby(["probe", "metric"]):
        probe, metric = str(p), str(m)
        per_run = b[(b["probe"] == probe) & (b["metric"] == metric)].groupby("run")["f"].median()
        factor = float(rows.groupby(KEYS)["f"].median().median())
        k = len(per_run)
        spread = float(np.std(per_run, ddof=1)) if k > 2 else 0.0
        drift = stats.t.ppf(1 - alpha / 2, k - 1) * spread * math.sqrt(1 + 1 / k) if k > 2 else 0.0
        threshold = max(math.log1p(min_effect), drift)
        verdict = "same" if abs(factor) <= threshold else ("slower" if factor > 0 else "faster")
        shifts.append(
            CanaryShift(
                what=whats.get((probe, metric)) or f"the canary of {probe} [{metric}]",
                probe=probe,
                metric=metric,
                factor=factor,
                threshold=threshold,
                verdict=verdict,
                cases=int(rows[KEYS].drop_duplicates().shape[0]),
            )
        )
    return tuple(shifts)


def probes_compared(base: Measured, cand: Measured) -> int:
    """How many probes have cases on both sides."""
    both = set(base.values["probe"]) & set(cand.values["probe"])
    return len(both)


def machine_factor(
    base: Measured, cand: Measured, *, min_effect: float, alpha: float
) -> tuple[MachineFactor, Measured, Measured]:
    """The candidate's machine factor and both sides with their factors removed. The cases
    judged against a canary have their canary's factors removed instead; the machine-wide
    factor comes from the others (from all, were fewer than MIN_PROBES probes left), and only
    from cases of MIN_PROBES probes or more: with fewer it is not estimated (`estimated`
    False) and those cases keep their raw ratios."""
    base_own, cand_own = canary_logs(base, cand)
    shifts = canary_shifts(base, cand, base_own, cand_own, min_effect=min_effect, alpha=alpha)
    covered = cand.values.loc[np.isfinite(cand_own), KEYS].drop_duplicates()
    cases = frozenset((str(p), str(m), str(k)) for p, m, k in covered.itertuples(index=False))
    rest_base, rest_cand = _without(base, base_own), _without(cand, cand_own)
    if probes_compared(rest_base, rest_cand) < MIN_PROBES:
        rest_base, rest_cand = base, cand
    if probes_compared(rest_base, rest_cand) < MIN_PROBES:
        found = MachineFactor(
            factor=0.0,
            base_factors=(),
            threshold=0.0,
            verdict="same",
            cases=0,
            canaries=shifts,
            estimated=False,
            probes=probes_compared(base, cand),
            canary_cases=cases,
        )
        return found, adjust(base, 0.0, base_own), adjust(cand, 0.0, cand_own)
    found, per_run = _machine_wide(rest_base, rest_cand, min_effect=min_effect, alpha=alpha)
    found = replace(found, canaries=shifts, canary_cases=cases)
    return found, adjust(base, per_run, base_own), adjust(cand, found.factor, cand_own)


def _without(measured: Measured, own: np.ndarray) -> Measured:
    """The measured set less the rows of cases judged against a canary."""
    keep = ~np.isfinite(own)
    return Measured(values=measured.values[keep], samples=measured.samples)


def _machine_wide(
    base: Measured, cand: Measured, *, min_effect: float, alpha: float
) -> tuple[MachineFactor, pd.Series]:
    """The machine-wide factor of these cases, and each baseline run's own."""
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
    return found, per_run
