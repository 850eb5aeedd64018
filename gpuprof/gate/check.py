"""The regression gate: baseline files, the sides of a comparison, and `gpuprof check`.

A baseline file (JSON, committable) holds a measured set (`analysis.regression.Measured`) of
one or more complete runs of the same plan: per case and metric each run's median and a capped
sample of iterations, the direction of each metric, and the environment fingerprint. A side
of `check`, `compare` or `trend` is a baseline file or a run folder. No torch here: `check
--run`, `compare` and `trend` work where torch is not installed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.analysis import gpu_model
from gpuprof.analysis.measured import SAMPLE_COLUMNS, VALUE_COLUMNS, Measured, measure_run
from gpuprof.errors import UsageError
from gpuprof.gate.stats import ALPHA, FAILING, MIN_EFFECT, compare, verdict_counts
from gpuprof.runs.store import DEFAULT_OUT, Run, open_run, utc_now, write_json_atomic

FORMAT = "gpuprof-baseline"
VERSION = 1
SAMPLE_CAP = 60  # iteration samples kept per case and metric in a baseline file
# fingerprint fields that must agree for numbers to be comparable (the rest are notes)
MUST_MATCH = ("device", "device_model", "num_nodes", "gpus_per_node")


def fingerprint(info: dict[str, Any]) -> dict[str, Any]:
    """What a run's numbers depend on: device and its model (the GPU, or the CPU on CPU runs),
    the job's shape, the suite, and the software versions."""
    nodes = info.get("nodes") or [{}]
    cpu = (nodes[0].get("cpu") or {}).get("model")
    versions = info.get("versions") or {}
    return {
        "device": info.get("device"),
        "device_model": gpu_model(info) or (cpu if info.get("device") == "cpu" else None),
        "backend": info.get("backend"),
        "num_nodes": info.get("num_nodes"),
        "gpus_per_node": info.get("gpus_per_node"),
        "world_size": info.get("world_size"),
        "suite": info.get("suite"),
        "versions": {
            k: versions.get(k) for k in ("gpuprof", "torch", "cuda", "nccl", "driver", "python")
        },
    }


def differences(a: dict[str, Any], b: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    """'device cpu != cuda' for each field that differs."""
    return [f"{f} {a.get(f)} != {b.get(f)}" for f in fields if a.get(f) != b.get(f)]


def version_notes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The software and suite differences (allowed: checking an upgrade is the point)."""
    notes = differences(a.get("versions") or {}, b.get("versions") or {}, tuple(a["versions"]))
    return notes + differences(a, b, ("suite",))


@dataclass
class Side:
    """One side of a comparison: its measured set, where it came from, and its runs."""

    label: str
    measured: Measured
    fingerprint: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)  # run_id, created_utc, status

    @property
    def complete(self) -> bool:
        return all(r.get("status") == "complete" for r in self.runs)


def _run_entry(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.info.get("run_id", run.path.name),
        "path": str(run.path),
        "created_utc": run.info.get("created_utc"),
        "status": run.status,
    }


def side_of_runs(runs: list[Run], label: str | None = None) -> Side:
    """The measured set of one or more runs that agree on the environment."""
    prints = [fingerprint(r.info) for r in runs]
    for run, other in zip(runs[1:], prints[1:], strict=True):
        diff = differences(prints[0], other, MUST_MATCH)
        if diff:
            raise UsageError(
                f"runs {runs[0].path} and {run.path} differ: {'; '.join(diff)}",
                "give runs of one environment",
            )
    measured = Measured.combine([measure_run(r) for r in runs])
    return Side(
        label=label or ", ".join(r.path.name for r in runs),
        measured=measured,
        fingerprint=prints[0],
        runs=[_run_entry(r) for r in runs],
    )


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def baseline_json(side: Side) -> dict[str, Any]:
    """The baseline file's content: one entry per case-metric."""
    if not side.complete:
        bad = next(r for r in side.runs if r.get("status") != "complete")
        raise UsageError(
            f"run {bad['path']} is {bad['status']}: a baseline needs complete runs",
            "resume it (gpuprof sweep --resume RUN) or measure again",
        )
    values = side.measured.values
    if values.empty:
        raise UsageError("the runs have no case with a regression metric", "run a suite first")
    samples = dict(list(side.measured.samples.groupby(["probe", "metric", "key"], sort=False)))
    cases = []
    for (probe, metric, key), rows in values.groupby(["probe", "metric", "key"], sort=False):
        rows = rows.sort_values("run")
        kept = samples.get((probe, metric, key))
        kept_values = np.sort(kept["value"].to_numpy(float)) if kept is not None else np.array([])
        if len(kept_values) > SAMPLE_CAP:  # quantiles: keeps the shape, drops the count
            index = np.rint(np.linspace(0, len(kept_values) - 1, SAMPLE_CAP)).astype(int)
            kept_values = kept_values[index]
        cases.append(
            {
                "probe": probe,
                "metric": metric,
                "better": rows["better"].iloc[0],
                "key": json.loads(str(key)),
                "case": rows["case"].iloc[0],
                "medians": [_round(v) for v in rows["value"]],
                "throttled": [bool(v) for v in rows["throttled"]],
                "nwrong": [None if math.isnan(v) else int(v) for v in rows["nwrong"]],
                "samples": [_round(v) for v in kept_values],
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_utc": utc_now(),
        "fingerprint": side.fingerprint,
        "runs": side.runs,
        "cases": cases,
    }


def write_baseline(runs: list[Run], path: Path) -> dict[str, Any]:
    """Write the baseline file of `runs` (atomically); its content."""
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder", "give a file name, e.g. base.json")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: {path.parent} is not a folder")
    data = baseline_json(side_of_runs(runs))
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return data


def read_baseline(path: Path) -> Side:
    """A baseline file as a side; a UsageError naming what is wrong with the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read baseline {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path} is not a gpuprof baseline file", "make one: gpuprof baseline")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise UsageError(
            f"baseline {path} has format version {version!r}; this gpuprof reads up to {VERSION}",
            "upgrade gpuprof, or make the baseline again with this one",
        )
    try:
        values, samples = [], []
        for case in data["cases"]:
            key = json.dumps(case["key"], sort_keys=True)
            ident = {"probe": case["probe"], "metric": case["metric"], "key": key}
            for run, median in enumerate(case["medians"]):
                values.append(
                    {
                        **ident,
                        "better": case["better"],
                        "case": case["case"],
                        "run": run,
                        "value": float(median),
                        "throttled": bool(case["throttled"][run]),
                        "nwrong": np.nan
                        if case["nwrong"][run] is None
                        else float(case["nwrong"][run]),
                    }
                )
            samples += [{**ident, "value": float(v)} for v in case["samples"]]
        side = Side(
            label=path.name,
            measured=Measured(
                values=pd.DataFrame(values, columns=VALUE_COLUMNS),
                samples=pd.DataFrame(samples, columns=SAMPLE_COLUMNS),
            ),
            fingerprint=dict(data["fingerprint"]),
            runs=list(data.get("runs") or []),
        )
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise UsageError(f"baseline {path} is damaged: {type(exc).__name__}: {exc}") from None
    return side


def open_side(spec: str, out: str | Path = DEFAULT_OUT) -> Side:
    """A baseline file, or a run (path, 'latest' or number inside `out`)."""
    path = Path(spec)
    if path.is_file():
        return read_baseline(path)
    return side_of_runs([open_run(spec, out)])


@dataclass
class CheckResult:
    """A check's comparison table, the notes about the environment, and its exit code."""

    table: pd.DataFrame
    baseline: Side
    candidate: Side
    notes: list[str]
    exit_code: int
    summary: str


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
) -> CheckResult:
    """Compare; exit code 0 no regression, 1 regression or a failing case, 3 when the candidate
    run did not complete (2, a differing environment, is raised)."""
    notes = environment_check(baseline, candidate, allow_mismatch)
    if baseline.measured.num_runs == 1:
        notes.append(
            "the baseline holds one run: thresholds are the minimum effect alone (runs differ "
            "from each other more than their iterations do; make baselines from --repeats 3+)"
        )
    table = compare(
        baseline.measured, candidate.measured, min_effect=min_effect, alpha=alpha, effects=effects
    )
    code = 1 if len(table) and table["verdict"].isin(FAILING).any() else 0
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
    )


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


