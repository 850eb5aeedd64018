"""Each node's counters over time, for the report's figures, and when each probe ran on
each host (the phases shaded behind them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis.health import network_rows
from gpuprof.runs.tables import record_starts, rows_of


def node_series(telemetry: pd.DataFrame, host: str, max_points: int = 1500) -> pd.DataFrame:
    """One node's time series (`nodes_series` of its samples)."""
    found = nodes_series(telemetry[telemetry["host"].astype(str) == host], max_points)
    return found.get(host, pd.DataFrame(columns=["t_ns"]))


def nodes_series(telemetry: pd.DataFrame, max_points: int = 1500) -> dict[str, pd.DataFrame]:
    """Each node's time series, one row per time bucket (means; `throttled` if any sample in
    the bucket was): CPU (mean and busiest core) and GPU utilization, GPU power (sum), SM
    clock (mean), and network, NVLink and PCIe throughput (sums, both directions); a series
    a node never measured is left out of its frame. At most `max_points` rows a node, so a
    long run stays small in the report. Every node's samples are aggregated at once, keyed
    by node and sample time (node by node, 128 nodes took 9 s)."""
    hosts, names = pd.factorize(telemetry["host"].astype(str), sort=True)
    times = telemetry["t_ns"].to_numpy()
    src = telemetry["source"].astype(str)
    parts: dict[str, tuple[pd.Series, np.ndarray]] = {}  # by (host, t_ns); hosts measured
    gpu = src.str.startswith("gpu").to_numpy()
    kinds = {"host": (src == "host").to_numpy(), "gpu": gpu, "net": network_rows(telemetry)}
    series = (
        ("cpu_pct", "host", ("cpu_pct",), "mean"),
        ("cpu_max_pct", "host", ("cpu_max_pct",), "max"),
        ("gpu_util_pct", "gpu", ("gpu_util_pct",), "mean"),
        ("power_w", "gpu", ("power_w",), "sum"),
        ("sm_clock_mhz", "gpu", ("sm_clock_mhz",), "mean"),
        ("network_gbps", "net", ("tx_gbps", "rx_gbps"), "total"),
        ("nvlink_gbps", "gpu", ("nvlink_tx_gbps", "nvlink_rx_gbps"), "total"),
        ("pcie_gbps", "gpu", ("pcie_tx_gbps", "pcie_rx_gbps"), "total"),
    )
    for kind, chosen in kinds.items():
        # each kind's rows and columns taken once, grouped by node and time once (a groupby
        # keeps its groups for every aggregation): 3 M samples of 128 nodes
        wanted = [c for _, k, cols, _ in series if k == kind for c in cols if c in telemetry]
        if kind == "gpu" and "throttled" in telemetry.columns:
            wanted.append("throttled")
        if not wanted:
            continue
        frame = telemetry.loc[chosen, wanted]
        grouped = frame.groupby([hosts[chosen], times[chosen]])
        for name, _, columns, how in (s for s in series if s[1] == kind):
            present = [c for c in columns if c in telemetry.columns]
            if not present:
                continue
            if how == "total":  # summed over the node's devices, then over the columns
                part = grouped[present].sum(min_count=1).sum(axis=1, min_count=1)
            else:
                part = grouped[present[0]].agg(how)
            measured_by = frame[present].notna().any(axis=1).to_numpy()
            parts[name] = (part, np.unique(hosts[chosen][measured_by]))
        if kind == "gpu" and "throttled" in telemetry.columns:
            flags = frame["throttled"].astype("boolean").fillna(False).astype(bool)
            any_flag = flags.groupby([hosts[chosen], times[chosen]]).any()
            parts["throttled"] = (any_flag, np.unique(hosts[chosen]))
    order = [name for name, *_ in series] + ["throttled"]  # each node's columns in this order
    parts = {name: parts[name] for name in order if name in parts}
    mine: dict[int, dict[str, pd.Series]] = {host: {} for host in range(len(names))}
    for name, (part, measured_by) in parts.items():
        # sorted by host: each host's rows are one slice
        code = part.index.get_level_values(0).to_numpy()
        bounds = np.searchsorted(code, measured_by, side="left")
        ends = np.searchsorted(code, measured_by, side="right")
        for host, a, b in zip(measured_by.tolist(), bounds, ends, strict=True):
            mine[host][name] = part.iloc[a:b].droplevel(0)
    return {
        str(names[host]): _decimated(pd.DataFrame(series), max_points)
        for host, series in mine.items()
    }


def _decimated(series: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """A node's series by sample time -> at most `max_points` rows (means of equal buckets;
    throttled if any sample in the bucket was)."""
    if series.empty and not len(series.columns):
        return pd.DataFrame(columns=["t_ns"])
    series = series.sort_index()
    series["t_ns"] = series.index.to_numpy(dtype="float64")
    bucket = np.floor(np.linspace(0, max_points, num=len(series), endpoint=False)).astype(int)
    grouped = series.groupby(bucket)
    out = grouped.mean(numeric_only=True)
    out["t_ns"] = out["t_ns"].astype("int64")
    if "throttled" in series.columns:
        out["throttled"] = grouped["throttled"].any().to_numpy()
    return out.reset_index(drop=True)


def probe_spans(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """When each probe ran on each host (for shading the time series), from each record's
    first row (`record_starts`: a record's window is on every one of its rows)."""
    spans = []
    for probe, table in tables.items():
        if {"host", "start_unix_ns", "end_unix_ns"} <= set(table.columns):
            starts = record_starts(table)
            records = rows_of(table, starts, ["host", "start_unix_ns", "end_unix_ns"])
            for host, rows in records.groupby("host"):
                spans.append(
                    {
                        "probe": probe,
                        "host": host,
                        "start_ns": rows["start_unix_ns"].min(),
                        "end_ns": rows["end_unix_ns"].max(),
                    }
                )
    return pd.DataFrame(spans, columns=["probe", "host", "start_ns", "end_ns"])
