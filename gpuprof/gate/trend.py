"""`gpuprof trend`: where a change came in, over runs in order (CI artifacts of successive
commits), against a baseline or against the runs before each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.analysis.measured import Measured
from gpuprof.errors import UsageError
from gpuprof.gate.sides import Side, side_of_runs
from gpuprof.gate.stats import ALPHA, MIN_EFFECT, compare
from gpuprof.runs.store import DEFAULT_OUT, Run, open_run


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
    from what it was at the run before. Without one, each case of a run is judged against the
    runs before it since that case's last step (at least 2, at most `window`: one run says
    nothing about the noise), and a regression or improvement there is a step; the next runs
    compare with the new level. Right after a case's step (one run at the new level) it is
    judged against the window across the step, and a step there counts only where it also
    moved beyond the minimum effect from the step's run the same way: a false step on a noisy
    runner then hides neither a real one at the next run nor another case's."""
    points = []
    starts: dict[tuple[str, str, str], int] = {}  # each case-metric's last step
    levels: dict[tuple[str, str, str], float] = {}  # its median at that step
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
            steps = _steps_since(sides, i, starts, levels, window, min_effect, alpha)
            for row in steps.to_dict("records"):
                key = (row["probe"], row["metric"], row["key"])
                starts[key], levels[key] = i, float(row["cand"])
        points.append(TrendPoint(name=side.label, values=values, steps=steps))
    return points


def _steps_since(
    sides: list[Side],
    i: int,
    starts: dict[tuple[str, str, str], int],
    levels: dict[tuple[str, str, str], float],
    window: int,
    min_effect: float,
    alpha: float,
) -> pd.DataFrame:
    """Run i's steps without a baseline: each case-metric against the runs since its own last
    step (see trend_points)."""
    index = ["probe", "metric", "key"]
    found = []
    for start in sorted({0, *starts.values()}):
        before = sides[max(start, i - window) : i]
        across = len(before) < 2  # one run since the step: judge across it
        if across:
            before = sides[max(0, i - window) : i]
        if len(before) < 2:
            continue
        reference = Measured.combine([s.measured for s in before])
        table = compare(reference, sides[i].measured, min_effect=min_effect, alpha=alpha)
        if table.empty:
            continue
        keys = list(zip(*(table[c] for c in index), strict=True))
        mine = [starts.get(k, 0) == start for k in keys]
        moved = table["verdict"].isin(["regression", "improvement"]).to_numpy() & mine
        if across:
            rows = table.to_dict("records")
            near = [_beyond(r, levels.get(k), min_effect) for r, k in zip(rows, keys, strict=True)]
            moved &= near
        found.append(table[moved])
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def _beyond(row: Mapping[Any, Any], level: float | None, min_effect: float) -> bool:
    """Whether the run moved beyond the minimum effect from the case's level at its last step,
    the way its verdict says (no level: a case that has not stepped yet)."""
    if not level:
        return True
    change = float(row["cand"]) / level - 1
    worse = change if row["better"] == "lower" else -change
    return worse >= min_effect if row["verdict"] == "regression" else -worse >= min_effect
