"""Regression statistics: a run's cases as metric values, and a verdict per case and metric.

Pure pandas and scipy (no torch). Both sides are measured sets (`gpuprof.analysis.measured`):
per case and metric one value per run and a sample of per-iteration values. The baseline file,
a check's candidate and each side of `gpuprof compare` are measured sets.

A case regresses when both hold:

1. **Beyond its threshold.** Its median moved the wrong way by more than its threshold: the
   larger of the minimum effect (5%) and z x the between-run spread. The spread is the standard
   deviation of the baseline runs' medians on a log scale, pooled over the ranks that run the
   same case (`_over_ranks`) and moderated toward the typical spread of the same probe, metric
   and scope (`_moderated`); it is scaled by the spread of the
   difference of the two sides' medians of K baseline and J candidate runs
   (`_median_variance`). z is Student's t quantile at 1 - alpha/M for M compared case-metrics
   (Bonferroni), with the spread's degrees of freedom (K - 1 per rank pooled, + PRIOR_RUNS
   where moderated): drift between runs, which no test on one run's iterations can see,
   crosses the threshold in any of the M cases of an unchanged check with probability at most
   about alpha.
2. **Against the noise inside the runs.** A one-sided Mann-Whitney U test of the candidate's
   iteration samples against the baseline's (scipy.stats.mannwhitneyu), with the
   Benjamini-Hochberg correction over every case-metric of the check
   (scipy.stats.false_discovery_control); q < alpha. Where a side has no samples, the threshold
   alone decides.

Improvements are the mirror image. A move beyond the minimum effect that passes only one of the
two is "inconclusive"; the rest are "same". Always failures: a candidate case with wrong
elements ("wrong"), a case throttled in the candidate but not in the baseline ("untrusted":
could not trust), a baseline case the candidate lacks ("missing").
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from gpuprof import registry
from gpuprof.analysis.measured import SAMPLE_SLOTS, Measured

MIN_EFFECT, ALPHA = registry.MIN_EFFECT, registry.ALPHA

VERDICTS = (
    "regression",
    "wrong",
    "untrusted",
    "missing",
    "inconclusive",
    "improvement",
    "new",
    "same",
    "detail",
)
FAILING = ("regression", "wrong", "untrusted", "missing")


def _relative(values: np.ndarray, center: float) -> np.ndarray:
    """Values relative to `center` on a log scale (linear, relative to |center|, where a value
    is not positive)."""
    if center > 0 and np.all(values > 0):
        return np.log(values / center)
    return (values - center) / abs(center) if center else np.full(len(values), np.nan)


def compare(
    base: Measured,
    cand: Measured,
    *,
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    effects: dict[str, float] | None = None,
) -> pd.DataFrame:
    """One row per case-metric of either side, with both medians, the change, the threshold,
    the test's p and q values and the verdict; failures first, then by the size of the move.

    `effects`: metric column -> its own minimum effect (a fraction), instead of `min_effect`."""
    effects = effects or {}
    index = ["probe", "metric", "key"]
    b_groups = dict(list(base.values.groupby(index, sort=False)))
    c_groups = dict(list(cand.values.groupby(index, sort=False)))
    b_samples = dict(list(base.samples.groupby(index, sort=False)))
    c_samples = dict(list(cand.samples.groupby(index, sort=False)))

    rows: list[dict[str, Any]] = []
    for ident in [*b_groups, *(k for k in c_groups if k not in b_groups)]:
        probe, metric, key = ident
        b, c = b_groups.get(ident), c_groups.get(ident)
        first = b if b is not None else c
        assert first is not None
        row: dict[str, Any] = {
            "probe": probe,
            "metric": metric,
            "better": first["better"].iloc[0],
            "key": key,
            "case": first["case"].iloc[0],
            "base": float(b["value"].median()) if b is not None else np.nan,
            "cand": float(c["value"].median()) if c is not None else np.nan,
            "base_runs": 0 if b is None else len(b),
            "cand_runs": 0 if c is None else len(c),
            "min_effect_pct": 100 * effects.get(str(metric), min_effect),
        }
        row["change_pct"] = 100 * (row["cand"] / row["base"] - 1) if row["base"] else np.nan
        if b is not None:
            logs = _relative(b["value"].to_numpy(float), row["base"])
            row["spread"] = float(np.std(logs, ddof=1)) if len(logs) > 1 else np.nan
        else:
            row["spread"] = np.nan
        row["verdict"] = _flag(row, b, c)
        row["p_value"] = np.nan
        if row["verdict"] is None:
            row["worse"] = _worse(row)
            bs, cs = b_samples.get(ident), c_samples.get(ident)
            if bs is not None and cs is not None and len(bs) >= 3 and len(cs) >= 3:
                row["p_value"] = _mann_whitney(row, bs["value"], cs["value"])
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return in_order(_verdicts(table, alpha))


def in_order(table: pd.DataFrame) -> pd.DataFrame:
    """The table's rows failures first (in VERDICTS order), then by the size of the move."""
    order = {v: i for i, v in enumerate(VERDICTS)}
    table = table.assign(_order=table["verdict"].map(order))
    table["_move"] = -table["change_pct"].abs().fillna(0)
    table = table.sort_values(["_order", "_move"], kind="stable").drop(columns=["_order", "_move"])
    return table.reset_index(drop=True)


