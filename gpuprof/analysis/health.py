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
from gpuprof.runs.tables import group_codes, record_starts

# what identifies a case window (a case of one group, on one host)
CASE_KEYS = ["probe", "case_id", "scope", "world_size", "group", "host"]
OP_COLUMNS = ("op", "size_bytes", "nwrong")  # what a collective's window sends


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
    # one row per record, its window and iterations from its rows (a 1,024-rank run has 30
    # million rows, 80 a record), then grouped by one integer per case window and rank
    starts = record_starts(table)
    once = ["warmup_iters", "group_rank", *(OP_COLUMNS if "op" in table.columns else ())]
    records = table.iloc[starts][[*CASE_KEYS, "rank", *once]].reset_index(drop=True)
    if len(starts):
        records["start_unix_ns"] = np.fmin.reduceat(table["start_unix_ns"].to_numpy(), starts)
        records["end_unix_ns"] = np.fmax.reduceat(table["end_unix_ns"].to_numpy(), starts)
    else:
        records["start_unix_ns"] = records["end_unix_ns"] = np.zeros(0)
    records["iterations"] = np.diff(np.append(starts, len(table)))
    codes = group_codes(records, [*CASE_KEYS, "rank"])
    first = np.unique(codes, return_index=True)[1]
    ranks = (
        records.groupby(codes, sort=True)
        .agg(
            start=("start_unix_ns", "min"),
            end=("end_unix_ns", "max"),
            iterations=("iterations", "sum"),
            warmup=("warmup_iters", "first"),
            group_rank=("group_rank", "first"),
            **({c: (c, "first") for c in OP_COLUMNS} if "op" in table.columns else {}),
        )
        .reset_index(drop=True)
    )
    keys = records[[*CASE_KEYS, "rank"]].iloc[first].reset_index(drop=True)
    ranks = pd.concat([keys, ranks], axis=1)
    if "op" in ranks.columns:
        checked = ranks["nwrong"].notna().astype(int)
        ops = ranks["warmup"] + checked + ranks["iterations"]
        per_op = [
            per_rank_tx_bytes(op, int(s), int(n), int(g))
            for op, s, n, g in zip(
                ranks["op"].tolist(),  # lists: iterating arrow's text is slow
                ranks["size_bytes"].tolist(),
                ranks["world_size"].tolist(),
                ranks["group_rank"].tolist(),
                strict=True,
            )
        ]
        ranks["expected_tx_bytes"] = pd.Series(per_op, index=ranks.index, dtype="float") * ops
    else:
        ranks["expected_tx_bytes"] = np.nan
    by_window = ranks.groupby(CASE_KEYS, sort=False)
    windows = by_window.agg(start_ns=("start", "min"), end_ns=("end", "max")).reset_index()
    # what the window's ranks had to send: missing unless every rank's is known
    known = by_window["expected_tx_bytes"].count().to_numpy() == by_window.size().to_numpy()
    windows["expected_tx_bytes"] = np.where(
        known, by_window["expected_tx_bytes"].sum().to_numpy(), np.nan
    )
    windows["duration_s"] = (windows["end_ns"] - windows["start_ns"]) / 1e9
    return windows


def _network(telemetry: pd.DataFrame) -> pd.DataFrame:
    src = telemetry["source"].astype(str)
    net = (src.str.startswith("nic:") & (src != "nic:lo")) | src.str.startswith("ib:")
    return telemetry[net]


