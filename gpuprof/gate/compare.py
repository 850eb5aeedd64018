"""Self-contained HTML pages of `gpuprof compare` (two sides overlaid, changed cases marked)
and `gpuprof trend` (each case across runs in order, steps marked), built from comparison
tables (`gpuprof.gate.stats.compare`) only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from gpuprof import registry
from gpuprof.errors import UsageError
from gpuprof.gate.stats import FAILING, verdict_counts
from gpuprof.gate.trend import TrendPoint
from gpuprof.gate.verdicts import EXPLAIN, rows
from gpuprof.reports.html import TEMPLATES
from gpuprof.reports.sections import Figures, Note, Section, Table, embed
from gpuprof.units import format_size

MARK = {"regression": "#c0392b", "improvement": "#1e8449"}
MAX_CASE_FIGURES = 40


def _layout(fig: go.Figure, title: str, ytitle: str, **extra: Any) -> go.Figure:
    fig.update_layout(
        title=title,
        yaxis={"title": ytitle, "rangemode": "tozero"},
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        legend={"orientation": "h", "y": -0.3},
        template="plotly_white",
        **extra,
    )
    return fig


def _sized(part: pd.DataFrame) -> pd.DataFrame:
    """The rows with their size and the series they belong to (the key without the size)."""
    sizes = [json.loads(k).get("size_bytes") for k in part["key"]]
    series = [
        case.split(" ", 1)[-1].replace(f" {format_size(size)}", "") if size else case
        for case, size in zip(part["case"], sizes, strict=True)
    ]
    return part.assign(size=sizes, series=series)


def _curves(part: pd.DataFrame, metric: str, names: tuple[str, str]) -> go.Figure:
    """The metric against size, side A dashed and side B solid per series; changed points
    ringed in the verdict's colour."""
    part = _sized(part)
    fig = go.Figure()
    for series, rows_ in part.groupby("series", sort=True):
        rows_ = rows_.sort_values("size")
        for column, name, dash in (("base", names[0], "dash"), ("cand", names[1], "solid")):
            fig.add_trace(
                go.Scatter(
                    x=rows_["size"],
                    y=rows_[column],
                    mode="lines+markers",
                    line={"dash": dash},
                    name=f"{series} ({name})",
                    hovertemplate="%{x:.3s} B: %{y:.4g}<extra>%{fullData.name}</extra>",
                )
            )
        changed = rows_[rows_["verdict"].isin(list(MARK))]
        if len(changed):
            fig.add_trace(
                go.Scatter(
                    x=changed["size"],
                    y=changed["cand"],
                    mode="markers",
                    marker={
                        "size": 14,
                        "symbol": "circle-open",
                        "line": {"width": 2},
                        "color": [MARK[v] for v in changed["verdict"]],
                    },
                    name=f"{series}: changed",
                    text=[
                        f"{v} {c:+.1f}%"
                        for v, c in zip(changed["verdict"], changed["change_pct"], strict=True)
                    ],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    sizes = sorted(s for s in part["size"].unique() if s is not None)
    xaxis = {
        "type": "log",
        "title": "size",
        "tickvals": sizes,
        "ticktext": [format_size(s) for s in sizes],
    }
    return _layout(fig, metric, metric, xaxis=xaxis)


def _bars(part: pd.DataFrame, metric: str, names: tuple[str, str]) -> go.Figure:
    """The metric per case, A and B side by side; changed cases' B bars in the verdict's
    colour."""
    labels = [c.split(" ", 1)[1] if " " in c else c for c in part["case"]]
    colours = [MARK.get(v, "#5b7db1") for v in part["verdict"]]
    fig = go.Figure(
        [
            go.Bar(x=labels, y=part["base"], name=names[0], marker_color="#b8c4d6"),
            go.Bar(
                x=labels,
                y=part["cand"],
                name=names[1],
                marker_color=colours,
                text=[
                    f"{c:+.1f}%" if v in MARK else ""
                    for v, c in zip(part["verdict"], part["change_pct"], strict=True)
                ],
                textposition="outside",
            ),
        ]
    )
    return _layout(fig, metric, metric, barmode="group")


def comparison_sections(table: pd.DataFrame, names: tuple[str, str]) -> list[Section]:
    """One section per probe: a figure per metric (curves against size where the cases span
    sizes, else bars per case), then the probe's rows of the verdict table."""
    sections = []
    for spec in registry.specs().values():
        part = table[(table["probe"] == spec.name) & table["base"].notna() & table["cand"].notna()]
        if part.empty:
            continue
        figures = []
        for metric in spec.metrics:
            rows_ = part[part["metric"] == metric.column]
            if rows_.empty:
                continue
            sizes = _sized(rows_)["size"].dropna().nunique()
            fig = (
                _curves(rows_, metric.column, names)
                if sizes > 1
                else _bars(rows_, metric.column, names)
            )
            figures.append(embed(fig))
        probe_rows = table[table["probe"] == spec.name]
        cells = rows(probe_rows)
        sections.append(
            Section(
                title=spec.name,
                anchor=f"probe-{spec.name}",
                blocks=[
                    Figures(html=figures),
                    Table(
                        header=cells[0],
                        rows=cells[1:],
                        left=(1, 2, 3),
                        row_classes=tuple(probe_rows["verdict"]),
                    ),
                ],
            )
        )
    return sections


def _counts(table: pd.DataFrame) -> tuple[str, bool]:
    return verdict_counts(table), bool(len(table) and table["verdict"].isin(FAILING).any())


def _legend() -> Note:
    return Note(text="Verdicts: " + "; ".join(f"{k}: {v}" for k, v in EXPLAIN.items()) + ".")


def render_compare(
    table: pd.DataFrame, names: tuple[str, str], notes: list[str], method: list[str]
) -> str:
    """The compare page: the counts, the changed cases, then each probe overlaid."""
    changed = table[~table["verdict"].isin(["same"])]
    cells = rows(changed)
    lead = Section(
        title="Changed cases",
        anchor="changed",
        blocks=[
            Table(
                header=cells[0],
                rows=cells[1:],
                left=(1, 2, 3),
                row_classes=tuple(changed["verdict"]),
                intro=f"{names[0]} is the baseline, {names[1]} the candidate; cases present on "
                "one side only are listed as missing or new.",
            ),
            _legend(),
        ],
    )
    verdict, bad = _counts(table)
    return TEMPLATES.get_template("compare.html.j2").render(
        title=f"gpuprof compare — {names[0]} vs {names[1]}",
        subtitle=f"baseline {names[0]} · candidate {names[1]}",
        verdict=verdict,
        bad=bad,
        notes=notes,
        sections=[lead, *comparison_sections(table, names)],
        method=method,
        plotly_js=get_plotlyjs(),
    )


def trend_sections(points: list[TrendPoint], baseline: pd.DataFrame | None) -> list[Section]:
    """Per probe and metric, every case's value relative to its first (or the baseline's)
    median, steps marked; then each case with a step (or any case, up to a limit) on its own
    axis with the baseline's band."""
    frame = pd.concat(
        [p.values.assign(point=i, run=p.name) for i, p in enumerate(points)], ignore_index=True
    )
    steps = (
        pd.concat(
            [p.steps.assign(point=i) for i, p in enumerate(points) if len(p.steps)],
            ignore_index=True,
        )
        if any(len(p.steps) for p in points)
        else pd.DataFrame(columns=["probe", "metric", "key", "verdict", "point", "change_pct"])
    )
    names = [p.name for p in points]
    sections = []
    for (probe, metric), part in frame.groupby(["probe", "metric"], sort=False):
        fig = go.Figure()
        for key, case in part.groupby("key", sort=False):
            reference = _reference(case, baseline, str(key))
            rel = 100 * (case["value"] / reference - 1)
            fig.add_trace(
                go.Scatter(
                    x=case["run"],
                    y=rel,
                    mode="lines+markers",
                    name=case["case"].iloc[0],
                    hovertemplate="%{x}: %{y:+.1f}%<extra>%{fullData.name}</extra>",
                )
            )
            marked = steps[
                (steps["probe"] == probe) & (steps["metric"] == metric) & (steps["key"] == key)
            ]
            if len(marked):
                at = case.set_index("point")["value"].astype(float)
                fig.add_trace(
                    go.Scatter(
                        x=[names[i] for i in marked["point"]],
                        y=[100 * (float(at[i]) / reference - 1) for i in marked["point"]],
                        mode="markers",
                        marker={
                            "size": 14,
                            "symbol": "circle-open",
                            "line": {"width": 2},
                            "color": [MARK[v] for v in marked["verdict"]],
                        },
                        showlegend=False,
                        text=[
                            f"step: {v} {c:+.1f}%"
                            for v, c in zip(marked["verdict"], marked["change_pct"], strict=True)
                        ],
                        hovertemplate="%{text}<extra></extra>",
                    )
                )
        fig.update_yaxes(rangemode="normal")
        figures = [
            embed(
                _layout(
                    fig,
                    f"{metric}: change from the reference",
                    "% change",
                    xaxis={"type": "category"},
                )
            )
        ]
        figures += _case_figures(part, steps, baseline, names)
        sections.append(
            Section(
                title=f"{probe}: {metric}",
                anchor=f"trend-{probe}-{metric}",
                blocks=[Figures(html=figures)],
            )
        )
    return sections


def _reference(case: pd.DataFrame, baseline: pd.DataFrame | None, key: str) -> float:
    """The baseline's median of the case, or its first value in the trend."""
    if baseline is not None:
        match = baseline[
            (baseline["key"] == key)
            & (baseline["metric"] == case["metric"].iloc[0])
            & (baseline["probe"] == case["probe"].iloc[0])
        ]
        if len(match):
            return float(match["value"].median())
    return float(case["value"].iloc[0])


def _case_figures(
    part: pd.DataFrame, steps: pd.DataFrame, baseline: pd.DataFrame | None, names: list[str]
) -> list[str]:
    """Cases with a step, each with the baseline's band (its runs' range), raw values."""
    stepped = set(steps["key"][steps["metric"] == part["metric"].iloc[0]])
    figures: list[str] = []
    for key, case in part.groupby("key", sort=False):
        if key not in stepped or len(figures) >= MAX_CASE_FIGURES:
            continue
        fig = go.Figure()
        if baseline is not None:
            band = baseline[
                (baseline["key"] == key) & (baseline["metric"] == case["metric"].iloc[0])
            ]
            if len(band):
                fig.add_hrect(
                    y0=band["value"].min(),
                    y1=band["value"].max(),
                    fillcolor="#9cb3d6",
                    opacity=0.25,
                    line_width=0,
                    annotation_text="baseline runs",
                )
        fig.add_trace(
            go.Scatter(
                x=case["run"], y=case["value"], mode="lines+markers", name=case["case"].iloc[0]
            )
        )
        figures.append(
            embed(
                _layout(
                    fig,
                    str(case["case"].iloc[0]),
                    str(case["metric"].iloc[0]),
                    xaxis={"type": "category", "categoryarray": names},
                )
            )
        )
    return figures


def render_trend(
    points: list[TrendPoint], baseline: pd.DataFrame | None, notes: list[str], method: list[str]
) -> str:
    """The trend page: the steps found, then each probe and metric across the runs."""
    found = (
        pd.concat([p.steps.assign(run=p.name) for p in points if len(p.steps)], ignore_index=True)
        if any(len(p.steps) for p in points)
        else None
    )
    blocks: list[Any] = []
    if found is not None:
        blocks.append(
            Table(
                header=["run", "verdict", "case", "metric", "before", "after", "change"],
                rows=[
                    [
                        r["run"],
                        r["verdict"],
                        r["case"],
                        r["metric"],
                        f"{r['base']:.4g}",
                        f"{r['cand']:.4g}",
                        f"{r['change_pct']:+.1f}%",
                    ]
                    for r in found.to_dict("records")
                ],
                left=(1, 2, 3, 4),
                row_classes=tuple(found["verdict"]),
            )
        )
    else:
        blocks.append(Note(text="No step: every run is within the noise of the runs before it."))
    lead = Section(title="Steps", anchor="steps", blocks=blocks)
    count = 0 if found is None else len(found)
    return TEMPLATES.get_template("compare.html.j2").render(
        title=f"gpuprof trend — {len(points)} runs",
        subtitle=f"{points[0].name} … {points[-1].name}",
        verdict=f"{count} step(s) found across {len(points)} runs",
        bad=bool(found is not None and (found["verdict"] == "regression").any()),
        notes=notes,
        sections=[lead, *trend_sections(points, baseline)],
        method=method,
        plotly_js=get_plotlyjs(),
    )


def write_page(html: str, path: Path) -> Path:
    """Write a page; a UsageError if the path cannot take it."""
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
