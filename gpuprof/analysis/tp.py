"""Tensor parallelism: per layer kind and world size, the split layer against the compute it
leaves each rank, the activation all_reduces alone, bytes against theory, strong scaling.

Per case (layer, scope, group), medians over every rank's iterations:

- layer = median over iterations of the slowest rank's forward + backward;
- compute = the twin's forward + backward (this rank's shard as plain layers); exposed
  communication = the split layer's time - the twin's, per round (waits on the all_reduces
  plus DTensor's own overhead, which the one-rank case shows alone);
- comm_only = the layer's all_reduces replayed alone; comm/compute > 1 means the link needs
  longer to move the activations than the ranks need to compute the layer: nothing can hide
  it, and splitting further makes it worse;
- speedup = layer(one rank) / layer(n); efficiency = speedup / n (strong scaling: the same
  tokens, the layer split n ways).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis import RunTables, require_columns

KEYS = ["scope", "world_size", "num_nodes", "group", "case_id"]
PER_CASE = ["layer", "hidden", "batch", "seq", "tokens", "theory_sent_bytes", "activation_bytes"]


def summarize_tp(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case and group."""
    steps = ["forward_us", "backward_us", "twin_forward_us", "twin_backward_us", "comm_only_us"]
    require_columns(frame, [*KEYS, "rank", "iteration", "time_us", *steps, *PER_CASE], "tp")
    rows = frame.copy()
    by = [rows[k] for k in KEYS]
    rows["compute_us"] = rows["twin_forward_us"] + rows["twin_backward_us"]
    rows["exposed_comm_us"] = rows["time_us"] - rows["compute_us"]
    groups = rows.groupby(KEYS, sort=False)
    layer = rows.groupby([*KEYS, "iteration"], sort=False)["time_us"].max().groupby(KEYS).median()
    out = groups[PER_CASE].first()
    counts = ["sent_bytes", "num_collectives", "replayed_collectives", "params_per_rank"]
    out = out.join(groups[[c for c in counts if c in rows.columns]].max())
    out = out.join(groups[[*steps, "compute_us"]].median())
    out["exposed_comm_us"] = rows["exposed_comm_us"].groupby(by).median()
    out["layer_us"] = layer
    out["num_iterations"] = groups["iteration"].nunique()
    n = out.index.get_level_values("world_size")
    out["comm_vs_compute"] = (out["comm_only_us"] / out["compute_us"]).where(n > 1)
    theory = out["theory_sent_bytes"]
    out["sent_ratio"] = out["sent_bytes"] / theory.where(theory > 0, np.nan)
    out = out.reset_index()
    single = out[out["scope"] == "single"].set_index("case_id")["layer_us"]
    out["speedup"] = out["case_id"].map(single) / out["layer_us"]
    out["efficiency"] = out["speedup"] / out["world_size"]
    return out


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The tensor-parallel summary of a run."""
    return summarize_tp(run.table("tp"))
