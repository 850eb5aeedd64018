"""The report and the terminal text of `gpuprof trace`: where each rank's step goes (stacked
bars), every collective's wait and transfer, the straggler table, the steps and top ops."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from gpuprof.reports.html import TEMPLATES, health
from gpuprof.reports.sections import Figures, Note, Section, Table, embed
from gpuprof.text import fixed_width
from gpuprof.traces.job import TraceTables
from gpuprof.traces.phases import PHASES

PARTS = (
    ("compute_us", "computation", "#4C78A8"),
    ("exposed_comm_us", "exposed communication", "#E45756"),
    ("other_us", "other (copies; on a host, between ops)", "#B279A2"),
    ("input_us", "input (data loader)", "#F58518"),
    ("idle_us", "idle", "#BAB0AC"),
)
METHOD = [
    "Traces read with gpuprof's streaming reader: every event decoded and reduced as it is "
    "read (never the whole file in memory); ranks read in parallel.",
    "Window: every profiler step but the last one (its kernels may run past the recording's "
    "end); on a GPU, every kernel launched before the last step, as Holistic Trace Analysis "
    "counts it.",
    "Device timeline (GPU traces): span = first kernel start to last kernel end over every "
    "stream; compute / communication = the union of compute / NCCL kernels (classed by name); "
    "overlap = their intersection; exposed communication = communication - overlap; idle = "
    "span - the union of all device activity. The data loader's time is the host's, beside it.",
    "Steps (GPU traces), as the profiler viewer counts them: from ProfilerStep#N's start, data "
    "loading included, to the end of the device work it launched, never overlapping the next; "
    "input = the data loader's time while the device had nothing to run, idle = the rest of "
    "that time (waiting for the host).",
    "Host timeline (CPU traces): the profiler steps' spans; input = the data loader's spans; "
    "compute = host ops outside them (not c10d calls); communication = gloo's worker-thread "
    "collectives and the c10d calls; exposed = communication while neither ran; other = the "
    "rest (outside any op: Python, the framework); a process is never idle.",
    "Collectives are matched across ranks by process group and sequence number, or by step, "
    "operation and order of issue. Wait = last arrival - first arrival; transfer = first end "
    "after the last arrival - the last arrival; busbw = bytes x the nccl-tests bus factor / "
    "transfer.",
    "A straggler arrives last at most collectives (90% with 2-3 ranks, half with more) by a "
    "median lead over 5% of the step; its cause is the part (compute or input) that is "
    "slower than the other ranks' median by at least half its lateness.",
]


def _ms(us: float) -> str:
    return "-" if us != us else f"{us / 1e3:,.2f}"


def _pct(x: float) -> str:
    return "-" if x != x or math.isinf(x) else f"{100 * x:.1f}"


def rank_rows(ranks: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per rank: span and each part's share, and overlap as a share of communication."""
    header = ["rank", "timeline", "steps", "span ms", "compute %", "exposed comm %", "other %"]
    header += ["input %", "idle %", "comm ms", "overlap % of comm"]
    phases = [c for c in PHASES if c in ranks]
    header += [f"{c.removesuffix('_us')} %" for c in phases]
    rows = []
    for _, r in ranks.iterrows():
        span = r["span_us"] or math.nan
        rows.append(
            [
                str(r["rank"]),
                r["timeline"],
                str(r["steps"]),
                _ms(r["span_us"]),
                *(_pct(r[c] / span) for c in ("compute_us", "exposed_comm_us", "other_us")),
                _pct(r["input_us"] / span),
                _pct(r["idle_us"] / span),
                _ms(r["comm_us"]),
                _pct(r["overlap_us"] / r["comm_us"]) if r["comm_us"] else "-",
                *(_pct(r[c] / span) for c in phases),
            ]
        )
    return header, rows


def straggler_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "last at", "share %", "lead ms (median)", "others wait ms/step"]
    header += ["compute +ms", "input +ms", "cause", "straggler"]
    rows = [
        [
            str(r["rank"]),
            str(r["times_last"]),
            _pct(r["share_last"]),
            _ms(r["held_median_us"]),
            _ms(r["caused_wait_per_step_us"]),
            _ms(r["compute_delta_us"]),
            _ms(r["input_delta_us"]),
            r["cause"] or "-",
            "yes" if r["straggler"] else "",
        ]
        for _, r in frame.iterrows()
    ]
    return header, rows