@dataclass(frozen=True)
class TrendPoint:
    """One run of a trend: its name, its medians, and the steps found at it."""

    name: str
    values: pd.DataFrame  # probe, metric, key, value (the run's medians), case, better
    steps: pd.DataFrame  # comparison rows against the runs before it: regressions, improvements


def run_sides(specs: tuple[str, ...], out: str | Path = DEFAULT_OUT) -> list[Side]:
    """The runs of a trend in order: RUN... as given, or one folder holding run folders
    (CI artifacts), ordered by their start time."""
    if len(specs) == 1 and Path(specs[0]).is_dir() and not (Path(specs[0]) / "run.json").exists():
        folders = [p for p in Path(specs[0]).iterdir() if (p / "run.json").is_file()]
        if not folders:
            raise UsageError(
                f"{specs[0]} holds no run folders", "give run folders or a folder of runs"
            )
        runs = sorted(
            (Run(p) for p in folders), key=lambda r: (str(r.info.get("created_utc")), r.path.name)
        )
    else:
        runs = [open_run(spec, out) for spec in specs]
    return [side_of_runs([run], label=run.path.name) for run in runs]


def trend_points(
    sides: list[Side],
    baseline: Side | None,
    *,
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    window: int = 5,
) -> list[TrendPoint]:
    """Where a change came in. With a baseline, each run is judged against it (the baseline's
    runs give the noise) and a step is a case whose verdict turns regression or improvement
    from what it was at the run before. Without one, each run is judged against the runs
    before it since the last step (at least 2, at most `window`: one run says nothing about
    the noise), and a regression or improvement there is a step; the next runs compare with
    the new level."""
    points = []
    start = 0
    previous: dict[tuple[str, str, str], str] = {}
    for i, side in enumerate(sides):
        values = (
            side.measured.values.groupby(["probe", "metric", "key"], sort=False)
            .agg(value=("value", "median"), case=("case", "first"), better=("better", "first"))
            .reset_index()
        )
        steps = pd.DataFrame()
        if baseline is not None:
            table = compare(baseline.measured, side.measured, min_effect=min_effect, alpha=alpha)
            now = {
                (r["probe"], r["metric"], r["key"]): r["verdict"] for r in table.to_dict("records")
            }
            moved = [
                now[k] in ("regression", "improvement") and previous.get(k) != now[k]
                for k in zip(table["probe"], table["metric"], table["key"], strict=True)
            ]
            steps = table[moved]
            previous = now
        else:
            before = sides[max(start, i - window) : i]
            if len(before) >= 2:
                reference = Measured.combine([s.measured for s in before])
                table = compare(reference, side.measured, min_effect=min_effect, alpha=alpha)
                steps = table[table["verdict"].isin(["regression", "improvement"])]
                if len(steps):
                    start = i
        points.append(TrendPoint(name=side.label, values=values, steps=steps))
    return points
