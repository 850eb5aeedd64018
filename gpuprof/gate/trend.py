"""`gpuprof trend`: where a change came in, over runs in order (CI artifacts of successive
commits), against a baseline or against the runs before each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
