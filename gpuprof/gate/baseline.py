"""Baseline files: a measured set of one or more complete runs of the same plan, stored as
JSON small enough to commit: per case and metric each run's median and a capped sample of
iterations, the direction of each metric, and the environment fingerprint. A side of `check`,
`compare` or `trend` is a baseline file or a run folder (`open_side`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.analysis.measured import SAMPLE_COLUMNS, SAMPLE_SLOTS, VALUE_COLUMNS, Measured
from gpuprof.errors import UsageError
from gpuprof.gate.sides import MUST_MATCH, Side, differences, side_of_runs, version_notes
from gpuprof.runs.store import DEFAULT_OUT, Run, open_run, utc_now, write_json_atomic

FORMAT = "gpuprof-baseline"
VERSION = 1
SAMPLE_CAP = 60  # iteration samples kept per case and metric in a baseline file


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
        case = {
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
        canaries = rows["canary"].to_numpy(float) if "canary" in rows else np.array([])
        if np.isfinite(canaries).any():  # per run, as the medians (a file without: none)
            case["canaries"] = [_round(v) if math.isfinite(v) else None for v in canaries]
        cases.append(case)
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_utc": utc_now(),
        "fingerprint": side.fingerprint,
        "runs": side.runs,
        "cases": cases,
    }


def write_baseline(runs: list[Run], path: Path, extend: Path | None = None) -> dict[str, Any]:
    """Write the baseline file of `runs` (atomically, creating its folder), or of the runs of
    the baseline file `extend` and `runs` (`extended`); its content."""
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder", "give a file name, e.g. base.json")
    seen: dict[Path, str] = {}
    for run in runs:
        where = run.path.resolve()
        if where in seen:
            raise UsageError(
                f"run {run.path} is given twice ({seen[where]})",
                "give each run once: a baseline's spread comes from different runs",
            )
        seen[where] = str(run.path)
    side = side_of_runs(runs)
    if extend is not None:
        if not extend.is_file():
            raise UsageError(
                f"no baseline file {extend}", "make one: gpuprof baseline RUN... -o FILE"
            )
        side = extended(read_baseline(extend), side)
    data = baseline_json(side)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return data


def extended(old: Side, new: Side) -> Side:
    """A baseline's runs and more runs of the same plan and software, as one side: how a
    health baseline gathers runs of several windows (a nightly job adds its runs), so that
    its spread holds the machine's drift between hours and days, not only between the runs
    of one window. The file keeps a capped sample of iterations per case, not each run's:
    they are stretched back to as many values as its runs had (SAMPLE_SLOTS per run,
    interpolated between its quantiles) before the new runs' samples join them, so that
    every run weighs alike."""
    diff = differences(old.fingerprint, new.fingerprint, MUST_MATCH) + version_notes(
        old.fingerprint, new.fingerprint
    )
    if diff:
        raise UsageError(
            f"the runs differ from baseline {old.label}: {'; '.join(diff)}",
            "extend a baseline with runs of its plan and software; else make a new baseline",
        )
    known = {(r.get("run_id"), r.get("created_utc")) for r in old.runs}
    again = [r for r in new.runs if (r.get("run_id"), r.get("created_utc")) in known]
    if again:
        raise UsageError(
            f"run {again[0]['path']} is already in baseline {old.label}",
            "extend a baseline with runs it does not hold",
        )
    keys = ["probe", "metric", "key"]
    k = old.measured.num_runs
    stretched = []
    for ident, part in old.measured.samples.groupby(keys, sort=False):
        kept = np.sort(part["value"].to_numpy(float))
        count = max(len(kept), k * SAMPLE_SLOTS)
        where = np.linspace(0, 1, count)
        values = np.interp(where, np.linspace(0, 1, len(kept)), kept) if len(kept) > 1 else kept
        stretched.append(pd.DataFrame(dict(zip(keys, ident, strict=True)) | {"value": values}))
    values = new.measured.values.assign(run=new.measured.values["run"] + k)
    return Side(
        label=old.label,
        measured=Measured(
            values=pd.concat([old.measured.values, values], ignore_index=True),
            samples=pd.concat([*stretched, new.measured.samples], ignore_index=True)[
                SAMPLE_COLUMNS
            ],
        ),
        fingerprint=old.fingerprint,
        runs=[*old.runs, *new.runs],
    )


def _with_key_defaults(case: dict[str, Any]) -> dict[str, Any]:
    """A baseline case's key with the key columns added since it was made (`Metric.key_defaults`:
    the value its cases had), so it still meets the same case of a newer run."""
    spec = registry.specs().get(case["probe"])
    metric = next((m for m in spec.metrics if m.column == case["metric"]), None) if spec else None
    return {**dict(metric.key_defaults if metric else ()), **case["key"]}


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
            key = json.dumps(_with_key_defaults(case), sort_keys=True)
            ident = {"probe": case["probe"], "metric": case["metric"], "key": key}
            canaries = case.get("canaries") or [None] * len(case["medians"])
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
                        "canary": np.nan if canaries[run] is None else float(canaries[run]),
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
    if path.suffix == ".json":
        raise UsageError(f"no baseline file {spec}", "make one: gpuprof baseline RUN... -o FILE")
    return side_of_runs([open_run(spec, out)])
