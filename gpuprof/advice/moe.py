"""Mixture of experts: what routing skew costs the layer, and what to change.

- hot experts: the most skewed routing's dispatch against the uniform one's (same capacity,
  placement, layout): when it is 20% or more slower, the finding gives the imbalance and the
  least-loaded rank's wait, and the fixes (place experts by load, a capacity factor that
  drops the excess, or more replicas of the hot experts);
- a capacity factor that brings the skewed dispatch back near uniform, with what it drops;
- hierarchical against flat: the saving (or the cost) across nodes.
"""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed

SLOWER = 1.2  # a skewed dispatch this much slower than uniform is worth a finding


def _numeric(summary: pd.DataFrame) -> pd.DataFrame:
    rows = summary[summary["skew"] != "histogram"].copy()
    rows["skew_value"] = rows["skew"].astype(float)
    return rows


def moe_findings(summary: pd.DataFrame) -> list[str]:
    """Findings from a MoE summary."""
    found = []
    rows = _numeric(summary)
    same = ["capacity_factor", "placement", "layout"]
    for (factor, placement, layout), group in rows.groupby(same, sort=True):
        uniform = group[group["skew_value"] == 0]
        if uniform.empty or len(group) < 2:
            continue
        worst = group.iloc[int(group["skew_value"].to_numpy().argmax())]
        ratio = worst["dispatch_us"] / uniform.iloc[0]["dispatch_us"]
        if ratio >= SLOWER and not factor:
            found.append(
                f"Hot experts: at skew {worst['skew']} ({placement}, {layout}) the dispatch "
                f"takes {ratio:.2f}x the uniform routing's ({worst['dispatch_us'] / 1e3:.3g} "
                f"ms): the busiest rank receives {worst['imbalance']:.2f}x the mean, and the "
                f"least-loaded rank waits {worst['wait_pct']:.0f}% of the dispatch. Place "
                "experts by load (or replicate the hot ones), or set a capacity factor that "
                "drops the excess."
            )
    capped = rows[rows["capacity_factor"] > 0]
    for _, row in capped.iterrows():
        free = rows[
            (rows["capacity_factor"] == 0)
            & (rows["skew"] == row["skew"])
            & (rows["placement"] == row["placement"])
            & (rows["layout"] == row["layout"])
        ]
        if free.empty or not row["dropped"]:
            continue
        saved = 1 - row["dispatch_us"] / free.iloc[0]["dispatch_us"]
        if saved >= 0.15:
            found.append(
                f"Capacity factor {row['capacity_factor']:g} at skew {row['skew']}: the "
                f"dispatch is {100 * saved:.0f}% shorter, dropping {row['dropped']} of "
                f"{row['tokens'] * row['top_k']} token choices a rank "
                f"({100 * row['dropped'] / (row['tokens'] * row['top_k']):.1f}%)."
            )
    keys = ["skew", "capacity_factor", "placement"]
    flat, hier = (rows[rows["layout"] == layout] for layout in ("flat", "hierarchical"))
    both = flat.merge(hier, on=keys, suffixes=("", "_h"))
    if not both.empty:
        saving = 1 - (both["dispatch_us_h"] / both["dispatch_us"]).median()
        verb = "saves" if saving > 0 else "costs"
        found.append(
            f"Hierarchical dispatch (inside the node, then across nodes) {verb} "
            f"{100 * abs(saving):.0f}% of the flat dispatch's time (median over "
            f"{len(both)} routings)."
        )
    return found


def findings(analyzed: Analyzed) -> list[str]:
    """The MoE findings of a run."""
    summary = analyzed.measured("moe")
    return [] if summary is None else moe_findings(summary)