def collective_summary(colls: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per op and size: how many, median wait and transfer, busbw (and the measured one)."""
    header = ["op", "size", "count", "wait ms", "transfer ms", "busbw GB/s", "measured GB/s"]
    rows: list[list[str]] = []
    if colls.empty:
        return header, rows
    measured = "measured_busbw_gbps" in colls
    for (op, size), g in colls.groupby(["op", "nbytes"], dropna=False, sort=True):
        nbytes = float(str(size))
        rows.append(
            [
                str(op),
                "-" if math.isnan(nbytes) else f"{int(nbytes):,} B",
                str(len(g)),
                _ms(g["wait_us"].median()),
                _ms(g["transfer_us"].median()),
                "-" if g["busbw_gbps"].isna().all() else f"{g['busbw_gbps'].median():.2f}",
                f"{g['measured_busbw_gbps'].median():.2f}"
                if measured and g["measured_busbw_gbps"].notna().any()
                else "-",
            ]
        )
    return header, rows


def verdict(tables: TraceTables) -> str:
    """What was read, in one line."""
    info = tables.info
    ranks = tables.ranks
    steps = int(ranks["steps"].max()) if not ranks.empty else 0
    partial = (
        f" of a world of {info['world_size']}"
        if info["world_size"] and info["world_size"] > info["traces"]
        else ""
    )
    unknown = info.get("unknown_categories") or {}
    unread = (
        " Events of categories gpuprof does not read (counted, not analysed): "
        + ", ".join(f"{cat} ({n:,})" for cat, n in unknown.items())
        + "."
        if unknown
        else ""
    )
    return (
        f"Read {info['traces']} rank trace(s){partial} ({info['events']:,} events, "
        f"{info.get('backend') or 'unknown'} backend, {info['timeline']} timeline), "
        f"{steps} step(s) analysed per rank, {len(tables.collectives)} collective(s) matched."
        f"{unread}"
    )


def device_rows(devices: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per rank and GPU of a process that drives several: span and each part's share."""
    header = ["rank", "gpu", "span ms", "compute %", "exposed comm %", "other %", "idle %"]
    rows = []
    for _, r in devices.iterrows():
        span = r["span_us"] or math.nan
        parts = ("compute_us", "exposed_comm_us", "other_us", "idle_us")
        rows.append(
            [str(r["rank"]), str(r["device"]), _ms(r["span_us"])]
            + [_pct(r[c] / span) for c in parts]
        )
    return header, rows


def flops_rows(tables: TraceTables) -> tuple[list[str], list[list[str]]]:
    """Per rank: the window's FLOPs, achieved TFLOP/s and utilization; none without FLOPs."""
    ranks = tables.ranks
    if "flops" not in ranks:
        return [], []
    header = ["rank", "TFLOP/step", "TFLOP/s", "dtype", "peak (datasheet)", "MFU %"]
    measured = "measured_tflops" in ranks
    header += ["measured ceiling", "% of measured"] if measured else []
    rows = []
    for _, r in ranks.iterrows():
        per_step = r["flops"] / r["steps"] / 1e12 if r["steps"] else math.nan
        row = [str(r["rank"]), _num(per_step), _num(r["tflops"]), str(r["flops_dtype"] or "-")]
        row += [_num(r["peak_tflops"]), _num(r["mfu_pct"], 3)]
        if measured:
            row += [_num(r["measured_tflops"]), _num(r["mfu_measured_pct"], 3)]
        rows.append(row)
    return header, rows


def _flop_op(r: dict[Any, Any]) -> list[str]:
    tera, ms = _num(r["flops"] / 1e12), _ms(r["time_us"])
    return [str(r["rank"]), str(r["name"]), str(r["count"]), tera, ms, _num(r["tflops"])]


def _num(x: Any, digits: int = 4) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:,.0f}"


def text(tables: TraceTables, found: list[str]) -> str:
    """The terminal output."""
    parts = [health(verdict(tables), False, found), ""]
    header, rows = rank_rows(tables.ranks)
    parts += ["Where each rank's time goes (window):", fixed_width([header, *rows]), ""]
    header, rows = device_rows(tables.devices)
    if rows:
        parts += ["Per GPU (a process drives several; the rank's row merges them):"]
        parts += [fixed_width([header, *rows]), ""]
    header, rows = flops_rows(tables)
    if rows:
        parts += ["FLOPs (window; counted from the ops' shapes or as recorded):"]
        parts += [fixed_width([header, *rows])]
        missing = int(tables.ranks.get("uncounted_ops", pd.Series([0])).fillna(0).max())
        if missing:
            parts.append(
                f"({missing} convolution(s) without their arguments: no FLOPs per step; "
                "record with record_shapes=True on a torch that writes their `Concrete Inputs`)"
            )
        parts.append("")
    header, rows = collective_summary(tables.collectives)
    if rows:
        parts += ["Collectives (medians):", fixed_width([header, *rows], left=1), ""]
    if not tables.stragglers.empty:
        header, rows = straggler_rows(tables.stragglers)
        parts += ["Who arrives last:", fixed_width([header, *rows]), ""]
    if not tables.ops.empty:
        top = tables.ops.sort_values("total_us", ascending=False).head(5)
        rows = [
            [str(r["rank"]), r["kind"], _ms(r["total_us"]), str(r["count"]), r["name"][:70]]
            for _, r in top.iterrows()
        ]
        parts += ["Top ops:", fixed_width([["rank", "kind", "ms", "count", "name"], *rows], 0), ""]
    if found:
        parts += ["Findings:", *(f"- {f}" for f in found)]
    offsets = tables.info.get("clock_offsets_us")
    if offsets:
        parts.append(f"Clock offsets applied (us, from collective ends): {offsets}")
    return "\n".join(parts).rstrip() + "\n"


