"""Figures built from analysis tables only (DataFrame -> plotly Figure); no I/O here."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go


def pair_heatmap(summary: pd.DataFrame, mode: str) -> go.Figure:
    """Rank x rank matrix of one p2p mode (bandwidth, or latency), flagged pairs marked."""
    rows = summary[summary["mode"] == mode]
    ranks = sorted(set(rows["rank_a"]) | set(rows["rank_b"]))
    index = {rank: i for i, rank in enumerate(ranks)}
    latency = mode == "latency"
    column = "latency_us" if latency else "bw_gbps"
    z: list[list[float | None]] = [[None] * len(ranks) for _ in ranks]
    text = [[""] * len(ranks) for _ in ranks]
    for rec in rows.to_dict("records"):
        value = float(rec[column])
        mark = " SLOW" if rec["flagged"] else ""
        label = f"{value:.1f} us" if latency else f"{value:.3g} GB/s{mark}"
        for i, j in (
            (index[rec["rank_a"]], index[rec["rank_b"]]),
            (index[rec["rank_b"]], index[rec["rank_a"]]),
        ):
            z[i][j], text[i][j] = value, f"{label} ({rec['link_class']})"
    names = [f"rank {r}" for r in ranks]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=names,
            text=text,
            texttemplate="%{text}",
            hoverinfo="text",
            colorscale="Viridis_r" if latency else "Viridis",
            colorbar={"title": "us" if latency else "GB/s"},
        )
    )
    title = {
        "uni": "one direction",
        "bidir": "both directions at once, per direction",
        "latency": "ping-pong latency (round trip / 2)",
    }.get(mode, mode)
    fig.update_layout(
        title=f"p2p {mode}: {title}",
        height=120 + 45 * len(ranks),
        yaxis={"autorange": "reversed"},
        template="plotly_white",
        margin={"l": 70, "r": 20, "t": 50, "b": 40},
    )
    return fig


_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
    "legend": {"orientation": "h", "y": -0.25},
    "template": "plotly_white",
}


def case_label(row: pd.Series) -> str:
    """'global n=4 accum=4', 'intra n=2 node1 default': a DDP case in one line."""
    label = f"{row['scope']} n={row['world_size']}"
    if row["group"] not in ("all", "rank0", "rail0"):
        label += f" {row['group']}"
    return f"{label} {row['case_id']}"


DDP_PARTS = (
    ("forward_us", "forward", "#4c78a8"),
    ("backward_compute_us", "backward compute", "#72b7b2"),
    ("exposed_comm_us", "exposed communication", "#e45756"),
    ("optimizer_us", "optimizer", "#b279a2"),
)


def stacked_figure(
    summary: pd.DataFrame,
    parts: tuple[tuple[str, str, str], ...],
    marker: tuple[str, str, dict[str, Any]],
    title: str,
    unit: str = "ms per step",
) -> go.Figure:
    """Stacked bars (ms) per case of the (column, name, color) parts, and one measured column
    as a marker (column, name, marker style) beside them."""
    labels = [case_label(r) for _, r in summary.iterrows()]
    fig = go.Figure()
    for column, name, color in parts:
        fig.add_trace(
            go.Bar(
                x=labels,
                y=summary[column] / 1e3,
                name=name,
                marker_color=color,
                hovertemplate="%{y:.2f} ms<extra>" + name + "</extra>",
            )
        )
    column, name, style = marker
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=summary[column] / 1e3,
            mode="markers",
            name=name,
            marker=style,
            hovertemplate=name + " %{y:.2f} ms<extra></extra>",
        )
    )
    fig.update_layout(title=title, barmode="stack", yaxis={"title": unit}, height=420, **_LAYOUT)
    return fig


STEP_TICK = {"symbol": "line-ew-open", "size": 28, "color": "black"}  # the measured step


def ddp_breakdown_figure(summary: pd.DataFrame) -> go.Figure:
    """Stacked bars of the step (ms) per world size and variant, with the measured step."""
    return stacked_figure(
        summary,
        DDP_PARTS,
        ("rank_step_us", "step (measured)", STEP_TICK),
        "DDP step: where the time goes (DDP logging data)",
    )


def ddp_overlap_figure(summary: pd.DataFrame) -> go.Figure:
    """Share of communication hidden behind backward, by both methods, per case."""
    rows = summary[summary["overlap_ab_pct"].notna() | summary["overlap_log_pct"].notna()]
    labels = [case_label(r) for _, r in rows.iterrows()]
    fig = go.Figure()
    for column, name in (
        ("overlap_log_pct", "DDP logging data"),
        ("overlap_ab_pct", "A/B (noop hook, buckets alone)"),
    ):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=rows[column],
                name=name,
                texttemplate="%{y:.0f}%",
                textposition="outside",
                cliponaxis=False,
            )
        )
    fig.update_layout(
        title="Communication overlapped with backward (%)",
        barmode="group",
        yaxis={"title": "% of communication", "range": [0, 100]},
        height=380,
        **_LAYOUT,
    )
    return fig


def scaling_figure(rows: pd.DataFrame) -> go.Figure:
    """Weak-scaling efficiency against world size, with the ideal line."""
    fig = go.Figure()
    worst = rows.groupby("world_size")["efficiency"].min()
    fig.add_trace(
        go.Scatter(
            x=worst.index,
            y=worst.to_numpy(),
            mode="lines",
            name="lowest at each size",
            line={"color": "#4c78a8"},
            hoverinfo="skip",
        )
    )
    for scope, series in rows.groupby("scope", sort=False):
        fig.add_trace(
            go.Scatter(
                x=series["world_size"],
                y=series["efficiency"],
                mode="markers",
                marker={"size": 10},
                name=str(scope),
                text=[case_label(r) for _, r in series.iterrows()],
                hovertemplate="%{text}: %{y:.2f}<extra></extra>",
            )
        )
    sizes = sorted(rows["world_size"].unique())
    fig.add_trace(
        go.Scatter(
            x=sizes,
            y=[1.0] * len(sizes),
            mode="lines",
            name="ideal",
            line={"dash": "dash", "color": "gray"},
        )
    )
    fig.update_layout(
        title="Weak scaling: samples/s(n) / (n x samples/s(1))",
        xaxis={"title": "ranks", "tickvals": sizes, "type": "log"},
        yaxis={"title": "efficiency", "rangemode": "tozero"},
        height=380,
        **_LAYOUT,
    )
    return fig


GANTT_COLORS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b", "WAIT": "#d0d0d0"}
GANTT_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient", "WAIT": "send/recv wait"}


def gantt_figure(events: pd.DataFrame, title: str) -> go.Figure:
    """One step of one schedule: a row per rank, a bar per forward, backward, weight-gradient
    and wait interval (ms from the step's first compute); the gaps are the bubbles."""
    compute = events[events["kind"] != "WAIT"]
    origin = float(compute["start_us"].min()) if not compute.empty else 0.0
    fig = go.Figure()
    for kind in ("F", "B", "W", "WAIT"):
        rows = events[events["kind"] == kind]
        if rows.empty:
            continue
        label = [
            f"stage {s} mb {mb}" if kind != "WAIT" else "wait"
            for s, mb in zip(rows["stage"], rows["micro_batch"], strict=True)
        ]
        fig.add_trace(
            go.Bar(
                y=[f"rank {r}" for r in rows["rank"]],
                x=(rows["end_us"] - rows["start_us"]) / 1e3,
                base=(rows["start_us"] - origin) / 1e3,
                orientation="h",
                name=GANTT_NAMES[kind],
                marker_color=GANTT_COLORS[kind],
                text=label if kind != "WAIT" else None,
                textposition="inside",
                insidetextanchor="middle",
                hovertemplate="%{text}: %{base:.2f} to %{x:.2f} ms long<extra>"
                + GANTT_NAMES[kind]
                + "</extra>"
                if kind != "WAIT"
                else "wait %{x:.2f} ms<extra></extra>",
            )
        )
    ranks = sorted(events["rank"].unique(), reverse=True)
    fig.update_layout(
        title={"text": title, "font": {"size": 13}},
        barmode="overlay",
        height=230 + 45 * len(ranks),
        xaxis={"title": "ms from the step's first forward"},
        yaxis={"categoryorder": "array", "categoryarray": [f"rank {r}" for r in ranks]},
        uniformtext={"minsize": 7, "mode": "hide"},
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 90},
        legend={"orientation": "h", "y": -0.45},
    )
    return fig


