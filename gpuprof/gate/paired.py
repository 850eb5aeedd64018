"""Statistics of an A/B check: paired log ratios, their intervals, and a sequential decision.

A pair is one fresh launch of the reference (A) and one of the candidate (B), taken back to
back in a randomized balanced order, so the machine's drift hits both alike and cancels in
their ratio. Per case and metric, pair i gives d_i = log(B_i / A_i) turned so that positive
is worse (a time that grew, a bandwidth that shrank). With n pairs:

- where the case records a canary (code neither side changed, run between its iterations)
  and the sides' canaries agree, d_i minus the canary's own log ratio is judged: the launch's
  own speed removed (`_against_canary`); where the canaries moved apart, the case is judged
  both as measured and against its canary, and claimed or passed only where the two agree (a
  host whose launches drift apart then names nothing it cannot name both ways);
- the effect is the mean of d, reported as the ratio exp(mean) in the metric's own terms;
- its standard error is s / sqrt(n), s the spread of d moderated toward the typical spread of
  the same probe's cases in this check (the pool's median variance weighs PRIOR_PAIRS pairs,
  as limma moderates variances: a probe's cases share its launches' noise), with Student's t
  at n - 1 plus the prior's weight degrees of freedom; the pool's cases share their launches,
  so its weight is never more than the case's own n - 1. Student's t, not a bootstrap: a
  check has 3 to 20 pairs, too few for a bootstrap's interval to hold its level, and log
  ratios of run medians are close to normal;
- a case is decided on its primary metrics (`Metric.primary`); the others are "detail";
- **regression**: worse than the minimum effect by a one-sided t-test that passes Holm's
  step-down over the primary case-metrics at alpha; **improvement**: the mirror image;
  **same** (a pass): the one-sided bound at 1 - alpha lies under the pass margin: shown not
  slower than it (every case must pass for the check to: an intersection-union test, no
  correction needed); otherwise undecided.

Sequential: from `min_pairs` on, the check stops as soon as every case is decided or could
not be decided by `max_pairs` at its spread even were its true change a standard error kinder
than its mean now; what is left undecided at the end is "inconclusive". A regression is
claimed only beyond the minimum effect, so looking after every pair costs a false alarm
little; a pass is not so protected: at exactly the margin, a case with DDP's spread here is
passed in about 1 check in 10. Simulated with this machine's spreads (tests/test_gate_ab.py).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from gpuprof import registry
from gpuprof.analysis.measured import Measured
from gpuprof.gate.stats import in_order

PRIOR_PAIRS = 3  # the weight, in pairs, of a pool's typical variance
PASS_MARGIN = registry.PASS_MARGIN  # a case passes when not slower than this, at 1 - alpha
MIN_POOL = 2  # cases a typical spread is taken from
# a canary has moved between the sides when its own log ratios are this far from 0 (two-sided
# t-test): a real difference (another numpy, another machine) is large and consistent and shows
# at this level within 3 pairs; at 0.05, chance alone marked 7 of 149 case-checks of unchanged
# canaries here (designs 4 and 5), each then judged the stricter way, some left undecided
MOVED_ALPHA = 0.01
KEYS = ["probe", "metric", "key"]


def paired_logs(pairs: list[tuple[Measured, Measured]]) -> pd.DataFrame:
    """One row per case-metric present on both sides of every pair that launched its probe
    (a later pair may launch only the probes with undecided cases): its identity, the
    reference's and candidate's median values, and the pairs' worse-is-positive log ratios
    (`d`, a list), with the flags that fail a case outright (wrong elements, slowed)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for index, (ref, cand) in enumerate(pairs):
        merged = ref.values.merge(cand.values, on=KEYS, suffixes=("_a", "_b"))
        for rec in merged.to_dict("records"):
            ident = (rec["probe"], rec["metric"], rec["key"])
            row = rows.setdefault(
                ident,
                {
                    "probe": rec["probe"],
                    "metric": rec["metric"],
                    "better": rec["better_a"],
                    "key": rec["key"],
                    "case": rec["case_a"],
                    "a": [],
                    "b": [],
                    "d": [],
                    "c": [],
                    "wrong": False,
                    "slowed_a": False,
                    "slowed_b": False,
                    "seen": set(),
                },
            )
            a, b = float(rec["value_a"]), float(rec["value_b"])
            if a > 0 and b > 0:
                sign = 1.0 if row["better"] == "lower" else -1.0
                row["d"].append(sign * math.log(b / a))
                row["a"].append(a)
                row["b"].append(b)
                row["seen"].add(index)
                # the canary (a rate) run between the case's iterations on each side
                ca, cb = float(rec.get("canary_a", math.nan)), float(rec.get("canary_b", math.nan))
                row["c"].append(-math.log(cb / ca) if ca > 0 and cb > 0 else math.nan)
            row["wrong"] |= bool(rec["nwrong_b"] > 0) if pd.notna(rec["nwrong_b"]) else False
            row["slowed_a"] |= bool(rec["throttled_a"])
            row["slowed_b"] |= bool(rec["throttled_b"])
    # a pair that launched only some probes (the others' cases settled) counts for those
    offered = Counter(p for ref, _ in pairs for p in set(ref.values["probe"]))
    complete = [r for r in rows.values() if len(r.pop("seen")) == offered[r["probe"]]]
    return pd.DataFrame(complete)


