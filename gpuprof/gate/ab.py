"""`gpuprof check --reference-python`: A/B in the same window. The reference (A: another Python
with gpuprof installed, e.g. a venv with the previous torch, and/or other environment
variables) and the candidate (B: this Python with `--env`) are measured in fresh launches,
alternating in a randomized balanced order, one pair at a time, until every case is decided
(`gpuprof.gate.paired`) or `max_pairs` is reached.

Each launch is `<python> -m gpuprof sweep` of the same plan (suite or probes, device, ranks),
without a report, into `<out>/ab-<time>/reference` or `.../candidate`, so every run stays and
its verdicts can be read again. Both sides must agree on the device, its model and the job's
shape; their versions and the environment differences are printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof import registry
from gpuprof.analysis.measured import Measured, measure_run
from gpuprof.errors import MeasurementError, UsageError
from gpuprof.gate.paired import PASS_MARGIN, balanced_order, decide, final, finished
from gpuprof.gate.sides import MUST_MATCH, differences, fingerprint
from gpuprof.gate.stats import FAILING, verdict_counts
from gpuprof.runs.store import Run

SIDES = {"A": "reference", "B": "candidate"}


@dataclass(frozen=True, kw_only=True)
class Side:
    """How to launch one side: its interpreter and the environment variables it changes."""

    python: str
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What both sides measure, and the sequential check's settings."""

    sweep_args: tuple[str, ...]  # e.g. ("--suite", "ci", "--device", "cpu", "--gpus", "2")
    out: Path
    min_pairs: int = 3
    max_pairs: int = 4
    min_effect: float = 0.05
    alpha: float = 0.05
    pass_margin: float = PASS_MARGIN
    effects: Mapping[str, float] = field(default_factory=dict)
    seed: int | None = None
    timeout_s: float = 1800.0  # one launch
    env: Mapping[str, str] = field(default_factory=dict)  # both sides, under their own env
    time_budget_s: float | None = None  # pairs added while the next one fits (max_pairs caps)


@dataclass
class ABResult:
    """The verdicts, the runs behind them, notes on the sides, and the exit code."""

    table: pd.DataFrame
    runs: dict[str, list[Run]]
    notes: list[str]
    exit_code: int
    summary: str
    seconds: float
    versions: dict[str, dict[str, Any]]


def parse_env(items: tuple[str, ...], flag: str) -> dict[str, str]:
    """KEY=VALUE items -> a mapping; a UsageError naming the bad one."""
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise UsageError(f"invalid {flag} {item!r}", f"give {flag} NAME=VALUE")
        env[key] = value
    return env


