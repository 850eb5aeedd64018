"""Collective bandwidth with nccl-tests semantics (docs/methodology.md;
nccl-tests doc/PERFORMANCE.md).

algbw = S / t with S the nccl-tests "size" column; busbw = algbw x a per-op factor that makes
numbers comparable with the unidirectional link bandwidth. A collective ends when its slowest
rank does, so each iteration's time is the max over the group's ranks; the case's time is the
median of those maxima (never a mean of per-rank bandwidths).
"""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd

from gpuprof.analysis import RunTables, gpu_model, grouped, require_columns, slowest_iterations
from gpuprof.errors import UsageError
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.runs.tables import record_starts
from gpuprof.units import bus_factor

SUMMARY_KEYS = [
    "case_id",
    "op",
    "dtype",
    "redop",
    "size_bytes",
    "in_place",
    "scope",
    "group",
    "world_size",
    "num_nodes",
]
SUMMARY_COLUMNS = [
    *SUMMARY_KEYS,
    "time_us",
    "time_us_p99",
    "time_us_min",
    "num_iterations",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_p10_gbps",  # from the 90th percentile of the iteration times
    "busbw_p90_gbps",  # from the 10th
    "nwrong",
]


# what tells one case of one group from another (the other summary keys follow from them)
CASE_GROUP = ["case_id", "scope", "world_size", "group"]


def summarize_collectives(frame: pd.DataFrame) -> pd.DataFrame:
    """One summary row per case and group, as `gpuprof show --table collectives` prints it.
    Grouped by one integer per case and group (`grouped`): a 1,024-rank run has 30 million
    rows, and grouping on the ten key columns took most of `show`."""
    require_columns(frame, [*SUMMARY_KEYS, "iteration", "time_us", "rank", "nwrong"], "collectives")
    if frame.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    starts = record_starts(frame)  # a record's own values (its rank, nwrong) read once
    case, keys = grouped(frame, CASE_GROUP, SUMMARY_KEYS, starts)
    per_iter = slowest_iterations(frame, case)
    summary = pd.DataFrame(
        {
            "time_us": per_iter.median(),
            "time_us_p99": per_iter.quantile(0.99),
            "time_us_min": per_iter.min(),
            "time_us_p10": per_iter.quantile(0.1),
            "time_us_p90": per_iter.quantile(0.9),
            "num_iterations": per_iter.size(),
        }
    )
    nwrong = pd.Series(frame["nwrong"].to_numpy()[starts])
    ranks = frame["rank"].to_numpy()[starts]
    wrong = nwrong.groupby([case[starts], ranks], sort=False).first()
    # min_count=1: a case nobody checked (--no-check) stays missing, never "0 wrong".
    summary["nwrong"] = wrong.groupby(level=0).sum(min_count=1)
    summary = pd.concat([keys, summary.set_axis(keys.index)], axis=1)
    summary["algbw_gbps"] = summary["size_bytes"] / summary["time_us"] / 1e3
    pairs = zip(summary["op"], summary["world_size"], strict=True)
    factors = [bus_factor(op, n) for op, n in pairs]
    factor = pd.Series(factors, index=summary.index)
    summary["busbw_gbps"] = summary["algbw_gbps"] * factor
    summary["busbw_p10_gbps"] = summary["size_bytes"] / summary["time_us_p90"] / 1e3 * factor
    summary["busbw_p90_gbps"] = summary["size_bytes"] / summary["time_us_p10"] / 1e3 * factor
    summary["nwrong"] = summary["nwrong"].astype("Int64")
    order = ["scope", "world_size", "group", "op", "in_place", "dtype", "size_bytes"]
    return summary[SUMMARY_COLUMNS].sort_values(order, kind="stable").reset_index(drop=True)


def collective_pct_of_peak(summary: pd.DataFrame, info: dict[str, Any]) -> pd.Series:
    """busbw as % of the GPU's NVLink rate per direction, for single-node scopes; else empty
    (a network scope's peak would need the rank-to-NIC mapping)."""
    peaks = gpu_peaks(gpu_model(info))
    link = peaks.nvlink_gbps if peaks else None
    if not link:
        return pd.Series([None] * len(summary), index=summary.index, dtype="object")
    pct = 100 * summary["busbw_gbps"] / link
    return pct.where(summary["num_nodes"] == 1)


def measured_busbw(run: RunTables) -> pd.DataFrame:
    """What a run measured of the collectives, for comparing a job's own collectives with
    (op, size_bytes, world_size, busbw_gbps); a UsageError when it measured none."""
    if "collectives" not in run.tables():
        raise UsageError(
            f"run {run.info.get('run_id')} measured no collectives",
            "give a sweep that ran the collectives probe",
        )
    return summarize_collectives(run.table("collectives"))


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The collectives summary of a run, with % of the link for single-node scopes."""
    summary = summarize_collectives(run.table("collectives"))
    summary["pct_of_peak"] = collective_pct_of_peak(summary, run.info)
    return summary


STEP = 1.5  # a step between two measured sizes is slow past this margin over the bytes
CURVE = ["op", "dtype", "redop", "scope", "group", "world_size", "num_nodes"]
STEP_COLUMNS = [*CURVE, "size_small", "size_large", "time_small", "time_large", "ratio", "kind"]


def slow_steps(summary: pd.DataFrame) -> pd.DataFrame:
    """Where a collective's time moves against its bytes between two neighbouring measured
    sizes of one curve: a "jump" where the larger size takes STEP x more than its bytes
    explain (time grows at most as fast as the bytes: a latency plus bytes over a rate), a
    "drop" where the smaller size takes STEP x the larger one's time. Each side against the
    other's 99th-percentile iteration (noise is not a step), and where the curve was measured
    in place and out of place, in both (one curve's outlier is not a step); a size with no
    time is as if not measured. Columns
    STEP_COLUMNS (times us, the out-of-place ones where measured; ratio: the larger time over
    the smaller, or the smaller over the larger for a drop)."""
    found: dict[tuple[object, ...], list[tuple[object, ...]]] = {}
    places: dict[tuple[object, ...], int] = {}
    measured = summary[summary["time_us"].notna() & summary["size_bytes"].notna()]
    for key, curve in measured.groupby([*CURVE, "in_place"], sort=False, dropna=False):
        *shape, in_place = key
        points = curve.sort_values("size_bytes")
        rows = list(
            zip(
                points["size_bytes"].astype(float),
                points["time_us"],
                points["time_us_p99"].fillna(points["time_us"]),
                strict=True,
            )
        )
        for (s1, t1, p1), (s2, t2, p2) in itertools.pairwise(rows):
            pair = (*shape, s1, s2)
            places[pair] = places.get(pair, 0) + 1
            if not (s1 > 0 and t1 > 0 and t2 > 0):
                continue
            if t2 >= STEP * (s2 / s1) * p1:
                found.setdefault(pair, []).append((in_place, t1, t2, t2 / t1, "jump"))
            elif t1 >= STEP * p2:
                found.setdefault(pair, []).append((in_place, t1, t2, t1 / t2, "drop"))
    out = []
    for pair, seen in found.items():
        if len(seen) < places[pair] or len({s[-1] for s in seen}) > 1:
            continue
        first = min(seen, key=lambda s: bool(s[0]))  # out of place first
        out.append((*pair, *first[1:]))
    return pd.DataFrame(out, columns=STEP_COLUMNS)
