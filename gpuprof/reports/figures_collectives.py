"""The collectives' bus bandwidth against size (DataFrame -> plotly Figure; no I/O): a line per
scope, world size and group at the median iteration, in a band from the 10th to the 90th
percentile of the iterations, so one noisy size does not read as a real dip."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from gpuprof.units import format_size

PALETTE = qualitative.Plotly


def _faint(color: str) -> str:
    """A hex colour as a translucent fill."""
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},0.15)"


def _series_label(row: pd.Series, both_modes: bool) -> str:
    label = f"{row['scope']} n={row['world_size']}"
    if row["group"] not in ("all",) and row["scope"] != "global":
        label += f" {row['group']}"
    if both_modes:
        label += " in-place" if row["in_place"] else " out-of-place"
    return label


def busbw_figure(summary: pd.DataFrame, op: str, dtype: str) -> go.Figure:
    """Bus bandwidth against size for one op and dtype: one line per scope, world size, group."""
    rows = summary[(summary["op"] == op) & (summary["dtype"] == dtype)]
    both_modes = rows["in_place"].nunique() > 1
    # a spread to draw: iterations timed one by one (an imported log has its printed mean only)
    spread = "busbw_p10_gbps" in rows and bool(
        (rows["busbw_p90_gbps"] > rows["busbw_p10_gbps"]).any()
    )
    keys = ["scope", "world_size", "group", "in_place"]
    fig = go.Figure()
    for i, (_, series) in enumerate(rows.groupby(keys, sort=True)):
        series = series.sort_values("size_bytes")
        first = series.iloc[0]
        color = PALETTE[i % len(PALETTE)]
        if spread:  # the spread of the iterations: p10 to p90
            sizes = list(series["size_bytes"])
            fig.add_trace(
                go.Scatter(
                    x=sizes + sizes[::-1],
                    y=list(series["busbw_p90_gbps"]) + list(series["busbw_p10_gbps"])[::-1],
                    mode="lines",
                    fill="toself",
                    fillcolor=_faint(color),
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=str(i),
                )
            )
        fig.add_trace(
            go.Scatter(
                x=series["size_bytes"],
                y=series["busbw_gbps"],
                mode="lines+markers",
                line={"color": color},
                legendgroup=str(i),
                name=_series_label(first, both_modes),
                customdata=[
                    [format_size(s), t]
                    for s, t in zip(series["size_bytes"], series["time_us"], strict=True)
                ],
                hovertemplate="%{customdata[0]}: %{y:.3f} GB/s busbw, "
                "%{customdata[1]:.1f} us<extra>%{fullData.name}</extra>",
            )
        )
    sizes = sorted(rows["size_bytes"].unique())
    fig.update_layout(
        title=f"{op} ({dtype}): bus bandwidth"
        + (" (band: p10-p90 of the iterations)" if spread else ""),
        xaxis={
            "type": "log",
            "title": "size",
            "tickvals": sizes,
            "ticktext": [format_size(s) for s in sizes],
        },
        yaxis={"title": "busbw (GB/s)", "rangemode": "tozero"},
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        legend={"orientation": "h", "y": -0.25},
        template="plotly_white",
    )
    return fig
