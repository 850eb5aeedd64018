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

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from gpuprof.analysis import require_columns
from gpuprof.machine.clocks import decode_reasons
from gpuprof.runs.tables import group_codes, record_starts, rows_of

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
    records = rows_of(table, starts, [*CASE_KEYS, "rank", *once]).reset_index(drop=True)
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


def network_rows(telemetry: pd.DataFrame) -> np.ndarray:
    """Which samples count network bytes: the NICs but loopback, and InfiniBand ports."""
    src = telemetry["source"].astype(str)
    net = (src.str.startswith("nic:") & (src != "nic:lo")) | src.str.startswith("ib:")
    return np.asarray(net.to_numpy(), dtype=bool)


class _NetCounters:
    """Every host's cumulative NIC counters, sorted by host, source (in the order they first
    appear) and time at once; `sent(host, starts, ends)`: the bytes its sources sent in each
    window, each counter interpolated at the window's edges, summed; NaN where a source's
    samples do not cover the window (or a source has fewer than 2)."""

    def __init__(self, net: pd.DataFrame) -> None:
        grouping = net.groupby(["host", "source"], sort=False)
        ids = grouping.ngroup().to_numpy()
        order = np.lexsort((net["t_ns"].to_numpy(float), ids))
        self.t = net["t_ns"].to_numpy(float)[order]
        self.tx = net["tx_bytes"].to_numpy(float)[order] if len(net) else self.t
        bounds = np.searchsorted(ids[order], np.arange(grouping.ngroups + 1))
        self.slices: dict[Any, list[tuple[int, int]]] = {}
        for group, host in enumerate(grouping.size().index.get_level_values(0)):
            self.slices.setdefault(host, []).append((bounds[group], bounds[group + 1]))

    def sent(self, host: Any, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        total = np.zeros(len(starts))
        for a, b in self.slices.get(host, []):
            t, tx = self.t[a:b], self.tx[a:b]
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

    def total(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        total: np.ndarray = self.sum[hi] - self.sum[lo]
        return total

    def mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        count = self.count[hi] - self.count[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, (self.sum[hi] - self.sum[lo]) / count, np.nan)


class _GpuInstants:
    """Every host's GPU samples combined per sample instant, all hosts at once (rows sorted
    by host, then time; sums per instant by `reduceat` over the sorted rows, not a groupby
    per host): rows, each `_GPU_COLUMNS` value combined, flagged rows, clock-event reasons
    or-ed. `over(host, starts, ends)` reads a host's windows (inclusive edges) from prefix
    sums over its instants."""

    def __init__(self, gpus: pd.DataFrame) -> None:
        hosts, self.names = pd.factorize(gpus["host"].astype(str))
        times = gpus["t_ns"].to_numpy(dtype=float, na_value=np.nan)
        order = np.lexsort((times, hosts))
        hosts, times = hosts[order], times[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (hosts[1:] != hosts[:-1]) | (times[1:] != times[:-1])
        first = np.flatnonzero(new)  # each instant's first row
        self.host = hosts[first]
        self.t = times[first]
        self.samples = _Prefix(np.diff(np.append(first, len(order))).astype(float))

        def per_instant(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            values = values[order]
            finite = ~np.isnan(values)
            total = np.add.reduceat(np.where(finite, values, 0.0), first) if len(first) else values
            return total, np.add.reduceat(finite, first) if len(first) else finite

        self.values: dict[str, _Prefix] = {}
        for column, how in _GPU_COLUMNS:
            if column in gpus.columns:
                total, count = per_instant(gpus[column].to_numpy(dtype=float, na_value=np.nan))
                with np.errstate(invalid="ignore", divide="ignore"):
                    combined = total / count if how == "mean" else total  # mean or sum
                self.values[column] = _Prefix(np.where(count > 0, combined, np.nan))
        self.flags = {
            column: _Prefix(per_instant(_flag(gpus, column).to_numpy(float))[0])
            for column in ("throttled", "clock_low", "power_capped")
        }
        masks: np.ndarray = np.zeros(len(order), dtype=np.int64)
        if "clock_reasons" in gpus.columns:
            masks = gpus["clock_reasons"].fillna(0).astype("int64").to_numpy()[order]
        self.masks = np.bitwise_or.reduceat(masks, first) if len(first) else masks
        self.bounds = np.searchsorted(self.host, np.arange(len(self.names) + 1))

    def over(self, host: str, starts: np.ndarray, ends: np.ndarray) -> dict[str, Any] | None:
        """A host's GPU state over each window (None: no GPU samples from it): the number
        of samples, each column's per-instant combination averaged over the window's instants
        (NaN without a value, never zero), `throttled` if any sample had a slowdown reason,
        the reasons seen (power cap left out: shown, not held against a case), `clock_low`,
        and the share of samples at the power limit."""
        found = np.flatnonzero(self.names == host)
        if not len(found):
            return None
        a, b = self.bounds[found[0]], self.bounds[found[0] + 1]
        lo = a + np.searchsorted(self.t[a:b], starts, "left")
        hi = a + np.searchsorted(self.t[a:b], ends, "right")
        samples = np.rint(self.samples.total(lo, hi)).astype(int)
        out: dict[str, Any] = {"num_gpu_samples": samples}
        for column, _ in _GPU_COLUMNS:
            prefix = self.values.get(column)
            out[column] = prefix.mean(lo, hi) if prefix else np.full(len(starts), np.nan)
        out["throttled"] = self.flags["throttled"].total(lo, hi) > 0
        out["clock_reasons_seen"] = self._reasons(lo, hi)
        out["clock_low"] = self.flags["clock_low"].total(lo, hi) > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            share = 100.0 * self.flags["power_capped"].total(lo, hi) / samples
        out["power_capped_pct"] = np.where(samples > 0, share, np.nan)
        return out

    def _reasons(self, lo: np.ndarray, hi: np.ndarray) -> list[str]:
        """The clock-event reasons any instant of each window reported (a bit seen in a
        window: its count of instants with the bit, by prefix sums), named once per mask."""
        seen = np.zeros(len(lo), dtype=np.int64)
        present = int(np.bitwise_or.reduce(self.masks)) if len(self.masks) else 0
        for bit in (b for b in range(63) if present >> b & 1):
            with_bit = _Prefix(((self.masks >> bit) & 1).astype(float))
            seen |= np.where(with_bit.total(lo, hi) > 0, 1 << bit, 0)
        names = {
            mask: ",".join(r for r in sorted(decode_reasons(mask)) if r != "sw_power_cap")
            for mask in np.unique(seen).tolist()
        }
        return [names[mask] for mask in seen.tolist()]


def attribute(windows: pd.DataFrame, telemetry: pd.DataFrame) -> pd.DataFrame:
    """Each case window with the host's mean GPU utilization, power, NVLink and NIC
    throughput, sent bytes, the ratio to what the case had to send, and `throttled`.
    Vectorized per host (sample instants sorted, windows found by binary search, sums by
    prefix sums): a run of 1,024 ranks has tens of thousands of windows."""
    require_columns(telemetry, ["t_ns", "host", "source"], "telemetry")
    if windows.empty:
        return pd.DataFrame()
    # only the columns read here are taken
    used = ["t_ns", "host", *(c for c, _ in _GPU_COLUMNS)]
    used += ["throttled", "clock_low", "power_capped", "clock_reasons"]
    gpu = telemetry["source"].astype(str).str.startswith("gpu").to_numpy()
    gpus = telemetry.loc[gpu, [c for c in used if c in telemetry.columns]]
    chosen = [c for c in ("t_ns", "host", "source", "tx_bytes") if c in telemetry.columns]
    net = telemetry.loc[network_rows(telemetry), chosen]
    instants, counters = _GpuInstants(gpus), _NetCounters(net)
    windows = windows.reset_index(drop=True)  # a window's label is its position
    rows, added = [], defaultdict(list)  # each host's windows, and their new columns
    for host, part in windows.groupby("host", sort=False, dropna=False):  # every window
        starts, ends = part["start_ns"].to_numpy(float), part["end_ns"].to_numpy(float)
        sent = counters.sent(host, starts, ends)
        duration = np.maximum(part["duration_s"].to_numpy(float), 1e-9)
        state = instants.over(str(host), starts, ends) or _no_gpus(len(part))
        columns = {
            "num_gpu_samples": state.pop("num_gpu_samples"),
            "nic_tx_bytes": sent,
            "nic_tx_gbps": sent / duration / 1e9,
            **{column: state.pop(column) for column, _ in _GPU_COLUMNS},
            **state,
        }
        rows.append(part.index.to_numpy())
        for column, values in columns.items():
            added[column].append(values)
    position = np.concatenate(rows)  # where each host's windows stand among all
    frame = windows.copy()
    for column, pieces in added.items():
        whole = np.concatenate([np.asarray(p) for p in pieces])
        placed = np.empty_like(whole)
        placed[position] = whole
        frame[column] = placed.tolist() if placed.dtype.kind == "U" else placed  # text as str
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
