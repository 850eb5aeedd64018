"""The DDP section: where a training step goes (breakdown, overlap by both methods, weak
scaling), the variants against the first, and the summary table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.ddp import scaling, variants
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import ddp_breakdown_figure, ddp_overlap_figure, scaling_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, Table, embed, summary_table

METHOD = (
    "ddp: per step, DDP's own logging data (sample rate 1: forward = forward start to "
    "first gradient, backward compute = first to last gradient, communication = first "
    "bucket launched to last done, overlap = the part of it during backward compute, "
    "exposed = communication - overlap) and A/B runs alternated with it (a twin model "
    "with a no-op comm hook: step - its step = what the all_reduce costs; the same step "
    "under no_sync: compute only; the same buckets' all_reduces alone); medians over "
    "every rank's steps. Weak scaling keeps the batch per rank."
)
NOTE = (
    "Bars: forward, backward compute and exposed communication from DDP's logging data, "
    "optimizer from its own timer; the black tick is the measured step (the gap is zero_grad, "
    "bucket copies and Python). Overlap: the share of communication that ran during backward "
    "compute, by DDP's logging data and by A/B runs (1 - (step - step with a no-op comm hook) "
    "/ the buckets' all_reduces alone); the A/B figure also pays for compute slowed beside "
    "communication. Shown only where communication is at least 1% of the step."
)


def _gains(summary: pd.DataFrame) -> Table | None:
    best = variants(summary)
    if len(best) < 2:
        return None
    rows = [
        [
            r["case_id"],
            f"{r['samples_per_s']:.4g}",
            f"{r['gain_pct']:+.1f}%",
            f"{r['step_us'] / 1e3:.2f}",  # the step samples/s is counted on
            f"{r['exposed_pct']:.1f}" if pd.notna(r["exposed_pct"]) else "-",
        ]
        for r in best.to_dict("records")
    ]
    header = ["variant", "samples/s", "gain", "step ms (slowest rank)", "exposed comm %"]
    return Table(
        title="Variants against the first (global scope)",
        header=header,
        rows=rows,
        id="ddp-variants",
        left=(1,),
        scroll=False,
    )


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The DDP section, or nothing if no DDP case was measured."""
    if not analyzed.has("ddp"):
        return []
    summary = analyzed.summary("ddp")
    if summary.empty:
        return []
    figures = [embed(ddp_breakdown_figure(summary))]
    if summary["overlap_ab_pct"].notna().any() or summary["overlap_log_pct"].notna().any():
        figures.append(embed(ddp_overlap_figure(summary)))
    rows = scaling(summary)
    if len(rows) > 1:
        figures.append(embed(scaling_figure(rows)))
    first = summary.iloc[0]
    model = (
        f"{first['num_params'] / 1e6:.3g}M-parameter synthetic transformer "
        f"({first['layers']} blocks, hidden {first['hidden']}), {first['batch']} x "
        f"{first['seq']} tokens per rank per micro-batch"
    )
    gains = _gains(summary)
    table = summary_table(summary, "ddp", title="DDP summary", id="ddp-summary", left=(1, 2, 3, 4))
    blocks: list[Block] = [Note(text=f"{model}. {NOTE}"), Figures(html=figures)]
    return [
        Section(
            title="Data parallel (DDP): where a training step goes",
            anchor="ddp",
            blocks=[*blocks, *([gains] if gains else []), table],
            method=[METHOD],
        )
    ]
