"""The MoE section: dispatch and combine time against the routing's skew, per capacity factor
and layout, with the least-loaded rank's wait, bytes against theory and dropped tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.nccl_tests import nccl_tests_text
from gpuprof.reports.sections import Figures, Note, Section, embed, summary_table
from gpuprof.units import DTYPE_BYTES

METHOD = (
    "moe: per routing (Zipf skew of the experts' load or a histogram, capacity factor, "
    "placement) every rank routes its tokens alike, each to top-k distinct experts; the "
    "dispatch sends each kept token's hidden vector to its expert's rank with "
    "all_to_all_single and the plan's uneven splits, the combine sends it back; each is timed "
    "after a device sync, and the layer waits for the slowest rank. Hierarchical: inside the "
    "node first, then across nodes between ranks of one local index. Bytes are counted at the "
    "call and compared with the plan's; busbw follows nccl-tests' all_to_all convention."
)


def _figure(summary: Any) -> go.Figure:
    fig = go.Figure()
    numeric = summary[summary["skew"] != "histogram"].copy()
    numeric["skew_value"] = numeric["skew"].astype(float)
    for (factor, layout), rows in numeric.groupby(["capacity_factor", "layout"], sort=True):
        rows = rows.sort_values("skew_value")
        cap = f"capacity {factor:g}" if factor else "no capacity"
        fig.add_trace(
            go.Scatter(
                x=rows["skew_value"],
                y=rows["dispatch_us"] / 1e3,
                mode="lines+markers",
                name=f"dispatch, {cap}, {layout}",
                customdata=rows[["wait_pct", "imbalance", "dropped"]].to_numpy(),
                hovertemplate="skew %{x}: %{y:.3g} ms<br>least-loaded rank waits "
                "%{customdata[0]:.0f}%<br>imbalance %{customdata[1]:.2f}x, dropped "
                "%{customdata[2]} tokens a rank<extra></extra>",
            )
        )
    fig.update_layout(
        title="MoE dispatch (slowest rank) against the routing's skew",
        xaxis_title="Zipf exponent of the experts' load (0: uniform)",
        yaxis_title="ms per dispatch",
        template="plotly_white",
        height=380,
    )
    return fig


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The MoE section, or nothing if no case was measured."""
    table = "moe"
    summary = analyzed.measured(table)
    if summary is None:
        return []
    first = summary.iloc[0]
    note = (
        f"{first['experts']} experts, top-{first['top_k']}, {first['tokens']} tokens of "
        f"{first['hidden']} {first['dtype']} values a rank, over {first['world_size']} ranks. "
        "Imbalance is the busiest rank's tokens over the mean; wait % is the share of the "
        "dispatch the least-loaded rank waits for the slowest."
    )
    blocks: list[Any] = [Note(text=note)]
    if (summary["skew"] != "histogram").any():
        blocks.append(Figures(html=[embed(_figure(summary))]))
    blocks.append(
        summary_table(summary, table, title="MoE summary", id="moe-summary", left=(1, 2, 3, 4))
    )
    return [
        Section(
            title="Mixture of experts: token dispatch and combine",
            anchor="moe",
            blocks=blocks,
            method=[METHOD],
        )
    ]


def nccl_tests(summary: Any, ranks: Sequence[Mapping[str, Any]] = ()) -> str:
    """The flat dispatches with equal splits (every rank sends every rank as many tokens: the
    imbalance 1, nothing dropped) in nccl-tests' layout, as alltoall_perf rows: size = a
    rank's dispatch buffer, the dispatch's time (the slowest rank's, median), busbw by the
    same convention, the ranks' lines as `nccl_tests_text` writes them; "" when there is
    none."""
    equal = summary[
        (summary["layout"] == "flat") & (summary["imbalance"] == 1.0) & (summary["dropped"] == 0)
    ]
    if equal.empty:
        return ""
    size = equal["kept_tokens"] * equal["hidden"] * equal["dtype"].map(DTYPE_BYTES)
    rows = equal.assign(
        op="all_to_all",
        scope="global",
        size_bytes=size.astype(int),
        in_place=False,
        redop="none",
        time_us=equal["dispatch_us"],
        algbw_gbps=size / equal["dispatch_us"] / 1e3,
    )
    return nccl_tests_text(rows, label="MoE dispatch, equal splits, ", ranks=ranks)
