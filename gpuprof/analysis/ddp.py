"""DDP step breakdown by two methods, and weak-scaling efficiency.

Per case (variant, scope, group), medians over every rank's iterations:

- DDP's logging data (sample rate 1): forward (from the forward's start to the first gradient,
  the loss included), backward compute (first to last gradient), communication (first bucket
  launched to last bucket done), overlap (communication while backward still computed);
  exposed communication = communication - overlap. With gradient accumulation the k-1
  `no_sync` micro-batches add their own forward and backward (own timers).
- A/B runs: the same step with a no-op comm hook keeps all of DDP but the all_reduce, so
  communication cost = step - noop step (median of the differences within each round); its
  hidden share = 1 - cost / (the same buckets' all_reduces alone); headroom = cost / step.
  The step with every micro-batch under `no_sync` is compute only; noop step - no_sync step
  is DDP's own overhead (bucket copies, hooks). Indirect cost = A/B cost - logged exposed
  communication: compute slowed down beside communication (shared cores on CPU, SMs and
  memory on GPU), waits.
- Communication per sample = the transfer time (per step the shortest communication of any
  rank: the last rank to reach the all_reduce waits for nobody) / samples per step.
- Step = median over iterations of the slowest rank's step; samples/s = ranks x samples per
  step / step. Weak-scaling efficiency = samples/s(n) / (n x samples/s(1)) for the first
  variant, against its one-rank (`single`) case.

An overlap share is shown only where communication is at least 1% of the step: a ratio of
two near-zero times is noise, not a finding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis import RunTables, require_columns

KEYS = ["scope", "world_size", "num_nodes", "group", "case_id"]
COMPONENTS = ["forward_us", "backward_compute_us", "exposed_comm_us", "optimizer_us"]
MIN_COMM_SHARE = 0.01


def with_components(frame: pd.DataFrame) -> pd.DataFrame:
    """Per-row forward, backward compute, exposed communication (logging data, plus the
    accumulation micro-batches' own timers); the sync micro-batch's own timers where DDP's
    logging data is missing."""
    rows = frame.copy()
    local_fwd = rows.get("local_forward_us", pd.Series(0.0, index=rows.index)).fillna(0.0)
    local_bwd = rows.get("local_backward_us", pd.Series(0.0, index=rows.index)).fillna(0.0)
    logged = rows["log_forward_us"].notna() if "log_forward_us" in rows else None
    if logged is not None and logged.any():
        rows["forward_us"] = rows["log_forward_us"] + local_fwd
        rows["backward_compute_us"] = rows["log_backward_compute_us"] + local_bwd
        rows["comm_us"] = rows["log_comm_us"]
        rows["overlap_us"] = rows["log_overlap_us"]
        rows["exposed_comm_us"] = (rows["comm_us"] - rows["overlap_us"]).clip(lower=0)
    else:  # no logging data: the backward call's wall time holds compute and exposed comm
        rows["forward_us"] = rows["sync_forward_us"] + local_fwd
        rows["backward_compute_us"] = rows["sync_backward_us"] + local_bwd
        for col in ("comm_us", "overlap_us", "exposed_comm_us"):
            rows[col] = np.nan
    return rows


def summarize_ddp(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case and group: the step broken down by both methods, throughput and
    weak-scaling efficiency."""
    require_columns(
        frame,
        [
            *KEYS,
            "rank",
            "iteration",
            "time_us",
            "samples_per_step",
            "optimizer_us",
            "sync_forward_us",
            "sync_backward_us",
            "nosync_step_us",
            "noop_step_us",
            "comm_only_us",
        ],
        "ddp",
    )
    rows = with_components(frame)
    groups = rows.groupby(KEYS, sort=False)
    step = rows.groupby([*KEYS, "iteration"], sort=False)["time_us"].max().groupby(KEYS).median()
    med = groups[
        [
            *COMPONENTS,
            "comm_us",
            "overlap_us",
            "time_us",
            "nosync_step_us",
            "noop_step_us",
            "comm_only_us",
        ]
    ].median()
    first = groups[
        ["variant", "samples_per_step", "accum", "num_params", "hidden", "layers", "batch", "seq"]
    ].first()
    out = first.join(med.rename(columns={"time_us": "rank_step_us"}))
    out["step_us"] = step
    out["num_iterations"] = groups["iteration"].nunique()
    if "canary_per_s" in rows:  # CPU: the canary after each round's DDP step (its runs/s)
        out["canary"] = groups["canary_per_s"].median()
    parts = rows[COMPONENTS].sum(axis=1, min_count=len(COMPONENTS))
    out["sum_pct"] = (100 * parts / rows["time_us"]).groupby([rows[k] for k in KEYS]).median()
    out["exposed_pct"] = 100 * out["exposed_comm_us"] / out["rank_step_us"]
    significant = out["comm_only_us"] >= MIN_COMM_SHARE * out["rank_step_us"]
    out["overlap_log_pct"] = (100 * out["overlap_us"] / out["comm_us"]).where(significant)
    # paired: each step against the noop step of the same round (drift cancels)
    out["comm_cost_ab_us"] = (
        (rows["time_us"] - rows["noop_step_us"]).groupby([rows[k] for k in KEYS]).median()
    )
    out["ddp_overhead_us"] = (
        (rows["noop_step_us"] - rows["nosync_step_us"]).groupby([rows[k] for k in KEYS]).median()
    )
    hidden = 1 - out["comm_cost_ab_us"] / out["comm_only_us"]
    out["overlap_ab_pct"] = (100 * hidden.clip(0, 1)).where(significant)
    out["comm_cost_ab_pct"] = 100 * out["comm_cost_ab_us"] / out["rank_step_us"]
    out["indirect_comm_us"] = out["comm_cost_ab_us"] - out["exposed_comm_us"]
    out["headroom_pct"] = 100 * (1 - out["noop_step_us"] / out["rank_step_us"])
    out["samples_per_s"] = (
        out.index.get_level_values("world_size") * out["samples_per_step"] / (out["step_us"] / 1e6)
    )
    # how much one rank's step without communication varies, over ranks and iterations (a
    # robust coefficient of variation: half the 16th-84th percentile range over the median):
    # what the slowest of N ranks adds to every step (gpuprof.predict.ddp)
    noop = groups["noop_step_us"]
    out["step_spread"] = (noop.quantile(0.84) - noop.quantile(0.16)) / 2 / noop.median()
    # the last rank to reach the all_reduce sees the transfer alone; the others also wait
    transfer = rows.groupby([*KEYS, "iteration"], sort=False)["comm_us"].min()
    out["comm_transfer_us"] = transfer.groupby(KEYS).median()
    comm = out["comm_transfer_us"].fillna(out["comm_only_us"])
    out["comm_per_sample_us"] = comm / out["samples_per_step"]
    out = out.reset_index()
    out["efficiency"] = weak_efficiency(out)
    return out


def weak_efficiency(summary: pd.DataFrame) -> pd.Series:
    """samples/s(n) / (n x samples/s(1)) per case id (variant, strategy) that was measured on
    one rank alone."""
    single = summary[summary["scope"] == "single"].set_index("case_id")["samples_per_s"]
    base = summary["case_id"].map(single)
    efficiency: pd.Series = summary["samples_per_s"] / (summary["world_size"] * base)
    return efficiency


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """The weak-scaling rows: the first variant at every world size, smallest first."""
    single = summary[summary["scope"] == "single"]
    if single.empty:
        return summary.iloc[0:0]
    variant = single["case_id"].iloc[0]
    rows = summary[summary["case_id"] == variant]
    ordered: pd.DataFrame = rows.sort_values(["world_size", "num_nodes", "scope"])
    return ordered.reset_index(drop=True)


def variants(summary: pd.DataFrame) -> pd.DataFrame:
    """Every variant in the global scope (where all were measured), with its gain against the
    first one (`gain_pct` > 0: more samples per second)."""
    largest = summary[summary["scope"] == "global"].reset_index(drop=True)
    if largest.empty:
        return largest
    base = largest["samples_per_s"].iloc[0]
    largest["gain_pct"] = 100 * (largest["samples_per_s"] / base - 1)
    return largest


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The DDP summary of a run."""
    return summarize_ddp(run.table("ddp"))


def overview(summary: pd.DataFrame) -> pd.DataFrame:
    """The report overview's rows: the first variant at every world size, as % of its step:
    compute (forward + backward compute + optimizer) and exposed communication."""
    rows = []
    for r in scaling(summary).to_dict("records"):
        step = float(r["rank_step_us"])
        if step <= 0:
            continue
        compute = float(r["forward_us"] + r["backward_compute_us"] + r["optimizer_us"])
        exposed = float(r["exposed_comm_us"]) if pd.notna(r["exposed_comm_us"]) else 0.0
        rows.append(
            {
                "label": f"DDP {r['scope']} n={r['world_size']}",
                "compute time": 100 * compute / step,
                "exposed communication": 100 * exposed / step,
            }
        )
    return pd.DataFrame(rows)