def _flag(row: dict[str, Any], b: pd.DataFrame | None, c: pd.DataFrame | None) -> str | None:
    """The verdicts that need no statistics (None: compare the numbers)."""
    if c is None:
        return "missing"
    if b is None:
        return "new"
    if (c["nwrong"].fillna(0) > 0).any():
        return "wrong"
    if c["throttled"].astype(bool).any() and not b["throttled"].astype(bool).any():
        return "untrusted"
    if not (math.isfinite(row["base"]) and math.isfinite(row["cand"])) or not row["base"]:
        return "same" if row["cand"] == row["base"] else "inconclusive"
    return None


def _worse(row: dict[str, Any]) -> float:
    """How much worse the candidate is, on the relative scale (negative: better)."""
    move = float(_relative(np.array([row["cand"]]), row["base"])[0])
    return move if row["better"] == "lower" else -move


def _mann_whitney(row: dict[str, Any], base: pd.Series, cand: pd.Series) -> float:
    """One-sided p of the candidate's iterations being worse (or better, following the move)
    than the baseline's."""
    sign = 1.0 if row["better"] == "lower" else -1.0
    worse_side: Any = "greater" if row["worse"] > 0 else "less"
    x: Any = sign * cand.to_numpy(float)
    y: Any = sign * base.to_numpy(float)
    return float(stats.mannwhitneyu(x, y, alternative=worse_side).pvalue)


PRIOR_RUNS = 3  # the weight, in runs, of the probe-metric's typical variance


MIN_POOL = 3  # cases a typical spread is taken from


