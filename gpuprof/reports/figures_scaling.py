"""The scaling figures: a predicted curve with its uncertainty band, and the measured points
it should pass through (DataFrame -> plotly Figure; no I/O)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


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
) -> go.Figure:
    """`predicted` (world_size, y, low, high) as a line in a band, `measured` (world_size, y,
    label) as markers, and dotted horizontal `marks`."""
    fig = go.Figure()
    x = list(predicted["world_size"])
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1],
            y=list(predicted[high]) + list(predicted[low])[::-1],
            fill="toself",
            fillcolor="rgba(76,120,168,0.18)",
            line={"width": 0},
            name="band (fit residuals)",
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
    if not measured.empty:
        fig.add_trace(
            go.Scatter(
                x=measured["world_size"],
                y=measured[y],
                mode="markers",
                name="measured",
                marker={"size": 11, "color": "#e45756", "symbol": "diamond"},
                text=measured["label"],
                hovertemplate="%{text}: %{y:.3g} (measured)<extra></extra>",
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