def _breakdown_figure(ranks: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for column, name, color in PARTS:
        share = 100 * ranks[column] / ranks["span_us"]
        fig.add_trace(
            go.Bar(
                x=[f"rank {r}" for r in ranks["rank"]],
                y=share,
                name=name,
                marker_color=color,
                hovertemplate="%{y:.1f}%<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        title="Where each rank's time goes",
        barmode="stack",
        yaxis={"title": "% of span"},
        height=420,
        template="plotly_white",
    )
    return fig


def _collectives_figure(colls: pd.DataFrame) -> go.Figure:
    labels = [f"{i}: {r['op']} step {r['step']}" for i, r in colls.iterrows()]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=labels,
            y=colls["wait_us"] / 1e3,
            name="wait (first to last arrival)",
            marker_color="#E45756",
            customdata=colls["last_rank"],
            hovertemplate="%{y:.2f} ms, last: rank %{customdata}<extra>wait</extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            x=labels,
            y=colls["transfer_us"] / 1e3,
            name="transfer (after the last)",
            marker_color="#4C78A8",
            hovertemplate="%{y:.2f} ms<extra>transfer</extra>",
        )
    )
    fig.update_layout(
        title="Each collective: waiting for the last rank, then the transfer",
        barmode="stack",
        yaxis={"title": "ms"},
        xaxis={"showticklabels": len(colls) <= 40},
        height=420,
        template="plotly_white",
    )
    return fig


def sections(tables: TraceTables) -> list[Section]:
    """The report's sections."""
    header, rows = rank_rows(tables.ranks)
    first: list[Any] = [
        Figures(html=[embed(_breakdown_figure(tables.ranks))], grid=False),
        Table(header=header, rows=rows),
    ]
    out = [Section(title="Where each rank's time goes", anchor="breakdown", blocks=first)]
    header, rows = device_rows(tables.devices)
    if rows:
        first.append(Table(header=header, rows=rows, title="Per GPU of the process"))
    header, rows = flops_rows(tables)
    if rows:
        flop_ops = [_flop_op(r) for r in tables.flops.head(20).to_dict("records")]
        first += [
            Table(header=header, rows=rows, title="FLOPs and utilization"),
            Table(
                header=["rank", "op", "count", "TFLOP", "ms", "TFLOP/s"],
                rows=flop_ops,
                left=(1,),
                title="Ops with FLOPs (window)",
            ),
        ]
    colls = tables.collectives
    if not colls.empty:
        header, rows = collective_summary(colls)
        blocks: list[Any] = [
            Figures(html=[embed(_collectives_figure(colls))], grid=False),
            Table(header=header, rows=rows, left=(1,), title="Per operation and size"),
        ]
        if not tables.stragglers.empty:
            header, rows = straggler_rows(tables.stragglers)
            blocks.append(Table(header=header, rows=rows, title="Who arrives last"))
        out.append(Section(title="Collectives and stragglers", anchor="waits", blocks=blocks))
    steps = tables.steps
    if not steps.empty:
        phases = [c for c in PHASES if c in steps]
        rows = [
            [
                str(r["rank"]),
                str(r["step"]),
                _ms(r["span_us"]),
                _ms(r["compute_us"]),
                _ms(r["exposed_comm_us"]),
                _ms(r["other_us"]),
                _ms(r["input_us"]),
                _ms(r["idle_us"]),
                *(_ms(r[c]) for c in phases),
            ]
            for _, r in steps.iterrows()
        ]
        header = ["rank", "step", "span ms", "computation", "exposed comm", "other", "input"]
        header += ["idle", *(c.removesuffix("_us") for c in phases)]
        top = (
            tables.ops.sort_values("total_us", ascending=False).head(20)
            if not tables.ops.empty
            else tables.ops
        )
        op_rows = [
            [str(r["rank"]), r["kind"], _ms(r["total_us"]), str(r["count"]), r["name"][:120]]
            for _, r in top.iterrows()
        ]
        out.append(
            Section(
                title="Steps and top ops",
                anchor="steps",
                blocks=[
                    Table(header=header, rows=rows, shown=tuple(range(min(len(rows), 16)))),
                    Table(
                        header=["rank", "kind", "ms", "count", "name"],
                        rows=op_rows,
                        left=(5,),
                        title="Top kernels / ops (window)",
                    ),
                    Note(text="A host op counts once with what it calls (the outermost op)."),
                ],
            )
        )
    return out


def render(tables: TraceTables, found: list[str], argv: str, version: str) -> str:
    """The trace report as one self-contained HTML page."""
    return TEMPLATES.get_template("trace.html.j2").render(
        verdict=health(verdict(tables), False, found),
        findings=found,
        sections=sections(tables),
        files=tables.info["files"],
        method=METHOD,
        argv=argv,
        version=version,
        plotly_js=get_plotlyjs(),
    )