def _sent_bytes(net: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """One host's sent bytes in each window: every network source's cumulative counter
    interpolated at the window's edges, summed; NaN where a source's samples do not cover
    the window."""
    total = np.zeros(len(starts))
    for _, rows in net.groupby("source", sort=False):
        rows = rows.sort_values("t_ns")
        t, tx = rows["t_ns"].to_numpy(float), rows["tx_bytes"].to_numpy(float)
        if len(t) < 2:
            return np.full(len(starts), np.nan)
        covered = (ends >= t[0]) & (starts <= t[-1])
        total += np.where(covered, np.interp(ends, t, tx) - np.interp(starts, t, tx), np.nan)
    return total


def _flag(samples: pd.DataFrame, column: str) -> pd.Series:
    if column not in samples.columns:
        return pd.Series(False, index=samples.index)
    return samples[column].astype("boolean").fillna(False).astype(bool)


# per GPU sample instant of a host: how the GPUs' values combine (then averaged over a window)
_GPU_COLUMNS = (
    ("gpu_util_pct", "mean"),
    ("power_w", "sum"),
    ("nvlink_tx_gbps", "sum"),
    ("sm_clock_mhz", "mean"),
    ("app_clock_mhz", "mean"),
)


class _Prefix:
    """Sums over sample instants [lo, hi) in O(1): cumulative sums of values and counts."""

    def __init__(self, values: np.ndarray) -> None:
        finite = ~np.isnan(values)
        self.sum = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
        self.count = np.concatenate([[0], np.cumsum(finite)])

    def mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        count = self.count[hi] - self.count[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, (self.sum[hi] - self.sum[lo]) / count, np.nan)


def _gpu_state(gpus: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> dict[str, Any]:
    """One host's GPU samples over each window (inclusive edges): the number of samples, the
    per-instant combination of each column averaged over the window's instants (NaN without a
    value, never zero), `throttled` if any sample had a slowdown reason, the reasons seen
    (power cap left out: shown, not held against a case), `clock_low`, and the share of
    samples at the power limit."""
    by_t = gpus.groupby("t_ns", sort=True)
    t = by_t.size().index.to_numpy(float)
    lo, hi = np.searchsorted(t, starts, "left"), np.searchsorted(t, ends, "right")

    def in_window(per_instant: pd.Series) -> np.ndarray:
        """Each window's sum of a per-instant count."""
        prefix = _Prefix(per_instant.to_numpy(float))
        return np.asarray(prefix.sum[hi] - prefix.sum[lo])

    def flagged(column: str) -> np.ndarray:
        """Each window's samples with the flag set."""
        return in_window(_flag(gpus, column).groupby(gpus["t_ns"]).sum())

    samples = np.rint(in_window(by_t.size())).astype(int)
    out: dict[str, Any] = {"num_gpu_samples": samples}
    for column, how in _GPU_COLUMNS:
        if column in gpus.columns and gpus[column].notna().any():
            per_t = by_t[column].agg(how) if how == "mean" else by_t[column].sum(min_count=1)
            out[column] = _Prefix(per_t.to_numpy(float)).mean(lo, hi)
        else:
            out[column] = np.full(len(starts), np.nan)
    out["throttled"] = flagged("throttled") > 0
    out["clock_reasons_seen"] = _reasons_seen(gpus, len(t), lo, hi)
    out["clock_low"] = flagged("clock_low") > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        share = 100.0 * flagged("power_capped") / samples
    out["power_capped_pct"] = np.where(samples > 0, share, np.nan)
    return out


def _reasons_seen(gpus: pd.DataFrame, instants: int, lo: np.ndarray, hi: np.ndarray) -> list[str]:
    """The clock-event reasons any sample of each window reported (the power cap left out)."""
    masks = np.zeros(instants, dtype=np.int64)
    if "clock_reasons" in gpus.columns:
        reasons = gpus["clock_reasons"].fillna(0).astype("int64")
        masks = reasons.groupby(gpus["t_ns"]).agg(np.bitwise_or.reduce).to_numpy(np.int64)
    seen = []
    for a, b in zip(lo, hi, strict=True):
        mask = int(np.bitwise_or.reduce(masks[a:b])) if b > a else 0
        seen.append(",".join(r for r in sorted(decode_reasons(mask)) if r != "sw_power_cap"))
    return seen


def attribute(windows: pd.DataFrame, telemetry: pd.DataFrame) -> pd.DataFrame:
    """Each case window with the host's mean GPU utilization, power, NVLink and NIC
    throughput, sent bytes, the ratio to what the case had to send, and `throttled`.
    Vectorized per host (sample instants sorted, windows found by binary search, sums by
    prefix sums): a run of 1,024 ranks has tens of thousands of windows."""
    require_columns(telemetry, ["t_ns", "host", "source"], "telemetry")
    if windows.empty:
        return pd.DataFrame()
    # only the columns read here are split by host (a copy of each host's rows)
    used = ["t_ns", "host", *(c for c, _ in _GPU_COLUMNS)]
    used += ["throttled", "clock_low", "power_capped", "clock_reasons"]
    gpu = telemetry["source"].astype(str).str.startswith("gpu").to_numpy()
    gpus = telemetry.loc[gpu, [c for c in used if c in telemetry.columns]]
    net = _network(telemetry)
    net = net[[c for c in ("t_ns", "host", "source", "tx_bytes") if c in net.columns]]
    gpus_of = dict(tuple(gpus.groupby("host", sort=False)))
    net_of = dict(tuple(net.groupby("host", sort=False)))
    parts = []
    for host, part in windows.groupby("host", sort=False):
        starts, ends = part["start_ns"].to_numpy(float), part["end_ns"].to_numpy(float)
        sent = _sent_bytes(net_of[host], starts, ends) if host in net_of else np.zeros(len(part))
        duration = np.maximum(part["duration_s"].to_numpy(float), 1e-9)
        host_gpus = gpus_of.get(host, gpus.iloc[:0])
        state = _gpu_state(host_gpus, starts, ends) if len(host_gpus) else _no_gpus(len(part))
        columns = {
            "num_gpu_samples": state.pop("num_gpu_samples"),
            "nic_tx_bytes": sent,
            "nic_tx_gbps": sent / duration / 1e9,
            **{column: state.pop(column) for column, _ in _GPU_COLUMNS},
            **state,
        }
        parts.append(part.assign(**columns))
    frame = pd.concat(parts).loc[windows.index].reset_index(drop=True)
    frame["nic_ratio"] = frame["nic_tx_bytes"] / frame["expected_tx_bytes"]
    return frame


def _no_gpus(count: int) -> dict[str, Any]:
    """A host without GPU samples: nothing measured, nothing throttled."""
    nan = np.full(count, np.nan)
    return {
        "num_gpu_samples": np.zeros(count, dtype=int),
        **{column: nan for column, _ in _GPU_COLUMNS},
        "throttled": np.zeros(count, dtype=bool),
        "clock_reasons_seen": [""] * count,
        "clock_low": np.zeros(count, dtype=bool),
        "power_capped_pct": nan,
    }


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

    def per_time(mask: pd.Series, columns: list[str], how: str) -> pd.Series:
        chosen = mask.to_numpy()
        frame = telemetry.loc[chosen, columns]
        grouped = frame.groupby([hosts[chosen], times[chosen]])
        if how == "total":  # summed over the node's devices, then over the columns
            return grouped.sum(min_count=1).sum(axis=1, min_count=1)
        return grouped[columns[0]].agg(how)

    def measured(mask: pd.Series, columns: list[str]) -> np.ndarray:
        chosen = mask.to_numpy()
        present = telemetry.loc[chosen, columns].notna().any(axis=1).to_numpy()
        return np.unique(hosts[chosen][present])

    gpu = src.str.startswith("gpu")
    net = (src.str.startswith("nic:") & (src != "nic:lo")) | src.str.startswith("ib:")
    for name, mask, columns, how in (
        ("cpu_pct", src == "host", ("cpu_pct",), "mean"),
        ("cpu_max_pct", src == "host", ("cpu_max_pct",), "max"),
        ("gpu_util_pct", gpu, ("gpu_util_pct",), "mean"),
        ("power_w", gpu, ("power_w",), "sum"),
        ("sm_clock_mhz", gpu, ("sm_clock_mhz",), "mean"),
        ("network_gbps", net, ("tx_gbps", "rx_gbps"), "total"),
        ("nvlink_gbps", gpu, ("nvlink_tx_gbps", "nvlink_rx_gbps"), "total"),
        ("pcie_gbps", gpu, ("pcie_tx_gbps", "pcie_rx_gbps"), "total"),
    ):
        present = [c for c in columns if c in telemetry.columns]
        if present:
            parts[name] = (per_time(mask, present, how), measured(mask, present))
    if "throttled" in telemetry.columns:
        flags = telemetry["throttled"].astype("boolean").fillna(False).astype(bool)
        chosen = gpu.to_numpy()
        any_flag = flags[chosen].groupby([hosts[chosen], times[chosen]]).any()
        parts["throttled"] = (any_flag, np.unique(hosts[chosen]))
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
            records = table.iloc[starts][["host", "start_unix_ns", "end_unix_ns"]]
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
