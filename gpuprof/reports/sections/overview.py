"""The overview at the top of the report: where a training step's time goes on this cluster,
per scope, in one figure: compute, exposed communication, pipeline bubble / wait, and the rest,
from the DDP probe's breakdown (its first variant at every world size) and the pipeline
probe's measured bubble (each schedule at its largest micro-batch count)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof import registry
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import overview_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, embed

NOTE = (
    "DDP (its first variant at each world size): compute time = forward + backward compute + "
    "optimizer, exposed communication = the all_reduce time not hidden by the backward, other "
    "= the rest of the step (DDP's own work, Python), by DDP's logging data. Pipeline (each "
    "schedule at its largest micro-batch count): compute time = busy time, bubble / wait = the "
    "rest of the step, mean over stages. Details in the sections below."
)


def overview_rows(analyzed: Analyzed) -> pd.DataFrame:
    """One row per training case of every probe whose spec names an overview: its label and
    the % of its step in each part (`registry.OVERVIEW_PARTS`; "other" is the rest)."""
    frames: list[pd.DataFrame] = [
        registry.load(spec.overview)(analyzed.summary(spec.name))
        for spec in registry.specs().values()
        if spec.overview is not None and analyzed.has(*spec.table_names)
    ]
    rows: pd.DataFrame = pd.concat(
        [f for f in frames if not f.empty] or [pd.DataFrame()], ignore_index=True
    )
    if rows.empty:
        return rows
    parts = [p for p in registry.OVERVIEW_PARTS if p != "other"]
    rows = rows.reindex(columns=["label", *parts]).fillna(dict.fromkeys(parts, 0.0))
    rows[parts] = rows[parts].clip(lower=0.0)
    rows["other"] = (100 - rows[parts].sum(axis=1)).clip(lower=0.0)
    return rows


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The overview, or nothing when no training case was measured."""
    rows = overview_rows(analyzed)
    if rows.empty:
        return []
    blocks: list[Block] = [
        Note(text=NOTE),
        Figures(html=[embed(overview_figure(rows))], grid=False),
    ]
    return [Section(title="Overview: where the time goes", anchor="overview", blocks=blocks)]
