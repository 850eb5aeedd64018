"""The scaling figures: a predicted curve with its uncertainty band, and the measured points
it should pass through (DataFrame -> plotly Figure; no I/O)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative


def predicted_figure(
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    *,
    y: str,
    low: str,
    high: str,
    title: str,
    ytitle: str,
    marks: tuple[float, ...] = (),
    log_y: bool = False,
    published: pd.DataFrame | None = None,
    band: str = "band (fit residuals)",
) -> go.Figure:
    """`predicted` (world_size, y, low, high) as a line in a band, `measured` (world_size, y,
    label) as markers, `published` (the same columns: other clusters of the same system) as
    open markers, and dotted horizontal `marks`."""
    fig = go.Figure()
    x = list(predicted["world_size"])
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1],
            y=list(predicted[high]) + list(predicted[low])[::-1],
            fill="toself",
            fillcolor="rgba(76,120,168,0.18)",
            line={"width": 0},
            name=band,
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=predicted[y],
            mode="lines+markers",
            name="predicted",
            line={"color": "#4c78a8", "dash": "dot"},
            marker={"size": 5},
            hovertemplate="%{x} ranks: %{y:.3g} (predicted)<extra></extra>",
        )
    )
    points = [
        (measured, "measured", "measured", {"size": 11, "color": "#e45756", "symbol": "diamond"}),
        (
            published if published is not None else pd.DataFrame(),
            "published (same system)",
            "published",
            {"size": 10, "color": "#54a24b", "symbol": "diamond-open"},
        ),
    ]
    for frame, name, kind, marker in points:
        if not frame.empty:
            fig.add_trace(
                go.Scatter(
                    x=frame["world_size"],
                    y=frame[y],
                    mode="markers",
                    name=name,
                    marker=marker,
                    text=frame["label"],
                    hovertemplate=f"%{{text}}: %{{y:.3g}} ({kind})<extra></extra>",
                )
            )
    for mark in marks:
        fig.add_hline(y=mark, line={"dash": "dash", "color": "gray"}, annotation_text=f"{mark:.0%}")
    fig.update_layout(
        title=title,
        xaxis={"title": "ranks", "type": "log"},
        yaxis={"title": ytitle, "type": "log"}
        if log_y
        else {"title": ytitle, "rangemode": "tozero"},
        height=380,
        margin={"t": 50, "b": 40},
    )
    return fig


PALETTE = qualitative.T10  # one colour per system: the presets with published rows fit


def published_figure(curves: pd.DataFrame, points: pd.DataFrame, shown: set[str]) -> go.Figure:
    """Per system, `curves` (system, gpus, busbw_gbps) as a line and its published `points`
    (system, gpus, busbw_gbps, label) as markers of the same colour, toggled together from
    the legend; systems not in `shown` start hidden."""
    fig = go.Figure()
    for i, (system, curve) in enumerate(curves.groupby("system", sort=False)):
        color = PALETTE[i % len(PALETTE)]
        visible: bool | str = True if system in shown else "legendonly"
        fig.add_trace(
            go.Scatter(
                x=curve["gpus"],
                y=curve["busbw_gbps"],
                mode="lines",
                name=str(system),
                legendgroup=str(system),
                visible=visible,
                line={"color": color, "dash": "dot"},
                hovertemplate=f"{system}: %{{x}} GPUs, %{{y:.0f}} GB/s (predicted)<extra></extra>",
            )
        )
        mine = points[points["system"] == system]
        fig.add_trace(
            go.Scatter(
                x=mine["gpus"],
                y=mine["busbw_gbps"],
                mode="markers",
                name=f"{system} published",
                legendgroup=str(system),
                showlegend=False,
                visible=visible,
                marker={"size": 10, "color": color, "symbol": "diamond"},
                text=mine["label"],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.update_layout(
        title="all_reduce bus bandwidth: NCCL's model (lines) against published results",
        xaxis={"title": "GPUs", "type": "log"},
        yaxis={"title": "busbw GB/s", "rangemode": "tozero"},
        height=420,
        margin={"t": 50, "b": 40},
    )
    return fig