def check_python(python: str) -> str:
    """The reference interpreter, refused in one line unless it runs gpuprof."""
    done = (
        subprocess.run(
            [python, "-c", "import gpuprof, sys; print(gpuprof.__version__)"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if _executable(python)
        else None
    )
    if done is None or done.returncode != 0:
        raise UsageError(
            f"--reference-python {python} cannot import gpuprof",
            "give a Python with gpuprof installed (e.g. a venv's bin/python)",
        )
    return done.stdout.strip()


def _executable(path: str) -> bool:
    return Path(path).is_file() and os.access(path, os.X_OK)


def launch(side: Side, label: str, plan: Plan, stamp: Path, probes: list[str] | None = None) -> Run:
    """One fresh launch of the plan by this side (of `probes` alone where given); its run (a
    MeasurementError if none)."""
    out = stamp / label
    env = {**os.environ, **plan.env, **side.env}
    argv = [side.python, "-m", "gpuprof", "sweep", *_only(plan.sweep_args, probes)]
    argv += ["--out", str(out), "--tag", label, "--no-report", "-q"]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, check=False, timeout=plan.timeout_s
    )
    runs = sorted(p for p in out.iterdir() if (p / "run.json").is_file()) if out.is_dir() else []
    if not runs:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise MeasurementError(f"the {label} launch wrote no run: {tail[0]}")
    return Run(runs[-1])


def _only(args: tuple[str, ...], probes: list[str] | None) -> list[str]:
    """The sweep's arguments, its probes replaced by `probes` where given."""
    if probes is None:
        return list(args)
    kept, skip = [], False
    for arg in args:
        if skip or arg == "--probes":
            skip = not skip
            continue
        kept.append(arg)
    return [*kept, "--probes", ",".join(probes)]


def run_ab(
    reference: Side,
    candidate: Side,
    plan: Plan,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> ABResult:
    """Measure pairs until the check may stop; the verdicts (exit code as `gpuprof check`:
    0 pass, 1 a failing verdict, 3 a launch that did not complete). Past `min_pairs`, a pair
    launches only the probes that still have undecided cases (every launch of a settled
    probe would spend the time the undecided ones need); with a time budget, pairs are
    added while the next one fits in it (its probes timed as in their last launches, the
    rest as in the last pair)."""
    started = time.monotonic()
    stamp = plan.out / f"ab-{time.strftime('%Y%m%d-%H%M%S')}"
    sides = {"A": reference, "B": candidate}
    runs: dict[str, list[Run]] = {"A": [], "B": []}
    pairs: list[tuple[Measured, Measured]] = []
    table = pd.DataFrame()
    probes: list[str] | None = None  # the plan's own
    costs = _Costs()
    for number, order in enumerate(balanced_order(plan.max_pairs, plan.seed), start=1):
        began = time.monotonic()
        measured: dict[str, Measured] = {}
        for which in order:
            run = launch(sides[which], SIDES[which], plan, stamp, probes)
            runs[which].append(run)
            if run.status != "complete":
                return _incomplete(run, runs, table, started)
            measured[which] = measure_run(run, slots=0)  # run medians: no iteration samples
        if number == 1:
            _same_environment(runs["A"][0], runs["B"][0])
        pairs.append((measured["A"], measured["B"]))
        now = time.monotonic()
        costs.add(now - began, [probe_seconds(runs[which][-1]) for which in order])
        # the next pair launches the probes still undecided, which depend on the pairs the
        # budget can reach, which depend on what the next pair costs: settled in a few turns
        basis: list[str] | None = None  # the probes the next pair is timed by (None: all)
        for _ in range(3):
            horizon = _horizon(plan, number, costs.pair_s(basis), now - started)
            table = decide(
                pairs,
                min_effect=plan.min_effect,
                alpha=plan.alpha,
                max_pairs=horizon,
                effects=dict(plan.effects),
                pass_margin=plan.pass_margin,
            )
            undecided = sorted(set(table.loc[~table["settled"], "probe"])) if len(table) else []
            if number < plan.min_pairs or undecided == basis:
                break
            basis = undecided
        open_cases = 0 if table.empty else int((~table["settled"]).sum())
        say(f"gpuprof: pair {number} ({' '.join(order)}): {open_cases} case(s) undecided")
        if finished(table, number, plan.min_pairs, horizon):
            break
        probes = undecided if number >= plan.min_pairs else None
    needed = _needed_note(table, len(pairs)) + _canary_note(table)
    table = _with_missing(final(table), pairs)
    failing = len(table) and table["verdict"].isin(FAILING).any()
    return ABResult(
        table=table,
        runs=runs,
        notes=_notes(runs, reference, candidate)
        + [f"both sides set {k}={v}" for k, v in sorted(plan.env.items())]
        + needed,
        exit_code=1 if failing else 0,
        summary=f"{verdict_counts(table)} after {len(pairs)} pair(s)",
        seconds=time.monotonic() - started,
        versions={SIDES[k]: (v[0].info.get("versions") or {}) for k, v in runs.items() if v},
    )


def probe_seconds(run: Run) -> dict[str, float]:
    """Each probe's measuring time in a run: its first case's start to its last case's end."""
    have = set(run.tables())
    spans = {}
    for name, spec in registry.specs().items():
        frames = [run.table(t) for t in spec.table_names if t in have]
        timed = [f[f["start_unix_ns"] > 0] for f in frames if "end_unix_ns" in f]
        if any(len(f) for f in timed):
            rows = pd.concat(timed)
            spans[name] = float(rows["end_unix_ns"].max() - rows["start_unix_ns"].min()) / 1e9
    return spans


@dataclass
class _Costs:
    """What a pair costs: each probe's measuring time in a launch (the latest seen) and the
    rest of the last pair's wall time (two processes' starts, reading the runs, judging)."""

    spans: dict[str, float] = field(default_factory=dict)
    overhead_s: float = 0.0

    def add(self, pair_s: float, launches: list[dict[str, float]]) -> None:
        for probe in {p for spans in launches for p in spans}:
            self.spans[probe] = max(spans.get(probe, 0.0) for spans in launches)
        self.overhead_s = max(0.0, pair_s - sum(sum(s.values()) for s in launches))

    def pair_s(self, probes: list[str] | None) -> float:
        """A pair of launches of `probes` (None: every probe measured so far)."""
        kept = self.spans if probes is None else {p: self.spans.get(p, 0.0) for p in probes}
        return self.overhead_s + 2 * sum(kept.values())


def _horizon(plan: Plan, done: int, pair_s: float, spent_s: float) -> int:
    """The pairs the check can reach: `max_pairs`, or fewer where the time budget runs out
    first (each further pair taking `pair_s`; never fewer than `min_pairs` or than done)."""
    if plan.time_budget_s is None:
        return plan.max_pairs
    more = int(max(0.0, plan.time_budget_s - spent_s) // max(pair_s, 1e-9))
    return max(done, min(plan.max_pairs, max(plan.min_pairs, done + more)))


def _needed_note(table: pd.DataFrame, pairs: int) -> list[str]:
    """How many pairs the undecided cases would need, at their spread (a hint for
    --max-pairs or --time-budget), or nothing when every case was decided."""
    if table.empty or "pairs_needed" not in table:
        return []
    open_cases = table[table["verdict"] == "undecided"]
    if open_cases.empty:
        return []
    wanted = open_cases["pairs_needed"].dropna()
    more = (
        f"at their spread, deciding them takes about {int(wanted.max())} pairs"
        " (--max-pairs, --time-budget)"
        if len(wanted)
        else "too noisy to decide within 200 pairs"
    )
    return [f"{len(open_cases)} case(s) undecided after {pairs} pair(s): {more}"]


def _canary_note(table: pd.DataFrame) -> list[str]:
    """Which cases were judged against their canaries, and which canaries moved apart."""
    if table.empty or "against" not in table:
        return []
    notes = []
    judged = table[table["against"] == "canary"]
    if len(judged):
        notes.append(
            f"{len(judged)} case-metric(s) judged against their canaries (a workload neither "
            "side changed, run between the case's iterations): the process's own speed removed"
        )
    for rec in table[table["against"] == "moved"].to_dict("records"):
        notes.append(
            f"{rec['case']} [{rec['metric']}]: its canary moved between the sides; decided only "
            "where as measured and against the canary agree (the sides' machines or libraries "
            "differ?)"
        )
    return notes


def _incomplete(
    run: Run, runs: dict[str, list[Run]], table: pd.DataFrame, started: float
) -> ABResult:
    return ABResult(
        table=final(table),
        runs=runs,
        notes=[f"run {run.path} is {run.status}: it could not measure every case"],
        exit_code=3,
        summary="could not measure",
        seconds=time.monotonic() - started,
        versions={},
    )


def _same_environment(a: Run, b: Run) -> None:
    """The sides must run the same device, model and job shape (exit 2 otherwise)."""
    diff = differences(fingerprint(a.info), fingerprint(b.info), (*MUST_MATCH, "suite"))
    if diff:
        raise UsageError(
            f"the reference and the candidate measured different things: {'; '.join(diff)}",
            "give both sides the same device and GPUs",
        )


def _with_missing(table: pd.DataFrame, pairs: list[tuple[Measured, Measured]]) -> pd.DataFrame:
    """Add the case-metrics the reference measured and the candidate never did."""
    if not pairs:
        return table
    ref = pairs[0][0].values
    cand_keys = set().union(
        *({tuple(r) for r in p[1].values[["probe", "metric", "key"]].to_numpy()} for p in pairs)
    )
    lost = ref[[tuple(r) not in cand_keys for r in ref[["probe", "metric", "key"]].to_numpy()]]
    if lost.empty:
        return table
    rows = lost[["probe", "metric", "better", "key", "case"]].assign(
        verdict="missing", pairs=0, base=lost["value"], cand=float("nan")
    )
    return pd.concat([rows, table], ignore_index=True)


def _notes(runs: dict[str, list[Run]], reference: Side, candidate: Side) -> list[str]:
    """What differs between the sides: interpreter, versions and environment variables."""
    a, b = (runs[k][0].info if runs[k] else {} for k in ("A", "B"))
    va, vb = a.get("versions") or {}, b.get("versions") or {}
    notes = [f"reference: {reference.python}; candidate: {candidate.python}"]
    notes += [
        f"{k}: reference {va.get(k)}, candidate {vb.get(k)}" for k in va if va.get(k) != vb.get(k)
    ]
    for label, side in (("reference", reference), ("candidate", candidate)):
        notes += [f"{label} sets {k}={v}" for k, v in sorted(side.env.items())]
    if len(notes) == 1:
        notes.append("the sides differ in nothing they were given: an A/A check of the noise")
    return notes
