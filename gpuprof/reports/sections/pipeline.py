"""The pipeline section: bubble against micro-batches with theory, a Gantt chart per schedule
(its median step), the summary, the stages, and what was not measured."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.advice.pipeline import stages as stage_rows
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import bubble_figure, gantt_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, Table, embed, summary_table

METHOD = (
    "pipeline: every forward, backward and weight-gradient call of each stage and every "
    "send/recv wait timed on each rank (the compute stream synchronised around each on "
    "GPU), shifted to group rank 0's clock by the fastest of 10 ping-pongs (error <= half "
    "its round trip, column clock_err_us); bubble per rank = 1 - busy / step, step from the "
    "first forward to the last compute of any rank; theory from the schedules' formulas "
    "(docs/methodology.md); simulated = each rank's measured order replayed with the median "
    "stage times and no communication."
)
NOTE = (
    "Bubble = 1 - busy / step per rank (mean over ranks; worst% is the worst rank), against "
    "the formula of each schedule with the measured T_F, T_B, T_W (GPipe, 1F1B: (p-1)/(m+p-1);"
    " Interleaved1F1B: x/(1+x) with x = (p-1)/(v m); ZBV: ~0 when T_F = T_B = T_W) and the "
    "schedule replayed with the measured stage times and no communication (sim%). The Gantt "
    "charts show each schedule's median step: gaps are bubbles, grey bars waits for a send or "
    "receive."
)


def _gantts(summary: pd.DataFrame, timeline: pd.DataFrame) -> list[str]:
    figures = []
    for schedule, rows in summary.groupby("schedule", sort=False):
        rows = rows.sort_values("m")
        row = rows.iloc[len(rows) // 2]
        step = timeline[
            (timeline["case_id"] == row["case_id"])
            & (timeline["iteration"] == row["median_iteration"])
        ]
        theory = f"{row['theory_pct']:.1f}%)" if pd.notna(row["theory_pct"]) else "n/a)"
        title = (
            f"{schedule}: p={row['p']}, m={row['m']}, v={row['v']} (median step; measured "
            f"bubble {row['bubble_pct']:.1f}%, theory " + theory
        )
        figures.append(embed(gantt_figure(step, title)))
    return figures


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The pipeline section, or nothing if no schedule was measured."""
    if not analyzed.has("pipeline", "pipeline_timeline"):
        return []
    summary = analyzed.summary("pipeline")
    if summary.empty:
        return []
    timeline = analyzed.run.table("pipeline_timeline")
    stages = stage_rows(analyzed)
    largest_m = set(summary.sort_values("m").groupby("schedule")["case_id"].last())
    stage_table = Table(
        title="Stages",
        id="pipeline-stages",
        header=["case", "rank", "layers", "ms per micro-batch", "% of mean", "balanced layers"],
        rows=[
            [
                r["case_id"],
                str(r["rank"]),
                str(r["layers"]),
                f"{r['compute_per_micro_batch'] / 1e3:.2f}",
                f"{r['pct_of_mean']:.0f}",
                str(r["balanced_layers"]),
            ]
            for r in stages.to_dict("records")
            if r["case_id"] in largest_m
        ],
        left=(1,),
    )
    blocks: list[Block] = [
        Note(text=NOTE),
        Figures(html=[embed(bubble_figure(summary)), *_gantts(summary, timeline)]),
        summary_table(
            summary, "pipeline", title="Pipeline summary", id="pipeline-summary", left=(1,)
        ),
        stage_table,
    ]
    skipped = [s for s in analyzed.info.get("skipped", []) if s.get("probe") == "pipeline"]
    if skipped:
        text = "; ".join(f"{s['case_id']} ({s['reason']})" for s in skipped)
        blocks.append(Note(text=f"Not measured: {text}"))
    return [
        Section(
            title="Pipeline parallel: bubbles against theory",
            anchor="pipeline",
            blocks=blocks,
            method=[METHOD],
        )
    ]
