"""Collectives matched across ranks: who arrived last, how long the others waited, how long
the transfer took after everyone was there, and the ranks that hold the job back.

Matching: by process group and sequence number where the trace has them (NCCL traces from
recent torch), else by process group, step, operation and order of issue within the step
(the k-th all_reduce of step N on every rank is the same collective: every rank issues a
group's collectives in the same order).

Per collective: arrival = its start on a rank (an NCCL kernel starts, then waits in the kernel
for its peers; a gloo worker starts the operation, then waits); wait = last arrival - first
arrival; a rank's own wait = last arrival - its arrival; transfer = first end after the last
arrival - the last arrival; busbw = bytes x the op's bus factor / transfer (nccl-tests).

Clocks: ranks on one host share a clock. Traces from several hosts are put on one clock by
each rank's median offset of collective ends (a collective ends within its last hop on every
rank), which is printed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuprof.traces.reader import Collective, RankTrace
from gpuprof.units import bus_factor

MIN_LATE_US = 50.0  # a rank later than this is late (below: scheduling noise)
STRAGGLER_SHARE_FEW = 0.9  # last in this share of collectives, with 2 or 3 ranks
STRAGGLER_SHARE = 0.5  # with more ranks
STRAGGLER_LEAD = 0.05  # ... by a median lead of this share of the step


def _keys(colls: Sequence[Collective], steps: dict[int, int | None]) -> list[tuple[Any, ...]]:
    """Each collective's matching key on its rank."""
    if colls and all(c.seq is not None for c in colls):
        return [("seq", c.pg, c.seq) for c in colls]
    counts: dict[tuple[Any, ...], int] = defaultdict(int)
    keys = []
    for i, c in enumerate(colls):
        base = (c.pg, steps[i], c.op)
        keys.append(("order", *base, counts[base]))
        counts[base] += 1
    return keys


def step_of(times: np.ndarray, steps: list[tuple[int, float, float]]) -> list[int | None]:
    """The step number each time falls in (None outside every step)."""
    out: list[int | None] = []
    starts = np.array([s[1] for s in steps])
    for t in times:
        i = int(np.searchsorted(starts, t, side="right")) - 1
        out.append(steps[i][0] if i >= 0 and t < steps[i][2] else None)
    return out


def rank_collectives(trace: RankTrace) -> pd.DataFrame:
    """One rank's collectives with their step and matching key, in order of arrival."""
    colls = sorted(trace.collectives, key=lambda c: c.start)
    steps, rank = trace.steps, trace.rank
    anchor = trace.launch_times(
        np.array([c.corr for c in colls], np.int64), np.array([c.start for c in colls], float)
    )
    in_step = step_of(anchor, steps) if steps else [None] * len(colls)
    keys = _keys(colls, dict(enumerate(in_step)))
    return pd.DataFrame(
        {
            "rank": rank,
            "key": keys,
            "op": [c.op for c in colls],
            "pg": [c.pg for c in colls],
            "seq": [c.seq for c in colls],
            "step": in_step,
            "nbytes": [c.nbytes for c in colls],
            "group_size": [c.group_size for c in colls],
            "start_us": [c.start for c in colls],
            "end_us": [c.end for c in colls],
        }
    )


def clock_offsets(arrivals: pd.DataFrame, hosts: dict[int, str | None]) -> dict[int, float]:
    """Per rank, what to subtract from its times to put it on the job's clock: 0 on one host;
    across hosts, the rank's median (end - the collective's median end)."""
    if len(set(hosts.values())) <= 1 or arrivals.empty:
        return dict.fromkeys(hosts, 0.0)
    median_end = arrivals.groupby("key")["end_us"].transform("median")
    offset = (arrivals["end_us"] - median_end).groupby(arrivals["rank"]).median()
    return {rank: float(offset.get(rank, 0.0)) for rank in hosts}


