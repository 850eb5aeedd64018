"""The scaling section: what this run's fits predict at other world sizes (DDP efficiency and
all_reduce bus bandwidth, with bands), the measured points beside them, and the alpha-beta
table. Every number here is a prediction except the measured points."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.ddp import scaling
from gpuprof.analysis.summary import Analyzed
from gpuprof.predict.predictions import COLLECTIVES, DDP, report_curves
from gpuprof.predict.text import fit_rows
from gpuprof.reports.figures_scaling import predicted_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, Table, embed
from gpuprof.units import format_size

METHOD = (
    "scaling: per op, dtype, scope and world size, time(S) = alpha + S / beta fitted to the "
    "slowest group's median times (relative residuals, soft-L1; two regimes where a switch "
    "between sizes halves the worst residual); per-hop latency and per-link bandwidth from "
    "the op's ring; DDP step = its compute + the buckets' all_reduces the backward does not "
    "hide (calibrated at the run's largest world); predictions, marked as such, with a band of "
    "the fits' worst relative residual (`gpuprof predict` for other shapes and what-ifs)."
)


def _crossings(ddp: pd.DataFrame) -> str:
    ordered = ddp.sort_values("world_size")
    parts = []
    for mark in (0.8, 0.5):
        below = ordered[ordered["efficiency"] < mark]
        parts.append(
            f"below {mark:.0%} from {int(below['world_size'].iloc[0])} ranks"
            if not below.empty
            else f"above {mark:.0%} up to {int(ordered['world_size'].max())} ranks"
        )
    return "Predicted DDP efficiency: " + "; ".join(parts) + "."


def _ddp_figure(analyzed: Analyzed, ddp: pd.DataFrame) -> str:
    curve = ddp.assign(
        eff_low=ddp["efficiency"] * ddp["step_ms"] / ddp["step_high_ms"],
        eff_high=ddp["efficiency"] * ddp["step_ms"] / ddp["step_low_ms"],
    )
    rows = scaling(analyzed.summary(DDP))
    measured = pd.DataFrame(
        {
            "world_size": rows["world_size"],
            "efficiency": rows["efficiency"],
            "label": rows["scope"] + " n=" + rows["world_size"].astype(str),
        }
    )
    return embed(
        predicted_figure(
            curve,
            measured,
            y="efficiency",
            low="eff_low",
            high="eff_high",
            title="DDP weak-scaling efficiency: predicted and measured",
            ytitle="samples/s(n) / (n x samples/s(1))",
            marks=(0.8, 0.5),
        )
    )


def _collective_figure(analyzed: Analyzed, coll: pd.DataFrame, op: str) -> str | None:
    mine = coll[coll["op"] == op]
    if mine.empty:
        return None
    size = int(mine["size_bytes"].max())
    curve = mine[mine["size_bytes"] == size].sort_values("world_size")
    summary = analyzed.summary(COLLECTIVES)
    points = summary[(summary["op"] == op) & (summary["size_bytes"] == size)]
    measured = pd.DataFrame(columns=["scope", "world_size", "busbw_gbps"])
    if not points.empty:
        measured = points.groupby(["scope", "world_size"], as_index=False).agg(
            busbw_gbps=("busbw_gbps", "min")
        )
    measured["label"] = measured["scope"] + " n=" + measured["world_size"].astype(str)
    return embed(
        predicted_figure(
            curve,
            measured,
            y="busbw_gbps",
            low="busbw_low",
            high="busbw_high",
            title=f"{op} {format_size(size)} bus bandwidth: predicted and measured",
            ytitle="busbw GB/s (log)",
            log_y=True,
        )
    )


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The scaling section, or nothing when the run has no collective to fit."""
    curves = analyzed.cached("scaling", lambda: report_curves(analyzed))
    if not curves:
        return []
    ddp = pd.concat([c.ddp for c in curves if not c.ddp.empty] or [pd.DataFrame()])
    coll = pd.concat([c.collectives for c in curves if not c.collectives.empty] or [pd.DataFrame()])
    figures = []
    if not ddp.empty and analyzed.has(DDP):
        ddp = ddp.drop_duplicates("world_size").sort_values("world_size")
        figures.append(_ddp_figure(analyzed, ddp))
    if not coll.empty:
        coll = coll.drop_duplicates(["op", "world_size", "size_bytes"])
        for op in ("all_reduce", "all_gather"):
            found = _collective_figure(analyzed, coll, op)
            if found:
                figures.append(found)
    fits = fit_rows(curves[0].fits)
    one_node = int(analyzed.info.get("num_nodes") or 1) == 1
    over = "ranks in one node (this run had one node)" if one_node else "nodes"
    text = (
        f"Predicted over {over} from this run's own fits; the red diamonds are measured. "
        + (_crossings(ddp) + " " if not ddp.empty else "")
        + " ".join(curves[0].assumptions[:1])
    )
    blocks: list[Block] = [Note(text=text)]
    if figures:
        blocks.append(Figures(html=figures))
    blocks.append(
        Table(
            title="Alpha-beta fits",
            header=fits[0],
            rows=fits[1:],
            id="scaling-fits",
            left=(1, 2, 3),
            scroll=False,
        )
    )
    notes = sorted({n for c in curves for n in c.notes})
    if notes:
        blocks.append(Note(text="Not predicted: " + "; ".join(notes)))
    return [Section(title="Scaling: predicted", anchor="scaling", blocks=blocks, method=[METHOD])]
