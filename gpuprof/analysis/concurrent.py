"""Two collectives at once on two process groups: each one's time beside the other against
alone, against the fair share of one shared bottleneck, and what running them together saves
over one after the other.

Per case (pair, size), means over rounds of the slowest rank's time in the round (what the
job waits for). Means, not medians: the fair share below is linear in the times, and a
collective over TCP switches between a fast and a slow way of running from round to round
(gloo's all_to_all on a shaped link: both directions at once, or one after the other, 2x
slower); a mean keeps the same mix on both sides of the comparison where a median flips from
one mode to the other.
- A/B alone, A/B beside: each op's time from the common start to its own finish;
- slowdown = beside / alone;
- fair share: if both ops are bound by one bottleneck that they share fairly while both run
  (processor sharing: each gets half its rate), the shorter one (alone t_s) ends at 2 t_s and
  the longer (t_l) at t_l + t_s; so A's slowdown under a fair share is 1 + min(t_a, t_b) / t_a.
  A measured slowdown near it says they share one link or engine; near 1, they do not
  contend; well above it, one starves the other;
- together = the later finish of the two; saving % = 1 - together / (A alone + B alone): what
  running them concurrently saves over one after the other (0 when they fully share one
  bottleneck, up to 50% when they do not contend at all).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprof.analysis import RunTables, require_columns

KEYS = ["pair", "size_bytes", "skew", "dtype", "world_size", "num_nodes", "group"]
PER_CASE = ["op_a", "op_b", "a_bytes", "b_bytes"]
TIMES = ["a_alone_us", "b_alone_us", "a_beside_us", "b_beside_us", "time_us"]


def fair_share(alone: pd.Series, other: pd.Series) -> pd.Series:
    """An op's slowdown beside another that shares its one bottleneck fairly, from both ops'
    times alone."""
    return 1 + pd.Series(np.minimum(alone, other), index=alone.index) / alone


def summarize_concurrent(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per pair and size."""
    require_columns(frame, [*KEYS, *PER_CASE, *TIMES, "rank", "iteration", "nwrong"], "concurrent")
    slowest = frame.groupby([*KEYS, "iteration"], sort=False)[TIMES].max()
    groups = frame.groupby(KEYS, sort=False)
    out = groups[PER_CASE].first().join(slowest.groupby(KEYS, sort=False).mean())
    out["nwrong"] = groups["nwrong"].max()
    out["num_iterations"] = groups["iteration"].nunique()
    out = out.reset_index().rename(columns={"time_us": "together_us"})
    out["a_slowdown"] = out["a_beside_us"] / out["a_alone_us"]
    out["b_slowdown"] = out["b_beside_us"] / out["b_alone_us"]
    out["a_fair_share"] = fair_share(out["a_alone_us"], out["b_alone_us"])
    out["b_fair_share"] = fair_share(out["b_alone_us"], out["a_alone_us"])
    serial = out["a_alone_us"] + out["b_alone_us"]
    out["saving_pct"] = (100 * (1 - out["together_us"] / serial)).round(1)
    ratios = ["a_slowdown", "b_slowdown", "a_fair_share", "b_fair_share"]
    out[ratios] = out[ratios].round(3)
    return out


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The concurrent-collectives summary of a run."""
    return summarize_concurrent(run.table("concurrent"))