def match(arrivals: pd.DataFrame, world_size: int) -> pd.DataFrame:
    """One row per collective seen by two or more ranks: wait, transfer, busbw, last rank."""
    rows = []
    for key, group in arrivals.groupby("key", sort=False):
        if len(group) < 2:
            continue
        starts = group["start_us"].to_numpy()
        order = np.argsort(starts)
        last = starts[order[-1]]
        ends = group["end_us"].to_numpy()
        done = ends[ends >= last]
        transfer = float(done.min() - last) if done.size else math.nan
        size = group["group_size"].dropna()
        n = int(size.iloc[0]) if len(size) else world_size
        first = group.iloc[0]
        nbytes = float(group["nbytes"].median())
        busbw = (
            nbytes / transfer / 1e3 * bus_factor(first["op"], n)
            if transfer > 0 and nbytes == nbytes and n > 1
            else math.nan
        )
        rows.append(
            {
                "key": str(key),
                "op": first["op"],
                "pg": first["pg"],
                "seq": first["seq"],
                "step": group["step"].dropna().min() if group["step"].notna().any() else None,
                "nbytes": nbytes,
                "group_size": n,
                "ranks": len(group),
                "first_arrival_us": float(starts[order[0]]),
                "last_arrival_us": float(last),
                "last_rank": int(group["rank"].to_numpy()[order[-1]]),
                "held_us": float(last - starts[order[-2]]),  # the last rank's lead over the rest
                "wait_us": float(last - starts[order[0]]),
                "mean_wait_us": float(np.mean(last - starts)),
                "transfer_us": transfer,
                "busbw_gbps": busbw,
            }
        )
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values("first_arrival_us", kind="stable").reset_index(drop=True)
    return frame


def rank_waits(arrivals: pd.DataFrame, matched: pd.DataFrame) -> pd.DataFrame:
    """Per rank: its own wait at collectives (last arrival - its arrival), summed."""
    if matched.empty:
        return pd.DataFrame(columns=["rank", "count", "wait_us"])
    last = matched.set_index("key")["last_arrival_us"]
    rows = arrivals[arrivals["key"].astype(str).isin(last.index)].copy()
    rows["wait_us"] = last.reindex(rows["key"].astype(str)).to_numpy() - rows["start_us"]
    out = rows.groupby("rank").agg(count=("key", "size"), wait_us=("wait_us", "sum"))
    return out.reset_index()


def stragglers(matched: pd.DataFrame, steps: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """Per rank: how often it arrived last (by more than MIN_LATE_US), by how much (median
    of its lead over the next-latest rank), the others' wait it caused per step, and whether
    its compute or its input is slower than the others' (step medians); `straggler` marks the
    rank that holds the job back, when one does."""
    columns = [
        "rank",
        "times_last",
        "share_last",
        "held_median_us",
        "caused_wait_per_step_us",
        "compute_delta_us",
        "input_delta_us",
        "cause",
        "straggler",
    ]
    if matched.empty or not ranks:
        return pd.DataFrame(columns=columns)
    late = matched[matched["held_us"] > MIN_LATE_US]
    n_steps = max(1, steps["step"].nunique()) if not steps.empty else 1
    medians = (
        steps.groupby("rank")[["compute_us", "input_us"]].median() if not steps.empty else None
    )
    threshold = STRAGGLER_SHARE_FEW if len(ranks) <= 3 else STRAGGLER_SHARE
    median_step = float(steps.groupby("step")["span_us"].max().median()) if not steps.empty else 0
    rows = []
    for rank in ranks:
        mine = late[late["last_rank"] == rank]
        held = float(mine["held_us"].median()) if len(mine) else 0.0
        caused = float((mine["mean_wait_us"] * mine["ranks"]).sum())  # the others' waits
        deltas = {"computation": 0.0, "input": 0.0}
        if medians is not None and rank in medians.index and len(medians) > 1:
            others = medians.drop(index=rank).median()
            deltas = {
                "computation": float(medians.loc[rank, "compute_us"] - others["compute_us"]),
                "input": float(medians.loc[rank, "input_us"] - others["input_us"]),
            }
        share = len(mine) / len(matched)
        flagged = share >= threshold and held >= max(MIN_LATE_US, STRAGGLER_LEAD * median_step)
        slower = {k: v for k, v in deltas.items() if v >= 0.5 * held and held > 0}
        cause = max(slower, key=lambda k: slower[k]) if slower else "neither"
        rows.append(
            {
                "rank": rank,
                "times_last": len(mine),
                "share_last": share,
                "held_median_us": held,
                "caused_wait_per_step_us": caused / n_steps,
                "compute_delta_us": deltas["computation"],
                "input_delta_us": deltas["input"],
                "cause": cause if flagged else "",
                "straggler": flagged,
            }
        )
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["straggler", "caused_wait_per_step_us"], ascending=False).reset_index(
        drop=True
    )