def _moderated_variance(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each case's variance of d moderated toward its probe's median, and the degrees of
    freedom behind it."""
    n = table["d"].map(len).to_numpy(float)
    own = np.array([np.var(d, ddof=1) if len(d) > 1 else np.nan for d in table["d"]])
    pools = table.assign(v=own).groupby("probe")["v"]
    typical = pools.transform("median").to_numpy(float)
    pooled = (pools.transform("count").to_numpy(float) >= MIN_POOL) & ~np.isnan(typical)
    weight = np.maximum(n - 1, 0)
    prior = np.where(pooled, np.minimum(PRIOR_PAIRS, weight), 0.0)
    variance = (weight * np.nan_to_num(own) + prior * np.nan_to_num(typical)) / np.maximum(
        weight + prior, 1
    )
    return variance, np.maximum(weight + prior, 1)


def decide(
    pairs: list[tuple[Measured, Measured]],
    *,
    min_effect: float,
    alpha: float,
    max_pairs: int,
    effects: dict[str, float] | None = None,
    pass_margin: float = PASS_MARGIN,
) -> pd.DataFrame:
    """The verdict of every case-metric after these pairs, with its ratio and intervals.

    Columns: probe, metric, better, key, case, pairs, base and cand (the sides' medians),
    change_pct (candidate against reference), ratio, ratio_lo, ratio_hi (the candidate's value
    over the reference's, with its 1 - 2 alpha interval: each end one-sided at 1 - alpha),
    ratio_worst (its worse end: the pass bound), min_effect_pct, pass_margin_pct, against
    (canary, measured, or moved: what its log ratios were judged against), verdict
    (regression, improvement, same, undecided, detail, or wrong / untrusted) and `settled`
    (decided, or out of reach by max_pairs)."""
    return judge(
        paired_logs(pairs),
        min_effect=min_effect,
        alpha=alpha,
        max_pairs=max_pairs,
        effects=effects,
        pass_margin=pass_margin,
    )


def judge(
    table: pd.DataFrame,
    *,
    min_effect: float,
    alpha: float,
    max_pairs: int,
    effects: dict[str, float] | None = None,
    pass_margin: float = PASS_MARGIN,
) -> pd.DataFrame:
    """`decide` on a table of paired logs (`paired_logs`' columns: probe, metric, better, key,
    case, a, b, d, c, wrong, slowed_a, slowed_b)."""
    if table.empty:
        return table
    effects = effects or {}
    n = table["d"].map(len).to_numpy(float)
    primary = _primary(table)
    m = max(int(primary.sum()), 1)
    delta = np.log1p(np.array([effects.get(str(x), min_effect) for x in table["metric"]]))
    d, against = _against_canary(table)
    found = _decide(table.assign(d=d), primary, delta, alpha=alpha, max_pairs=max_pairs,
                    pass_margin=pass_margin)  # fmt: skip
    verdict, reach = found["verdict"], found["reach"]
    moved = against == "moved"
    if moved.any():  # judged as measured; claimed or passed only where its canary agrees
        apart: list[Any] = [list(np.asarray(x) - np.asarray(c)) if mv else x
                 for x, c, mv in zip(d, table["c"], moved, strict=True)]  # fmt: skip
        other = _decide(table.assign(d=apart), primary, delta, alpha=alpha,
                        max_pairs=max_pairs, pass_margin=pass_margin)  # fmt: skip
        verdict = np.where(moved & (other["verdict"] != verdict), "undecided", verdict)
        reach = reach | (moved & other["reach"])
    mean, variance, se, upper = found["mean"], found["variance"], found["se"], found["upper"]
    t_pass = found["t_pass"]
    verdict = np.where(table["wrong"], "wrong", verdict)
    verdict = np.where(table["slowed_b"] & ~table["slowed_a"], "untrusted", verdict)
    verdict = np.where(primary | (verdict == "wrong") | (verdict == "untrusted"), verdict, "detail")
    settled = (verdict != "undecided") | ~reach
    sign = np.where(table["better"] == "lower", 1.0, -1.0)
    ratio = np.exp(sign * mean)
    lo, hi = mean - t_pass * se, upper  # shown: its worse end is the pass bound
    bounds = np.sort(np.exp(sign[:, None] * np.column_stack([lo, hi])), axis=1)
    base = np.array([np.median(a) for a in table["a"]])
    cand = np.array([np.median(b) for b in table["b"]])
    needed = [
        None if v != "undecided" else pairs_needed(float(mu), float(var), float(dl), alpha, m,
                                                   pass_margin=pass_margin)
        for v, mu, var, dl in zip(verdict, mean, variance, delta, strict=True)
    ]  # fmt: skip
    out = table[["probe", "metric", "better", "key", "case"]].assign(
        pairs=n.astype(int),
        pairs_needed=pd.array(needed, dtype="Int64"),
        base=base,
        cand=cand,
        change_pct=100 * (ratio - 1),
        ratio=ratio,
        ratio_lo=bounds[:, 0],
        ratio_hi=bounds[:, 1],
        ratio_worst=np.exp(sign * upper),
        min_effect_pct=100 * np.expm1(delta),
        pass_margin_pct=100 * pass_margin,
        against=against,
        verdict=verdict,
        settled=settled,
    )
    return out


def _decide(
    table: pd.DataFrame,
    primary: np.ndarray,
    delta: np.ndarray,
    *,
    alpha: float,
    max_pairs: int,
    pass_margin: float,
) -> dict[str, Any]:
    """The verdict of each row on its log ratios `d` as given (regression, improvement, same
    or undecided), the statistics it rests on, and whether more pairs could still decide it
    (`reach`)."""
    n = table["d"].map(len).to_numpy(float)
    mean = np.array([np.mean(x) for x in table["d"]])
    variance, df = _moderated_variance(table)
    se = np.sqrt(variance / n)
    m = max(int(primary.sum()), 1)
    margin = math.log1p(max(pass_margin, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        p_worse = stats.t.sf((mean - delta) / se, df)  # H0: not worse than the minimum effect
        p_better = stats.t.sf((-mean - delta) / se, df)
    claimed = _holm(np.where(primary & (n >= 2), np.minimum(p_worse, p_better), 1.0), alpha)
    t_pass = stats.t.ppf(1 - alpha, df)  # one-sided: the pass bound, each case at alpha
    upper = mean + t_pass * se
    verdict = np.select(
        [n < 2, claimed & (p_worse <= p_better), claimed, upper < margin],
        ["undecided", "regression", "improvement", "same"],
        "undecided",
    )
    # out of reach: at max_pairs, at this spread, neither the pass bound could fall under the
    # margin nor the claim's bound pass the minimum effect, even were the true change a
    # standard error kinder than its mean now (judged on the mean alone, simulated checks
    # gave up on a quarter of unchanged checks after 3-4 pairs that more pairs would pass)
    df_max = df + (max_pairs - n)
    se_max = np.sqrt(variance / max_pairs)
    can_pass = mean - se + stats.t.ppf(1 - alpha, df_max) * se_max < margin
    can_claim = np.abs(mean) + se - stats.t.ppf(1 - alpha / m, df_max) * se_max > delta
    return {
        "verdict": verdict,
        "reach": can_pass | can_claim,
        "mean": mean,
        "variance": variance,
        "se": se,
        "upper": upper,
        "t_pass": t_pass,
    }


def _primary(table: pd.DataFrame) -> np.ndarray:
    """Which rows are a case's primary metrics (`Metric.primary`; an unknown metric is)."""
    secondary = {
        (spec.name, m.column)
        for spec in registry.specs().values()
        for m in spec.metrics
        if not m.primary
    }
    pairs = zip(table["probe"], table["metric"], strict=True)
    return np.array([(p, m) not in secondary for p, m in pairs])


def _holm(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down over the p values: which hypotheses are rejected at family-wise
    level alpha (p = 1 marks a row outside the family)."""
    family = int((p < 1).sum())
    rejected = np.zeros(len(p), dtype=bool)
    for step, i in enumerate(np.argsort(p, kind="stable")[:family]):
        if not p[i] <= alpha / (family - step):
            break
        rejected[i] = True
    return rejected


def _against_canary(table: pd.DataFrame) -> tuple[list[Any], np.ndarray]:
    """Each row's log ratios as judged, and against what: its canary (d - c, "canary") where
    both sides measured one in every pair and the canaries agree (their own log ratios not
    significantly apart from 0, two-sided at MOVED_ALPHA); "moved" where they do not (the canary
    runs code neither side changed, so a canary that moved means the sides' machines or
    libraries differ, or the launches drifted: the case is judged as measured, and `judge`
    decides it only where against its canary agrees); "measured" without a canary. A
    canary's own spread is no reason to leave it: on a busy host the compute case and its
    canary moved 10-18% from launch to launch together (correlation 0.95-0.97), and its mean
    over a few pairs strays past any fixed bound."""
    if "c" not in table:
        return list(table["d"]), np.full(len(table), "measured")
    out, against = [], []
    for d, c in zip(table["d"], table["c"], strict=True):
        c = np.asarray(c, dtype=float)
        if len(c) < 2 or not np.isfinite(c).all():
            out.append(d)
            against.append("measured")
            continue
        if np.ptp(c) == 0:  # identical pairs: apart from 0 unless all 0 (a t-test has no spread)
            agree = bool(c[0] == 0)
        else:
            agree = bool(stats.ttest_1samp(c, 0.0).pvalue >= MOVED_ALPHA)
        out.append(list(np.asarray(d) - c) if agree else d)
        against.append("canary" if agree else "moved")
    return out, np.array(against)


def pairs_needed(
    mean: float,
    variance: float,
    delta: float,
    alpha: float,
    m: int,
    cap: int = 200,
    pass_margin: float = PASS_MARGIN,
) -> int | None:
    """The fewest pairs at which a case of this mean and spread would be decided (its pass
    bound under the margin, or beyond the minimum effect), or None if not within `cap`."""
    n = np.arange(2, cap + 1)
    se = np.sqrt(variance / n)
    df = n - 1 + PRIOR_PAIRS
    inside = mean + stats.t.ppf(1 - alpha, df) * se < math.log1p(pass_margin)
    beyond = abs(mean) - stats.t.ppf(1 - alpha / m, df) * se > delta
    found = np.flatnonzero(inside | beyond)
    return int(n[found[0]]) if len(found) else None


def finished(table: pd.DataFrame, num_pairs: int, min_pairs: int, max_pairs: int) -> bool:
    """Whether the check may stop: at max_pairs, or from min_pairs on once every case is
    settled."""
    if num_pairs >= max_pairs:
        return True
    return num_pairs >= min_pairs and (table.empty or bool(table["settled"].all()))


def final(table: pd.DataFrame) -> pd.DataFrame:
    """The verdicts as the check reports them: undecided cases are inconclusive; failures
    first, then by the size of the change."""
    if table.empty:
        return table
    return in_order(table.assign(verdict=table["verdict"].replace({"undecided": "inconclusive"})))


def balanced_order(max_pairs: int, seed: int | None) -> list[tuple[str, str]]:
    """Which side runs first in each pair: blocks of two pairs run A B B A or B A A B (the
    block's first side drawn at random), so a trend over time hits both sides alike."""
    rng = np.random.default_rng(seed)
    order: list[tuple[str, str]] = []
    while len(order) < max_pairs:
        first = ("A", "B") if rng.random() < 0.5 else ("B", "A")
        order += [first, (first[1], first[0])]
    return order[:max_pairs]
