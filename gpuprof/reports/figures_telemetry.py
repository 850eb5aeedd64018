"""The telemetry section's figure: one node's counters over the run (DataFrame -> plotly
Figure; no I/O here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

_SERIES = [  # (column, label, unit row)
    ("cpu_pct", "CPU %", "utilization %"),
    ("cpu_max_pct", "busiest core %", "utilization %"),
    ("gpu_util_pct", "GPU util %", "utilization %"),
    ("network_gbps", "network GB/s", "throughput GB/s"),
    ("nvlink_gbps", "NVLink GB/s", "throughput GB/s"),
    ("pcie_gbps", "PCIe GB/s", "throughput GB/s"),
    ("power_w", "GPU power W", "power W"),
    ("sm_clock_mhz", "SM clock MHz", "SM clock MHz"),
]


def node_figure(series: pd.DataFrame, spans: pd.DataFrame, host: str) -> go.Figure:
    """One node's counters over time, probe phases shaded, throttled samples marked."""
    present = [s for s in _SERIES if s[0] in series.columns and series[s[0]].notna().any()]
    rows = list(dict.fromkeys(unit for _, _, unit in present))
    fig = make_subplots(
        rows=max(1, len(rows)),
        cols=1,
        shared_xaxes=True,
        subplot_titles=rows,
        vertical_spacing=0.08,
    )
    t0 = int(series["t_ns"].min()) if len(series) else 0
    seconds = (series["t_ns"] - t0) / 1e9
    for column, label, unit in present:
        fig.add_trace(
            go.Scatter(x=seconds, y=series[column], name=label, mode="lines"),
            row=rows.index(unit) + 1,
            col=1,
        )
    if "throttled" in series.columns and series["throttled"].any():
        hot = series[series["throttled"].astype(bool)]
        fig.add_trace(
            go.Scatter(
                x=(hot["t_ns"] - t0) / 1e9,
                y=[0] * len(hot),
                mode="markers",
                marker={"color": "red", "symbol": "x"},
                name="throttled",
            ),
            row=1,
            col=1,
        )
    # the probes' phases, shaded across every subplot (given to the layout at once: plotly's
    # add_vrect takes about half a second a call), with the rest of the layout (each call is
    # checked again in full)
    phases = spans[spans["host"] == host].to_dict("records")
    edges = [((p["start_ns"] - t0) / 1e9, (p["end_ns"] - t0) / 1e9, p["probe"]) for p in phases]
    fig.update_layout(
        shapes=[
            {"type": "rect", "xref": "x", "yref": "paper", "x0": a, "x1": b, "y0": 0, "y1": 1,
             "fillcolor": "LightSteelBlue", "opacity": 0.25, "line": {"width": 0},
             "layer": "below"}
            for a, b, _ in edges
        ],
        annotations=[
            *fig.layout.annotations,
            *({"x": a, "xref": "x", "y": 1, "yref": "paper", "text": probe,
               "showarrow": False, "xanchor": "left", "yanchor": "bottom"}
              for a, _, probe in edges),
        ],
        title=f"{host}: counters during the run",
        height=170 + 170 * len(rows),
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )  # fmt: skip
    fig.update_xaxes(title_text="seconds since the first sample", row=len(rows) or 1, col=1)
    return fig
