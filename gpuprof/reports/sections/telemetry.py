"""The telemetry section (every run, not a probe): per-node time series with the probes'
phases, and the bytes the NICs counted against the bytes inter-node cases had to send."""

from __future__ import annotations

from typing import Any

from gpuprof.analysis.health import node_series, probe_spans
from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import node_figure
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


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Node time series and the NIC-bytes check, or nothing without telemetry."""
    if not analyzed.has("telemetry"):
        return []
    telemetry = analyzed.run.table("telemetry")
    spans = probe_spans(analyzed.timed_tables())
    figures = [
        embed(node_figure(node_series(telemetry, str(host)), spans, str(host)))
        for host in sorted(telemetry["host"].unique())
    ]
    blocks: list[Any] = [Note(text=NOTE), Figures(html=figures, grid=False)]
    attributed = analyzed.attributed()
    if not attributed.empty:
        checked = attributed[
            attributed["expected_tx_bytes"].notna() & (attributed["duration_s"] >= 0.5)
        ]
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
