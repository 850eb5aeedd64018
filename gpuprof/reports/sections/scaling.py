"""The scaling section: what this run's fits predict at other world sizes (DDP efficiency and
all_reduce bus bandwidth, with bands), the measured points beside them, and the alpha-beta
table. Every number here is a prediction except the measured points."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from gpuprof.analysis.ddp import scaling
from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.systems import PRESETS
from gpuprof.predict.calibrations import run_system
from gpuprof.predict.curves import report_curves
from gpuprof.predict.nccl import collective
from gpuprof.predict.predictions import COLLECTIVES, DDP
from gpuprof.predict.published import BOUND, LARGE, checked, published_time, scale_rows
from gpuprof.predict.text import fit_rows
from gpuprof.predict.whatifs import same_hardware
from gpuprof.reports.figures_scaling import predicted_figure, published_figure
from gpuprof.reports.sections import Block, Figures, Note, Section, Table, embed
from gpuprof.units import bus_factor, format_size

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
    calibrated = bool(curve["source"].str.contains(r" \+ |^measured", regex=True).any())
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
            published=_same_system(analyzed, op, size),
            band=(
                "band (held-out error)"
                if calibrated
                else "band (model error)"
                if curve["source"].str.startswith("preset").all()
                else "band (fit residuals)"
            ),
        )
    )


def _same_system(analyzed: Analyzed, op: str, size: int) -> pd.DataFrame:
    """Published results of other clusters of the system the run says it was measured on
    (`gpuprof import ... --hardware`), at this op and size: world_size, busbw_gbps, label."""
    columns = ["world_size", "busbw_gbps", "label"]
    system = run_system(analyzed.info)
    if system is None:
        return pd.DataFrame(columns=columns)
    points = []
    for r in scale_rows():
        if (r["preset"], r["op"], int(r["size_bytes"]), r["algorithm"]) != (
            system.name,
            op,
            size,
            "",
        ):
            continue
        ranks = int(r["nodes"]) * int(r["gpus_per_node"])
        points.append(
            {
                "world_size": ranks,
                "busbw_gbps": bus_factor(op, ranks) * size / published_time(r) / 1e3,
                "label": f"{r['system'][:60]}, {r['nodes']} nodes; {r['source']}",
            }
        )
    return pd.DataFrame(points, columns=columns)


SHOWN = ("dgx-a100", "dgx-h100", "aws-p5", "gb200-nvl72")  # drawn first when no preset matches


def published_comparison(analyzed: Analyzed) -> tuple[str, go.Figure] | None:
    """NCCL's model on every preset with published bandwidth-bound all_reduce results, the
    results on it, and how many of all the published rows it predicts within the bound: the
    note and the figure (None without such rows)."""
    every = checked()
    large = [
        c
        for c in every
        if c.row["op"] == "all_reduce"
        and c.row["metric"] == "busbw_gbps"
        and int(c.row["size_bytes"]) >= LARGE
    ]
    if not large:
        return None
    curves: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # preset -> its curve's name
    for preset in dict.fromkeys(c.row["preset"] for c in large):
        mine = [c for c in large if c.row["preset"] == preset]
        system, size = PRESETS[preset], max(int(c.row["size_bytes"]) for c in mine)
        most = max(int(c.row["ranks"]) for c in mine)
        gpus = sorted(
            {system.domain * 2**k for k in range(12) if system.domain * 2**k <= max(most, 16 * 8)}
            | {int(c.row["ranks"]) for c in mine}
        )
        name = names[preset] = f"{preset} ({format_size(size)})"
        curves += [
            {
                "system": name,
                "gpus": g,
                "busbw_gbps": collective(system, "all_reduce", g, size).busbw_gbps,
            }
            for g in gpus
        ]
        points += [
            {
                "system": name,
                "gpus": int(c.row["ranks"]),
                "busbw_gbps": c.published,
                "label": (
                    f"{c.row['system']}, {c.row['ranks']} GPUs, "
                    f"{format_size(int(c.row['size_bytes']))}: "
                    f"published {c.published:.0f} GB/s, predicted {c.predicted:.0f} "
                    f"({100 * c.error:+.0f}%, {c.choice}); NCCL {c.row['nccl_version'] or '?'}; "
                    f"{c.row['source']}"
                ),
            }
            for c in mine
        ]
    here = {n for p, n in names.items() if same_hardware(analyzed, PRESETS[p])}
    shown = here or {n for p, n in names.items() if p in SHOWN}
    fig = published_figure(pd.DataFrame(curves), pd.DataFrame(points), shown)

    def counted(part: list[Any]) -> str:
        within = sum(abs(c.error) <= BOUND for c in part)
        return f"{within} of {len(part)}"

    big = [c for c in every if int(c.row["size_bytes"]) >= LARGE]
    small = [c for c in every if int(c.row["size_bytes"]) < LARGE]
    text = (
        "What gpuprof predict --hardware PRESET computes, against published nccl-tests results "
        "of real clusters (diamonds; hover one for its source): lines are NCCL's own cost model on "
        "each preset at the largest published size (the legend shows the others). Of all "
        f"{len(every)} published rows (every op and preset, not only those drawn), within "
        f"{BOUND:.0%} of the published value: {counted(big)} rows of 256 MiB and more, "
        f"{counted(small)} smaller (latency-bound) rows."
    )
    return text, fig


def _published(analyzed: Analyzed) -> list[Block]:
    found = published_comparison(analyzed)
    return [Note(text=found[0]), Figures(html=[embed(found[1])])] if found else []


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
    source = "this run's own fits"
    calibrating = [n for c in curves for n in c.notes if " calibrated by " in n]
    if calibrating:
        source = "NCCL's model calibrated by what this run measured (" + calibrating[0] + ")"
    published = any("published (same system)" in f for f in figures)
    text = (
        f"Predicted over {over} from {source}; the red diamonds are measured"
        + (
            ", open green ones published on the same system (hover for the source: an "
            "imported log may be one of them). "
            if published
            else ". "
        )
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
    notes = sorted({n for c in curves for n in c.notes if "calibrate" not in n})  # said above
    if notes:
        blocks.append(Note(text="Not predicted: " + "; ".join(notes)))
    blocks += _published(analyzed)
    return [Section(title="Scaling: predicted", anchor="scaling", blocks=blocks, method=[METHOD])]
