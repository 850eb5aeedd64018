"""Mixture-of-experts dispatch and combine: per routing and layout, the layer's time (the
slowest rank's), what the least-loaded rank waits, bytes against the routing's theory,
dropped tokens and the bus bandwidth by nccl-tests' all_to_all convention.

Per case (skew, capacity factor, placement, layout), medians over iterations:
- dispatch / combine = the slowest rank's time in the iteration (what the layer waits for);
- wait % = (slowest - fastest) / slowest rank's dispatch: the share of the layer's dispatch
  the least-loaded rank spends waiting for the others;
- sent = the bytes each rank passed to other ranks in a dispatch (both stages of a
  hierarchical one), counted at the call; / theory = their sum over the routing plan's;
- busbw = algbw x (n - 1) / n with algbw = the bytes of a rank's dispatch buffer (its kept
  tokens x hidden x dtype, every rank alike) / dispatch time: nccl-tests' all_to_all
  convention, so equal splits read like its alltoall.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis import RunTables, require_columns
from gpuprof.units import DTYPE_BYTES

KEYS = ["skew", "capacity_factor", "placement", "layout", "world_size", "num_nodes", "group"]
PER_CASE = ["experts", "top_k", "tokens", "hidden", "dtype", "kept_tokens", "dropped", "imbalance"]


def summarize_moe(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per routing and layout."""
    parts = ["dispatch_us", "combine_us", "sent_bytes", "theory_sent_bytes"]
    require_columns(frame, [*KEYS, "rank", "iteration", *parts, *PER_CASE, "nwrong"], "moe")
    per_iter = frame.groupby([*KEYS, "iteration"], sort=False)
    slowest = per_iter[["dispatch_us", "combine_us"]].max()
    fastest = per_iter["dispatch_us"].min()
    wait = 100 * (slowest["dispatch_us"] - fastest) / slowest["dispatch_us"]
    groups = frame.groupby(KEYS, sort=False)
    out = groups[PER_CASE].first()
    out = out.join(slowest.groupby(KEYS, sort=False).median())
    out["wait_pct"] = wait.groupby(KEYS, sort=False).median()
    per_rank = frame.groupby([*KEYS, "rank"], sort=False)[["sent_bytes", "theory_sent_bytes"]]
    sent = per_rank.median().groupby(KEYS, sort=False)
    out["max_sent_bytes"] = sent["sent_bytes"].max()
    out["mean_sent_bytes"] = sent["sent_bytes"].mean()
    theory = sent["theory_sent_bytes"].sum()
    out["sent_ratio"] = sent["sent_bytes"].sum() / theory.where(theory > 0, np.nan)
    out["nwrong"] = groups["nwrong"].max()
    out["num_iterations"] = groups["iteration"].nunique()
    out = out.reset_index()
    out["imbalance"] = out["imbalance"].round(3)
    width = out["hidden"] * out["dtype"].map(DTYPE_BYTES)
    n = out["world_size"]
    algbw = out["kept_tokens"] * width / out["dispatch_us"] / 1e3  # GB/s
    out["busbw_gbps"] = algbw * (n - 1) / n
    return out


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The MoE summary of a run."""
    return summarize_moe(run.table("moe"))