def bubble_figure(summary: pd.DataFrame) -> go.Figure:
    """Measured bubble against the number of micro-batches per schedule, with the theory
    (dashed) and the schedule simulated with the measured stage times (dotted)."""
    fig = go.Figure()
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2"]
    for i, (schedule, rows) in enumerate(summary.groupby("schedule", sort=False)):
        rows = rows.sort_values("m")
        color = palette[i % len(palette)]
        fig.add_trace(
            go.Scatter(
                x=rows["m"],
                y=rows["bubble_pct"],
                mode="lines+markers",
                name=f"{schedule} measured",
                line={"color": color},
            )
        )
        if rows["theory_pct"].notna().any():
            fig.add_trace(
                go.Scatter(
                    x=rows["m"],
                    y=rows["theory_pct"],
                    mode="lines",
                    name=f"{schedule} theory",
                    line={"color": color, "dash": "dash"},
                )
            )
        fig.add_trace(
            go.Scatter(
                x=rows["m"],
                y=rows["simulated_pct"],
                mode="lines",
                name=f"{schedule} simulated",
                line={"color": color, "dash": "dot"},
                visible="legendonly",
            )
        )
    fig.update_layout(
        title="Pipeline bubble against micro-batches",
        xaxis={"title": "micro-batches m", "tickvals": sorted(summary["m"].unique())},
        yaxis={"title": "bubble (% of the step)", "rangemode": "tozero"},
        height=420,
        **_LAYOUT,
    )
    return fig


