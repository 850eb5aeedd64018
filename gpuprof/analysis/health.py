"""What the hardware did during each measured case: telemetry attributed to case windows.

A case's window on a host runs from the earliest start to the latest end its ranks there
recorded (wall clock, the sampler's clock). Means are over the samples inside the window;
byte counts interpolate the cumulative NIC counters at the window's edges, so a case shorter
than a sampling period still gets its share. `throttled` is true when any GPU of the host
reported a slowing clock-event reason (power cap, thermal, HW slowdown) inside the window.

Network bytes are the non-loopback NICs plus InfiniBand ports (IPoIB traffic may appear on
both). For inter-node cases of ops whose per-rank traffic is fixed, `nic_ratio` compares the
bytes the host's NICs sent with the bytes the collective had to send from that host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpuprof.analysis import require_columns
from gpuprof.machine.clocks import decode_reasons

# what identifies a case window (a case of one group, on one host)
CASE_KEYS = ["probe", "case_id", "scope", "world_size", "group", "host"]


def per_rank_tx_bytes(op: str, size: int, n: int, group_rank: int) -> float | None:
    """Bytes one rank sends per operation, for ops where the algorithm does not matter."""
    if op == "sendrecv":
        return float(size)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return size * (n - 1) / n
    if op == "broadcast" and n == 2:
        return float(size) if group_rank == 0 else 0.0
    return None  # all_reduce, reduce, larger broadcasts: depends on the backend's algorithm


def case_windows(table: pd.DataFrame) -> pd.DataFrame:
    """One window per case and host, with the bytes its ranks there had to send."""
    require_columns(
        table,
        [
            *CASE_KEYS,
            "rank",
            "group_rank",
            "iteration",
            "start_unix_ns",
            "end_unix_ns",
            "warmup_iters",
        ],
        "probe",
    )
    ranks = (
        table.groupby([*CASE_KEYS, "rank"], sort=False)
        .agg(
            start=("start_unix_ns", "min"),
            end=("end_unix_ns", "max"),
            iterations=("iteration", "size"),
            warmup=("warmup_iters", "first"),
            group_rank=("group_rank", "first"),
            **(
                {
                    "op": ("op", "first"),
                    "size_bytes": ("size_bytes", "first"),
                    "nwrong": ("nwrong", "first"),
                }
                if "op" in table.columns
                else {}
            ),
        )
        .reset_index()
    )
    if "op" in ranks.columns:
        checked = ranks["nwrong"].notna().astype(int)
        ops = ranks["warmup"] + checked + ranks["iterations"]
        per_op = [
            per_rank_tx_bytes(op, int(s), int(n), int(g))
            for op, s, n, g in zip(
                ranks["op"],
                ranks["size_bytes"],
                ranks["world_size"],
                ranks["group_rank"],
                strict=True,
            )
        ]
        ranks["expected_tx_bytes"] = pd.Series(per_op, index=ranks.index, dtype="float") * ops
    else:
        ranks["expected_tx_bytes"] = np.nan
    windows = (
        ranks.groupby(CASE_KEYS, sort=False)
        .agg(
            start_ns=("start", "min"),
            end_ns=("end", "max"),
            expected_tx_bytes=("expected_tx_bytes", lambda s: s.sum(min_count=len(s))),
        )
        .reset_index()
    )
    windows["duration_s"] = (windows["end_ns"] - windows["start_ns"]) / 1e9
    return windows


def _network(telemetry: pd.DataFrame) -> pd.DataFrame:
    src = telemetry["source"].astype(str)
    net = (src.str.startswith("nic:") & (src != "nic:lo")) | src.str.startswith("ib:")
    return telemetry[net]


def _interp_bytes(net: pd.DataFrame, host: str, start: int, end: int) -> float:
    total = 0.0
    for _, rows in net[net["host"] == host].groupby("source"):
        t, tx = rows["t_ns"].to_numpy(float), rows["tx_bytes"].to_numpy(float)
        if len(t) < 2 or end < t[0] or start > t[-1]:
            return float("nan")  # the window is not covered by samples
        total += float(np.interp(end, t, tx) - np.interp(start, t, tx))
    return total


def _flag(samples: pd.DataFrame, column: str) -> pd.Series:
    if column not in samples.columns:
        return pd.Series(False, index=samples.index)
    return samples[column].astype("boolean").fillna(False).astype(bool)


def _clock_state(samples: pd.DataFrame) -> dict[str, Any]:
    """A case's clocks from its GPU samples: `throttled` if any sample had a slowdown reason
    or a busy clock under the floor (the case cannot be trusted), the reasons seen, and the
    share of samples at the power limit (shown, not held against the case)."""
    reasons = samples["clock_reasons"].dropna() if "clock_reasons" in samples else pd.Series([])
    seen = sorted({name for mask in reasons for name in decode_reasons(int(mask))})
    capped = _flag(samples, "power_capped")
    return {
        "throttled": bool(_flag(samples, "throttled").any()),
        "clock_reasons_seen": ",".join(r for r in seen if r != "sw_power_cap"),
        "clock_low": bool(_flag(samples, "clock_low").any()),
        "power_capped_pct": 100.0 * float(capped.mean()) if len(capped) else np.nan,
    }


def attribute(windows: pd.DataFrame, telemetry: pd.DataFrame) -> pd.DataFrame:
    """Each case window with the host's mean GPU utilization, power, NVLink and NIC
    throughput, sent bytes, the ratio to what the case had to send, and `throttled`."""
    require_columns(telemetry, ["t_ns", "host", "source"], "telemetry")
    gpus = telemetry[telemetry["source"].astype(str).str.startswith("gpu")]
    net = _network(telemetry)
    out = []
    for rec in windows.to_dict("records"):
        host, start, end = rec["host"], rec["start_ns"], rec["end_ns"]
        inside = gpus[(gpus["host"] == host) & gpus["t_ns"].between(start, end)]
        sent = _interp_bytes(net, host, start, end)
        duration = max(rec["duration_s"], 1e-9)
        row = {
            **rec,
            "num_gpu_samples": len(inside),
            "nic_tx_bytes": sent,
            "nic_tx_gbps": sent / duration / 1e9,
        }
        for column, how in (
            ("gpu_util_pct", "mean"),
            ("power_w", "sum"),
            ("nvlink_tx_gbps", "sum"),
            ("sm_clock_mhz", "mean"),
            ("app_clock_mhz", "mean"),
        ):
            if column in inside.columns and inside[column].notna().any():
                per_sample = inside.groupby("t_ns")[column]
                row[column] = float(getattr(per_sample, how)().mean())
            else:
                row[column] = np.nan  # missing, never zero
        row.update(_clock_state(inside))
        out.append(row)
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame["nic_ratio"] = frame["nic_tx_bytes"] / frame["expected_tx_bytes"]
    return frame


def node_series(telemetry: pd.DataFrame, host: str, max_points: int = 1500) -> pd.DataFrame:
    """One node's time series, one row per time bucket (means; `throttled` if any sample in
    the bucket was): CPU and GPU utilization, GPU power (sum), SM clock (mean), and network,
    NVLink and PCIe throughput (sums, both directions). At most `max_points` rows, so a long
    run stays small in the report."""
    rows = telemetry[telemetry["host"] == host]
    src = rows["source"].astype(str)
    parts = {}

    def per_time(mask: pd.Series, column: str, how: str) -> None:
        if column in rows.columns and rows.loc[mask, column].notna().any():
            parts[column] = rows[mask].groupby("t_ns")[column].agg(how)

    per_time(src == "host", "cpu_pct", "mean")
    gpu = src.str.startswith("gpu")
    per_time(gpu, "gpu_util_pct", "mean")
    per_time(gpu, "power_w", "sum")
    per_time(gpu, "sm_clock_mhz", "mean")
    net = (src.str.startswith("nic:") & (src != "nic:lo")) | src.str.startswith("ib:")
    for name, mask, columns in (
        ("network_gbps", net, ("tx_gbps", "rx_gbps")),
        ("nvlink_gbps", gpu, ("nvlink_tx_gbps", "nvlink_rx_gbps")),
        ("pcie_gbps", gpu, ("pcie_tx_gbps", "pcie_rx_gbps")),
    ):
        present = [c for c in columns if c in rows.columns and rows.loc[mask, c].notna().any()]
        if present:
            parts[name] = (
                rows[mask].groupby("t_ns")[present].sum(min_count=1).sum(axis=1, min_count=1)
            )
    if "throttled" in rows.columns and gpu.any():
        flags = rows.loc[gpu, ["t_ns", "throttled"]].copy()
        flags["throttled"] = flags["throttled"].astype("boolean").fillna(False).astype(bool)
        parts["throttled"] = flags.groupby("t_ns")["throttled"].any()
    if not parts:
        return pd.DataFrame(columns=["t_ns"])
    series = pd.DataFrame(parts).sort_index()
    series["t_ns"] = series.index.to_numpy(dtype="float64")
    bucket = np.floor(np.linspace(0, max_points, num=len(series), endpoint=False)).astype(int)
    grouped = series.groupby(bucket)
    out = grouped.mean(numeric_only=True)
    out["t_ns"] = out["t_ns"].astype("int64")
    if "throttled" in series.columns:
        out["throttled"] = grouped["throttled"].any().to_numpy()
    return out.reset_index(drop=True)


def probe_spans(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """When each probe ran on each host (for shading the time series)."""
    spans = []
    for probe, table in tables.items():
        if {"host", "start_unix_ns", "end_unix_ns"} <= set(table.columns):
            for host, rows in table.groupby("host"):
                spans.append(
                    {
                        "probe": probe,
                        "host": host,
                        "start_ns": rows["start_unix_ns"].min(),
                        "end_ns": rows["end_unix_ns"].max(),
                    }
                )
    return pd.DataFrame(spans, columns=["probe", "host", "start_ns", "end_ns"])
