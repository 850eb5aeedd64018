"""The concurrent-collectives section: each op's time alone and beside the other per pair and
size, against the fair share of one shared bottleneck."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.sections import Figures, Note, Section, embed, summary_table
from gpuprof.units import format_size

METHOD = (
    "concurrent: two process groups over every rank; each round times op A alone, op B "
    "alone, then both started together (after a barrier, the launch order alternating "
    "between rounds), each op's time from the common start to its own finish (CPU: when its "
    "future completes; GPU: an event on a stream waiting for it). Per round the slowest "
    "rank's time, then the mean over rounds (the fair share is linear in the times). Fair "
    "share: the slowdown if both ops shared one bottleneck fairly while both run, "
    "1 + min(A alone, B alone) / own alone; saved %: "
    "1 - (later finish together) / (A alone + B alone)."
)


def _figure(summary: Any) -> go.Figure:
    labels = [
        f"{row.op_a} beside {row.op_b}, {format_size(row.size_bytes)}"
        for row in summary.itertuples()
    ] + [
        f"{row.op_b} beside {row.op_a}, {format_size(row.size_bytes)}"
        for row in summary.itertuples()
    ]
    measured = list(summary["a_slowdown"]) + list(summary["b_slowdown"])
    fair = list(summary["a_fair_share"]) + list(summary["b_fair_share"])
    fig = go.Figure(
        [
            go.Bar(x=labels, y=measured, name="measured slowdown"),
            go.Bar(x=labels, y=fair, name="fair share of one bottleneck"),
        ]
    )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="no contention")
    fig.update_layout(
        title="Each collective beside the other, over its time alone",
        yaxis_title="time beside / time alone",
        barmode="group",
        template="plotly_white",
        height=400,
    )
    return fig


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The concurrent-collectives section, or nothing if no case was measured."""
    table = "concurrent"
    summary = analyzed.measured(table)
    if summary is None:
        return []
    first = summary.iloc[0]
    note = (
        f"Two process groups of all {first['world_size']} ranks ({first['num_nodes']} "
        "node(s)). A slowdown near the fair share says the two collectives share one link "
        "(or engine); near 1, they do not contend; above it, one starves the other."
    )
    return [
        Section(
            title="Collectives at the same time",
            anchor="concurrent",
            blocks=[
                Note(text=note),
                Figures(html=[embed(_figure(summary))]),
                summary_table(
                    summary, table, title="Concurrent summary", id="concurrent-summary", left=(1,)
                ),
            ],
            method=[METHOD],
        )
    ]
