"""The overview at the top of the report: where a training step's time goes on this cluster,
per scope, in one figure: compute, exposed communication, pipeline bubble / wait, and the rest,
from the DDP probe's breakdown (its first variant at every world size) and the pipeline
probe's measured bubble (each schedule at its largest micro-batch count)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.ddp import scaling
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import overview_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, embed
from gpuprof.specs.ddp import SPEC as DDP
from gpuprof.specs.pipeline import SPEC as PIPELINE

NOTE = (
    "DDP (its first variant at each world size): compute time = forward + backward compute + "
    "optimizer, exposed communication = the all_reduce time not hidden by the backward, other "
    "= the rest of the step (DDP's own work, Python), by DDP's logging data. Pipeline (each "
    "schedule at its largest micro-batch count): compute time = busy time, bubble / wait = the "
    "rest of the step, mean over stages. Details in the sections below."
)


def overview_rows(analyzed: Analyzed) -> pd.DataFrame:
    """One row per training case: label and the % of its step in each part."""
    rows: list[dict[str, Any]] = []
    if analyzed.has(*DDP.table_names):
        for r in scaling(analyzed.summary(DDP.name)).to_dict("records"):
            step = float(r["rank_step_us"])
            compute = float(r["forward_us"] + r["backward_compute_us"] + r["optimizer_us"])
            exposed = float(r["exposed_comm_us"]) if pd.notna(r["exposed_comm_us"]) else 0.0
            if step <= 0:
                continue
            parts = [100 * compute / step, 100 * exposed / step, 0.0]
            rows.append({"label": f"DDP {r['scope']} n={r['world_size']}", **_parts(parts)})
    if analyzed.has(*PIPELINE.table_names):
        summary = analyzed.summary(PIPELINE.name)
        for schedule, by in summary.groupby("schedule", sort=False):
            last = by.sort_values("m").iloc[-1]
            bubble = float(last["bubble_pct"])
            label = f"pipeline {schedule} p={last['p']} m={last['m']}"
            rows.append({"label": label, **_parts([100 - bubble, 0.0, bubble])})
    return pd.DataFrame(rows)


def _parts(values: list[float]) -> dict[str, float]:
    compute, exposed, bubble = (max(0.0, v) for v in values)
    other = max(0.0, 100 - compute - exposed - bubble)
    return {
        "compute time": compute,
        "exposed communication": exposed,
        "bubble / wait": bubble,
        "other": other,
    }


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
