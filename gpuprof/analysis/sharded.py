"""Sharded data parallelism: per strategy and world size, the step broken down against a
communication-free twin, bytes sent and memory held per rank against theory, weak scaling.

Per case (strategy, scope, group), medians over every rank's iterations:

- step = median over iterations of the slowest rank's step; samples/s = ranks x samples per
  step / step; weak-scaling efficiency = samples/s(n) / (n x samples/s(1)) of the same
  strategy against its one-rank (`single`) case;
- forward, backward, optimizer: the strategy's own phases (each includes the communication it
  waits for); compute: the twin's phases (the plain model, the optimizer over what this rank's
  optimizer holds); exposed communication = the strategy's phases - the twin's, per round
  (both in the same round, so drift cancels): communication the step waits for plus the
  strategy's own overhead (FSDP's copies, DTensor dispatch), which a one-rank case shows
  alone;
- hidden share = 1 - exposed / the step's collectives replayed alone, where those are at
  least 1% of the step;
- sent bytes and memory per rank: the largest over the case's ranks (ZeRO-1 partitions whole
  parameters, so shares differ), against the theory for the strategy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis import RunTables, require_columns
from gpuprof.analysis.ddp import weak_efficiency

KEYS = ["scope", "world_size", "num_nodes", "group", "case_id"]
PHASES = ["forward_us", "backward_us", "optimizer_us"]
TWIN = [f"twin_{p}" for p in PHASES]
MIN_COMM_SHARE = 0.01
PER_CASE = [
    "strategy",
    "num_params",
    "hidden",
    "layers",
    "batch",
    "seq",
    "samples_per_step",
    "theory_sent_bytes",
    "theory_memory_bytes",
]
PER_RANK_MAX = ["sent_bytes", "memory_bytes", "param_bytes", "grad_bytes", "optim_bytes"]


def summarize_sharded(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case and group: the breakdown, traffic, memory, throughput, efficiency."""
    require_columns(
        frame,
        [*KEYS, "rank", "iteration", "time_us", *PHASES, *TWIN, "comm_only_us", *PER_CASE],
        "sharded",
    )
    rows = frame.copy()
    by = [rows[k] for k in KEYS]
    rows["exposed_comm_us"] = rows[PHASES].sum(axis=1) - rows[TWIN].sum(axis=1)
    groups = rows.groupby(KEYS, sort=False)
    step = rows.groupby([*KEYS, "iteration"], sort=False)["time_us"].max().groupby(KEYS).median()
    med = groups[[*PHASES, *TWIN, "exposed_comm_us", "comm_only_us", "time_us"]].median()
    out = groups[PER_CASE].first().join(med.rename(columns={"time_us": "rank_step_us"}))
    out = out.join(groups[[c for c in PER_RANK_MAX if c in rows]].max())
    if "peak_bytes" in rows and rows["peak_bytes"].notna().any():
        out["peak_bytes"] = groups["peak_bytes"].max()
    out["step_us"] = step
    out["num_iterations"] = groups["iteration"].nunique()
    parts = rows[TWIN].sum(axis=1) + rows["exposed_comm_us"]
    out["sum_pct"] = (100 * parts / rows["time_us"]).groupby(by).median()
    out["compute_us"] = out[TWIN].sum(axis=1)
    out["exposed_pct"] = 100 * out["exposed_comm_us"] / out["rank_step_us"]
    n = out.index.get_level_values("world_size")
    # one rank alone communicates nothing: its replay is local copies, its excess overhead
    significant = (out["comm_only_us"] >= MIN_COMM_SHARE * out["rank_step_us"]) & (n > 1)
    hidden = 1 - out["exposed_comm_us"] / out["comm_only_us"]
    out["hidden_pct"] = (100 * hidden.clip(0, 1)).where(significant)
    out["sent_ratio"] = _ratio(out["sent_bytes"], out["theory_sent_bytes"])
    out["memory_ratio"] = _ratio(out["memory_bytes"], out["theory_memory_bytes"])
    out["samples_per_s"] = n * out["samples_per_step"] / (out["step_us"] / 1e6)
    out = out.reset_index()
    out["efficiency"] = weak_efficiency(out)
    return out


def _ratio(measured: pd.Series, theory: pd.Series) -> pd.Series:
    """measured / theory where the theory is not zero (one rank sends nothing)."""
    ratio: pd.Series = measured / theory.where(theory > 0, np.nan)
    return ratio


def largest(summary: pd.DataFrame) -> pd.DataFrame:
    """Every strategy at the job's size (the global scope), fastest first."""
    rows = summary[summary["scope"] == "global"]
    ordered: pd.DataFrame = rows.sort_values("samples_per_s", ascending=False)
    return ordered.reset_index(drop=True)


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The sharded summary of a run."""
    return summarize_sharded(run.table("sharded"))
