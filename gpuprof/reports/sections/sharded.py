"""The sharded data-parallel section: memory per rank against step time (a point per strategy
and world size), the step broken down per strategy, bytes and memory against theory."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import _LAYOUT, STEP_TICK, scaling_figure, stacked_figure
from gpuprof.reports.sections import Figures, Note, Section, Table, embed, summary_table

METHOD = (
    "sharded: every strategy on the same synthetic transformer and batch per rank. Per "
    "round: the strategy's step timed by phase (forward, backward, optimizer, each with "
    "the communication it waits for), the same step on a communication-free twin (the plain "
    "model; its optimizer over what this rank's optimizer holds), and the step's collectives "
    "replayed alone. Exposed communication = the strategy's phases - the twin's (it also "
    "holds the strategy's own overhead, which the one-rank case shows alone); hidden = 1 - "
    "exposed / the replay. Bytes sent: every collective of one step, recorded from "
    "torch.distributed's calls (DDP's buckets by a comm hook), counted as a ring sends them. "
    "Memory: the storages of the parameters, gradients and optimizer state a rank holds "
    "after a step (on GPU also the peak allocated during the step)."
)
PARTS = (
    ("twin_forward_us", "forward compute", "#4c78a8"),
    ("twin_backward_us", "backward compute", "#72b7b2"),
    ("twin_optimizer_us", "optimizer compute", "#b279a2"),
    ("exposed_comm_us", "exposed communication + overhead", "#e45756"),
)


def memory_figure(summary: pd.DataFrame) -> go.Figure:
    """Memory per rank against step time: a point per strategy and world size."""
    fig = go.Figure()
    for strategy, rows in summary.groupby("case_id", sort=False):
        fig.add_trace(
            go.Scatter(
                x=rows["step_us"] / 1e3,
                y=rows["memory_bytes"] / 2**20,
                mode="markers+text",
                marker={"size": 11},
                name=str(strategy),
                text=[f"n={n}" for n in rows["world_size"]],
                textposition="top center",
                hovertemplate="%{x:.1f} ms, %{y:.1f} MiB<extra>" + str(strategy) + "</extra>",
            )
        )
    fig.update_layout(
        title="Memory per rank against step time (lower left is better)",
        xaxis={"title": "step, ms (slowest rank)"},
        yaxis={"title": "MiB per rank (parameters, gradients, optimizer state)"},
        height=420,
        **_LAYOUT,
    )
    return fig


def _fmt(value: Any, form: str) -> str:
    return "-" if value is None or pd.isna(value) else format(value, form)


def theory_table(summary: pd.DataFrame) -> Table:
    """Per case: bytes sent and memory held per rank, measured against theory."""
    rows = [
        [
            r["case_id"],
            str(r["world_size"]),
            r["scope"],
            _fmt(r["sent_bytes"] / 1e6, ".2f"),
            _fmt(r["theory_sent_bytes"] / 1e6, ".2f"),
            _fmt(r["sent_ratio"], ".3f"),
            _fmt(r["memory_bytes"] / 2**20, ".1f"),
            _fmt(r["theory_memory_bytes"] / 2**20, ".1f"),
            _fmt(r["memory_ratio"], ".3f"),
            _fmt(r.get("peak_bytes", float("nan")) / 2**20, ".0f"),
        ]
        for r in summary.to_dict("records")
    ]
    header = ["strategy", "n", "scope", "sent MB", "theory MB", "ratio", "memory MiB"]
    header += ["theory MiB", "ratio", "peak MiB (GPU)"]
    return Table(
        title="Bytes sent and memory per rank against theory",
        header=header,
        rows=rows,
        id="sharded-theory",
        left=(1, 3),
        scroll=False,
    )


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The sharded section, or nothing if no case was measured."""
    table = "sharded"
    summary = analyzed.measured(table)
    if summary is None:
        return []
    breakdown = stacked_figure(
        summary,
        PARTS,
        ("rank_step_us", "step (measured)", STEP_TICK),
        "Step per strategy: compute (twin) and what sharding adds",
    )
    figures = [embed(memory_figure(summary)), embed(breakdown)]
    if (summary["scope"] == "single").any() and summary["world_size"].nunique() > 1:
        figures.append(embed(scaling_figure(summary[summary["efficiency"].notna()])))
    first = summary.iloc[0]
    note = (
        f"{first['num_params'] / 1e6:.3g}M-parameter synthetic transformer "
        f"({first['layers']} blocks, hidden {first['hidden']}), {first['batch']} x "
        f"{first['seq']} tokens per rank. Theory: bytes a rank sends per step (ring counting) "
        "DDP 2(n-1)/n x 4P, ZeRO-1 3(n-1)/n x 4P, FSDP 3(n-1)/n x 4P resharding after "
        "forward, 2(n-1)/n x 4P not, bf16 FSDP (n-1)/n x 8P; memory held between steps "
        "DDP 16P, ZeRO-1 8P + 8P/n, FSDP 16P/n bytes (P parameters, AdamW)."
    )
    return [
        Section(
            title="Sharded data parallel (DDP, ZeRO-1, FSDP): memory against step time",
            anchor="sharded",
            blocks=[
                Note(text=note),
                Figures(html=figures),
                theory_table(summary),
                summary_table(
                    summary, table, title="Sharded summary", id="sharded-summary", left=(1, 2, 3, 4)
                ),
            ],
            method=[METHOD],
        )
    ]