OVERVIEW_PARTS = (
    ("compute time", "#4c78a8"),
    ("exposed communication", "#e45756"),
    ("bubble / wait", "#f58518"),
    ("other", "#bab0ac"),
)


def overview_figure(rows: pd.DataFrame) -> go.Figure:
    """Where the time of a step goes, one bar per training case (label), in % of the step:
    columns named as OVERVIEW_PARTS."""
    fig = go.Figure()
    for part, color in OVERVIEW_PARTS:
        fig.add_trace(
            go.Bar(
                y=rows["label"],
                x=rows[part],
                name=part,
                orientation="h",
                marker={"color": color},
                hovertemplate="%{y}: %{x:.1f}% " + part + "<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        title="Where a step's time goes (% of the step)",
        xaxis={"title": "% of the step", "range": [0, 100]},
        yaxis={"autorange": "reversed"},
        height=max(220, 60 + 34 * len(rows)),
        margin={"l": 220, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
    )
    return fig


def node_pairs_figure(summary: pd.DataFrame, mode: str) -> go.Figure:
    """On many ranks, one p2p mode per node instead of a rank x rank matrix: the median and the
    slowest of each node's pairs with other nodes (network), and of its pairs inside it."""
    rows = summary[summary["mode"] == mode]
    ends = pd.concat(
        [
            rows.assign(node=rows["node_a"], host=rows["host_a"]),
            rows.assign(node=rows["node_b"], host=rows["host_b"]),
        ]
    )
    fig = go.Figure()
    for inside, label in ((False, "with other nodes"), (True, "inside the node")):
        part = ends[(ends["link_class"] == "network") != inside]
        if part.empty:
            continue
        per_node = part.groupby("node", sort=True).agg(
            median=("bw_gbps", "median"), slowest=("bw_gbps", "min"), host=("host", "first")
        )
        for column, symbol in (("median", "circle"), ("slowest", "x")):
            fig.add_trace(
                go.Scatter(
                    x=per_node.index,
                    y=per_node[column],
                    mode="markers",
                    marker={"symbol": symbol},
                    name=f"{column} pair {label}",
                    text=per_node["host"],
                    hovertemplate="node %{x} (%{text}): %{y:.3g} GB/s"
                    "<extra>%{fullData.name}</extra>",
                )
            )
    fig.update_layout(
        title=f"p2p {mode}: each node's pairs (median and slowest)",
        xaxis={"title": "node"},
        yaxis={"title": "GB/s", "rangemode": "tozero"},
        height=380,
        **_LAYOUT,
    )
    return fig