def _over_ranks(part: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each case's between-run variance (log scale) pooled with the same case's on the other
    ranks, and the degrees of freedom behind it. Ranks that run the same case (a host copy of
    one size, a matmul of one shape: the key apart from its rank) on devices the check has
    found alike are replicates: their spreads estimate one spread, and from ten runs each one
    rank's can come out several times the other's by luck. On a 2-core VM the two ranks' CPU
    matmuls each ran 30-40% slower for a whole run in about one run in seven; a baseline of 10
    runs held two such runs on rank 1 and none on rank 0, whose threshold then came out at
    5.8% (rank 1's at 24%), and rank 0's slow runs were named in 4 of 15 unchanged checks.
    The pooled variance is the mean weighted by K - 1 per rank (a pooled two-sample variance);
    each rank keeps its own median: ranks may differ in level (a GPU further from the CPU),
    not, by assumption, in noise. The degrees of freedom add up as if the ranks' runs were
    independent; a whole run that is slow on every rank makes them fewer, so Student's t is
    somewhat low for such cases (3.3 instead of 3.7 at alpha 0.05 over 21 cases, 18 against
    9 degrees of freedom)."""
    own = part["spread"].to_numpy(float) ** 2
    known = ~np.isnan(own)
    df = np.where(known, np.maximum(part["base_runs"].to_numpy(float) - 1, 0), 0.0)
    twin = [
        json.dumps({k: v for k, v in json.loads(key).items() if k != "rank"}, sort_keys=True)
        for key in part["key"]
    ]
    groups = pd.DataFrame(
        {
            "probe": part["probe"].to_numpy(),
            "metric": part["metric"].to_numpy(),
            "twin": twin,
            "sum": df * np.nan_to_num(own),
            "df": df,
        }
    ).groupby(["probe", "metric", "twin"])
    total = groups["df"].transform("sum").to_numpy(float)
    mean = groups["sum"].transform("sum").to_numpy(float) / np.where(total > 0, total, 1)
    return np.where(total > 0, mean, own), total


def _moderated(part: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each case's between-run spread moderated toward its pool's typical one (empirical
    Bayes, as limma moderates gene variances), and the degrees of freedom behind it. A pool is
    the cases of one probe, metric and scope (the scope sets the transport: loopback and a
    network link are different noise). A variance from K runs weighs K - 1, the median variance
    of a pool of at least MIN_POOL cases weighs PRIOR_RUNS: a case whose few runs agreed by luck
    is not trusted to be much quieter than its neighbours, nor one wild run to make it much
    noisier. A case's own variance is first pooled over its ranks (`_over_ranks`). NaN where
    neither is known (one-run baselines)."""
    own, weight = _over_ranks(part)
    scope = [json.loads(k).get("scope", "") for k in part["key"]]
    pools = part.assign(v=own, scope=scope).groupby(["probe", "metric", "scope"])["v"]
    typical = pools.transform("median").to_numpy(float)
    pooled = pools.transform("count").to_numpy(float) >= MIN_POOL
    prior_weight = np.where(pooled, PRIOR_RUNS, 0.0)
    known = ~np.isnan(own)
    total = weight + prior_weight
    blended = np.where(
        known & (total > 0),
        (weight * np.nan_to_num(own) + prior_weight * np.nan_to_num(typical))
        / np.where(total > 0, total, 1),
        np.where(pooled, typical, np.nan),
    )
    return np.sqrt(blended), np.maximum(total, 1)


def _median_variance(runs: np.ndarray) -> np.ndarray:
    """The variance of the median of n runs, per unit variance of one: 1/n up to two runs
    (the median is the mean), pi/(2n) beyond (the median of normal values)."""
    return np.where(runs <= 2, 1 / runs, np.pi / (2 * runs))


def _verdicts(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Thresholds (between-run spread, Bonferroni over the compared cases), BH q values, and
    the verdict of every compared case-metric."""
    table = table.copy()
    if "worse" not in table:
        table["worse"] = np.nan
    compared = table["verdict"].isna()
    table["threshold_pct"] = np.nan
    table["q_value"] = np.nan
    table["spread_pct"] = 100 * table["spread"]
    if not compared.any():
        return table.drop(columns=["spread", "worse"])
    part = table[compared]
    spread, df = _moderated(part)
    runs_b = part["base_runs"].to_numpy(float)
    runs_c = part["cand_runs"].to_numpy(float)
    scale = np.sqrt(_median_variance(runs_b) + _median_variance(runs_c))
    # Student's t: the spread is itself estimated, from K - 1 (+ PRIOR_RUNS) degrees of freedom
    z = stats.t.ppf(1 - alpha / len(part), df)
    drift = np.nan_to_num(np.expm1(z * spread * scale), nan=0.0)
    threshold = np.fmax(part["min_effect_pct"].to_numpy(float) / 100, drift)
    table.loc[compared, "threshold_pct"] = 100 * threshold
    tested = compared & table["p_value"].notna()
    if tested.any():
        table.loc[tested, "q_value"] = stats.false_discovery_control(
            table.loc[tested, "p_value"].to_numpy(float), method="bh"
        )
    worse = table["worse"].to_numpy(float)
    move = np.abs(worse)
    q = table["q_value"].to_numpy(float)
    significant = np.isnan(q) | (q < alpha)
    beyond = move > np.log1p(table["threshold_pct"].to_numpy(float) / 100)
    moved = move > np.log1p(table["min_effect_pct"].to_numpy(float) / 100)
    verdict = np.select(
        [beyond & significant & (worse > 0), beyond & significant, moved],
        ["regression", "improvement", "inconclusive"],
        "same",
    )
    table.loc[compared, "verdict"] = verdict[compared.to_numpy()]
    # shown in the direction of the change: a drop's threshold is 1 - 1/(1 + T), so that
    # |change| > threshold reads exactly as the log-scale comparison above decided
    drop = table["change_pct"].to_numpy(float) < 0
    shown = table["threshold_pct"].to_numpy(float) / 100
    table["threshold_pct"] = 100 * np.where(drop, 1 - 1 / (1 + shown), shown)
    return table.drop(columns=["spread", "worse"])


def verdict_counts(table: pd.DataFrame) -> str:
    """'3 same, 1 regression': how many case-metrics got each verdict."""
    if table.empty:
        return "nothing compared"
    counts = table["verdict"].value_counts()
    return ", ".join(f"{int(n)} {v}" for v, n in counts.items())


def method_lines() -> list[str]:
    """How a verdict is reached, for the compare and trend pages."""
    return [
        "Each side's value of a case is the median of its runs' medians (a run's median is the "
        "probe's own summary); per-iteration samples are the probe's summary of single "
        f"iterations ({SAMPLE_SLOTS} per run, spread evenly).",
        "Threshold: the larger of the minimum effect and z x the spread of the baseline runs' "
        "medians (log scale; pooled over the ranks that run the same case, and moderated toward "
        "the median spread of the same probe, metric and scope) x sqrt(1/K + 1/J) for K and J "
        "runs, z Student's t quantile at 1 - alpha/M (with the spread's degrees of freedom) over "
        "the M compared case-metrics (Bonferroni).",
        "Noise test: a one-sided Mann-Whitney U test of the iteration samples (scipy.stats), "
        "Benjamini-Hochberg corrected over all case-metrics; q < alpha.",
        "Regression or improvement: beyond the threshold and significant; inconclusive: moved "
        "beyond the minimum effect without both; same: within the minimum effect.",
    ]
