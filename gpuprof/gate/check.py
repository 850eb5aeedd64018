"""`gpuprof check` against a stored baseline: the environment must match, the machine-wide
factor is removed from both sides (`gpuprof.gate.machine`), and every case gets a verdict
(`gpuprof.gate.stats`). No torch here: `check --run` works where torch is not installed."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.errors import UsageError
from gpuprof.gate.machine import MachineFactor, machine_factor
from gpuprof.gate.sides import MUST_MATCH, WINDOW_S, Side, differences, version_notes
from gpuprof.gate.stats import ALPHA, FAILING, MIN_EFFECT, compare, in_order, verdict_counts


@dataclass
class CheckResult:
    """A check's comparison table, the notes about the environment, the machine-wide factor
    (None when not removed), and its exit code."""

    table: pd.DataFrame
    baseline: Side
    candidate: Side
    notes: list[str]
    exit_code: int
    summary: str
    machine: MachineFactor | None = None


def environment_notes(a: Side, b: Side, mismatch: str, other: str) -> list[str]:
    """One note per environment field (prefixed `mismatch`) and per software or suite field
    (prefixed `other`) in which the two sides differ."""
    diff = differences(a.fingerprint, b.fingerprint, MUST_MATCH)
    notes = [f"{mismatch}: {d}" for d in diff]
    return notes + [f"{other}: {d}" for d in version_notes(a.fingerprint, b.fingerprint)]


def environment_check(baseline: Side, candidate: Side, allow_mismatch: bool) -> list[str]:
    """Notes on software differences; a UsageError (exit 2) when the environments differ,
    unless allowed."""
    diff = differences(baseline.fingerprint, candidate.fingerprint, MUST_MATCH)
    if diff and not allow_mismatch:
        raise UsageError(
            f"environment differs from the baseline: {'; '.join(diff)}",
            "check on the baseline's machine, make a new baseline, or pass --allow-env-mismatch",
        )
    return environment_notes(
        baseline, candidate, "environment differs (allowed)", "differs from the baseline"
    )


def run_check(
    baseline: Side,
    candidate: Side,
    *,
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    effects: dict[str, float] | None = None,
    allow_mismatch: bool = False,
    machine: bool = True,
    fail_on_machine_shift: bool = False,
) -> CheckResult:
    """Compare, with the machine-wide factor removed from both sides (`machine`); exit code 0
    no regression, 1 regression or a failing case (or a machine shift, when asked), 3 when
    the candidate run did not complete (2, a differing environment, is raised)."""
    notes = environment_check(baseline, candidate, allow_mismatch)
    if baseline.measured.num_runs == 1:
        notes.append(
            "the baseline holds one run: thresholds are the minimum effect alone (runs differ "
            "from each other more than their iterations do; make baselines from --repeats 3+)"
        )
    base_m, cand_m, factor = baseline.measured, candidate.measured, None
    if machine:
        factor, base_m, cand_m = machine_factor(base_m, cand_m, min_effect=min_effect, alpha=alpha)
        notes.append(factor.line())
        notes += [shift.line() for shift in factor.canaries]
        if not factor.estimated and not factor.canaries:
            factor = None
    table = compare(base_m, cand_m, min_effect=min_effect, alpha=alpha, effects=effects)
    if factor is not None and factor.canary_cases:
        raw = compare(
            baseline.measured, candidate.measured, min_effect=min_effect, alpha=alpha,
            effects=effects,
        )  # fmt: skip
        table, found = as_measured_too(table, raw, factor.canary_cases)
        notes += found
    notes += blind_spots(table) + one_window(baseline, table)
    code = 1 if len(table) and table["verdict"].isin(FAILING).any() else 0
    if factor is not None and fail_on_machine_shift and factor.shifted:
        code = 1
    if not candidate.complete:
        bad = next(r for r in candidate.runs if r.get("status") != "complete")
        notes.append(f"run {bad.get('path')} is {bad.get('status')}: it could not measure all")
        code = 3
    return CheckResult(
        table=table,
        baseline=baseline,
        candidate=candidate,
        notes=notes,
        exit_code=code,
        summary=verdict_counts(table),
        machine=factor,
    )


CALLED = ("regression", "improvement")


def as_measured_too(
    table: pd.DataFrame, raw: pd.DataFrame, cases: frozenset[tuple[str, str, str]]
) -> tuple[pd.DataFrame, list[str]]:
    """The verdicts of the case-metrics judged against their canaries (`cases`) called only
    where their change as measured (`raw`: against the baseline's values, nothing removed) is
    called the same way: a regression must be slower than its canary says and slower than its
    baseline, or else it is "inconclusive" (an intersection-union test: both tests at level
    alpha, the pair at alpha too). A canary that drifts on its own (a numpy copy 15% faster
    for an hour beside an unmoved torch copy) then names nothing, a host whose memory got
    slower (case and canary alike) still names nothing, and a slower copy kernel is named by
    both; what it cannot see is a regression hidden by a machine that got as much faster.
    Also a note per case so changed."""
    if table.empty or raw.empty or not cases:
        return table, []
    as_measured = {
        (str(r["probe"]), str(r["metric"]), str(r["key"])): r for r in raw.to_dict("records")
    }
    table = table.copy()
    notes = []
    for i, row in table.iterrows():
        ident = (str(row["probe"]), str(row["metric"]), str(row["key"]))
        other = as_measured.get(ident)
        if ident not in cases or row["verdict"] not in CALLED or other is None:
            continue
        if other["verdict"] == row["verdict"]:  # both tests call it
            continue
        table.loc[i, "verdict"] = "inconclusive"
        notes.append(
            f"{row['case']} [{row['metric']}]: {row['change_pct']:+.1f}% against its canary "
            f"({row['verdict']}) but {other['change_pct']:+.1f}% as measured "
            f"({other['verdict']}): inconclusive, the canary moved apart from the case"
        )
    return in_order(table), notes


def one_window(baseline: Side, table: pd.DataFrame) -> list[str]:
    """A note, where a regression is named, when the baseline's runs were all measured within
    WINDOW_S: its thresholds know the runs' noise in that window, not how far a case drifts on
    its own between hours or days, which a regression named against it may be."""
    span = baseline.span_s
    named = "verdict" in table and bool((table["verdict"] == "regression").any())
    if span is None or span >= WINDOW_S or not named:
        return []
    runs = len(baseline.runs)
    return [
        f"the baseline's {runs} runs were measured within {max(span / 60, 1):.0f} min: its "
        "thresholds hold their noise in that window, not how far a case drifts on its own "
        "between hours or days (the named cases may be such drift): gather the baseline over "
        "several windows (gpuprof baseline RUN... --extend FILE), or check A/B in one window "
        "(--reference-python)"
    ]


BLIND = 0.20  # a case that cannot be called below a change this large is a blind spot


def blind_spots(table: pd.DataFrame) -> list[str]:
    """A note when the baseline's own spread keeps some cases from being called below a
    BLIND change (their thresholds, beyond their minimum effects): a baseline measured on a
    busy machine, or from too few runs, hides regressions of that size without saying so."""
    if table.empty or "threshold_pct" not in table:
        return []
    shown = table["threshold_pct"].to_numpy(float) / 100
    drop = table["change_pct"].to_numpy(float) < 0
    threshold = pd.Series(
        100 * np.where(drop, shown / np.maximum(1 - shown, 1e-9), shown), index=table.index
    )  # undirected: a drop's threshold is shown as 1 - 1 / (1 + T)
    blind = table[(threshold > 100 * BLIND) & (threshold > table["min_effect_pct"] + 1e-9)]
    if blind.empty:
        return []
    position = int(np.argmax(threshold[blind.index].to_numpy(float)))
    row, needs = blind.iloc[position], float(threshold[blind.index].iloc[position])
    return [
        f"blind spots: {len(blind)} of {int(threshold.notna().sum())} case-metrics cannot be "
        f"called below a {100 * BLIND:.0f}% change against this baseline, whose runs differ "
        f"too much on them ({row['case']} [{row['metric']}] needs {needs:.0f}%, "
        f"its runs spread {row['spread_pct']:.1f}%): make the baseline on a quiet runner or "
        "from more runs (--repeats), or check A/B in one window (--reference-python)"
    ]


def parse_effects(items: tuple[str, ...]) -> dict[str, float]:
    """--fail METRIC:PCT items -> metric -> fraction."""
    known = {m.column for s in registry.specs().values() for m in s.metrics}
    effects = {}
    for item in items:
        metric, sep, pct = item.partition(":")
        try:
            value = float(pct.rstrip("%")) / 100
        except ValueError:
            value = math.nan
        if not sep or metric not in known or not (0 < value < 10):
            raise UsageError(
                f"invalid --fail {item!r}",
                f"METRIC:PCT with PCT > 0, METRIC one of {', '.join(sorted(known))}",
            )
        effects[metric] = value
    return effects


def step_summary_path() -> Path | None:
    """GitHub Actions' job summary file, when set."""
    value = os.environ.get("GITHUB_STEP_SUMMARY")
    return Path(value) if value else None
