"""The telemetry section (every run, not a probe): per-node time series with the probes'
phases, and the bytes the NICs counted against the bytes inter-node cases had to send."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.series import nodes_series, probe_spans
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures_telemetry import node_figure
from gpuprof.reports.sections import Figures, Note, Section, Table, embed
from gpuprof.units import format_size

NOTE = (
    "One sampler per node (NVML per GPU where available, and host CPU, memory, NIC and "
    "InfiniBand counters), on the wall clock of the probes' phase markers; probe phases "
    "shaded; throttled samples marked with a red x. Long runs are averaged into at most 1500 "
    "points per series. A metric a device does not support is absent, never drawn as zero."
)
NIC_NOTE = (
    "Cases of at least 0.5 s with a fixed per-rank traffic (sendrecv, all_gather, "
    "reduce_scatter, all_to_all, 2-rank broadcast); sent bytes interpolated from the "
    "cumulative NIC counters at the case's edges. Protocol headers make the ratio slightly "
    "above 1; far above means other traffic shared the NIC, far below that traffic took "
    "another path."
)


# a figure per node up to this many nodes; beyond, every node in a table and figures of the
# first node and of those that stand out (throttled samples, then the lowest GPU utilization)
MAX_NODE_FIGURES = 8
MAX_NIC_ROWS = 50  # beyond, the cases whose NIC bytes are farthest from what they had to send


def _mean(frame: pd.DataFrame, column: str) -> float:
    return float(frame[column].mean()) if column in frame.columns else float("nan")


def standing_out(series: dict[str, pd.DataFrame]) -> list[str]:
    """The nodes whose figures the report draws: every node up to MAX_NODE_FIGURES; beyond,
    the first node and then the most throttled and least busy ones."""
    hosts = list(series)
    if len(hosts) <= MAX_NODE_FIGURES:
        return hosts

    def rank(host: str) -> tuple[float, float]:
        frame = series[host]
        throttled = float(frame["throttled"].sum()) if "throttled" in frame.columns else 0.0
        util = _mean(frame, "gpu_util_pct")
        return (-throttled, util if util == util else float("inf"))

    others = sorted(hosts[1:], key=rank)
    return [hosts[0], *others[: MAX_NODE_FIGURES - 1]]


def node_table(series: dict[str, pd.DataFrame], shown: list[str]) -> Table:
    """One row per node: the means of its counters over the run, and its throttled samples."""
    columns = (("cpu_pct", "CPU %"), ("gpu_util_pct", "GPU util %"), ("power_w", "GPU W"),
               ("network_gbps", "network GB/s"), ("nvlink_gbps", "NVLink GB/s"))  # fmt: skip
    rows = []
    for host, frame in series.items():
        cells = [f"{_mean(frame, c):.1f}" if c in frame.columns else "-" for c, _ in columns]
        throttled = int(frame["throttled"].sum()) if "throttled" in frame.columns else 0
        rows.append([host, *cells, str(throttled), "yes" if host in shown else ""])
    return Table(
        title=f"Every node ({len(series)}): means over the run",
        intro=f"Figures below for {len(shown)} of them: the first node, then those with the "
        "most throttled samples and the lowest GPU utilization.",
        header=["node", *(label for _, label in columns), "throttled samples", "figure"],
        rows=rows,
        left=(1,),
        scroll=True,
    )


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Node time series and the NIC-bytes check, or nothing without telemetry."""
    if not analyzed.has("telemetry"):
        return []
    telemetry = analyzed.run.table("telemetry")
    spans = probe_spans(analyzed.timed_tables())
    series = nodes_series(telemetry)
    shown = standing_out(series)
    figures = [embed(node_figure(series[host], spans, host)) for host in shown]
    blocks: list[Any] = [Note(text=NOTE)]
    if len(shown) < len(series):
        blocks.append(node_table(series, shown))
    blocks.append(Figures(html=figures, grid=False))
    attributed = analyzed.attributed()
    if not attributed.empty:
        checked = attributed[
            attributed["expected_tx_bytes"].notna() & (attributed["duration_s"] >= 0.5)
        ]
        if len(checked) > MAX_NIC_ROWS:  # the cases farthest from what they had to send
            far = (checked["nic_ratio"] - 1).abs().sort_values(ascending=False, na_position="first")
            checked = checked.loc[far.index[:MAX_NIC_ROWS]]
        rows = [
            [
                r["host"],
                r["scope"],
                str(r["world_size"]),
                r["case_id"],
                format_size(r["expected_tx_bytes"]),
                format_size(r["nic_tx_bytes"]),
                f"{r['nic_ratio']:.2f}",
            ]
            for r in checked.to_dict("records")
        ]
        if rows:
            blocks.append(
                Table(
                    title="Bytes the NICs counted against bytes the cases had to send",
                    intro=NIC_NOTE,
                    header=["host", "scope", "n", "case", "expected", "NIC sent", "ratio"],
                    rows=rows,
                    left=(1, 2, 4),
                    scroll=False,
                )
            )
    return [Section(title="Telemetry: what the hardware did", anchor="telemetry", blocks=blocks)]
