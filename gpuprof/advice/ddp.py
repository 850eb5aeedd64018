"""DDP: exposed communication, headroom and weak-scaling rules over the DDP summary."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.advice.memory import memory_findings
from gpuprof.analysis.ddp import scaling, variants
from gpuprof.analysis.summary import Analyzed

EXPOSED_LIMIT_PCT = 20.0
HEADROOM_LIMIT_PCT = 10.0
EFFICIENCY_LIMIT = 0.8


def _where(row: dict[str, Any]) -> str:
    nodes = f", {row['num_nodes']} nodes" if row["num_nodes"] > 1 else ""
    scope = {
        "inter": "inter-node (one rank per node)",
        "intra": "intra-node",
        "global": "global",
        "single": "one rank",
    }.get(row["scope"], row["scope"])
    group = f" {row['group']}" if row["scope"] == "intra" and row["group"] else ""
    return f"{scope}{group} n={row['world_size']}{nodes}"


def _best_variant(summary: pd.DataFrame) -> str:
    """'the best measured variant X: +G% samples/s (a vs b)', or '' if none beats the first."""
    rows = variants(summary)
    if len(rows) < 2:
        return ""
    best = rows.iloc[int(rows["samples_per_s"].to_numpy().argmax())]
    if best["gain_pct"] <= 0:
        return (
            f" No measured variant beat {rows['case_id'].iloc[0]} "
            f"({', '.join(rows['case_id'].iloc[1:])})."
        )
    return (
        f" Measured best variant: {best['case_id']}, {best['gain_pct']:+.0f}% samples/s "
        f"({best['samples_per_s']:.4g} vs {rows['samples_per_s'].iloc[0]:.4g} in the global "
        "scope)" + _how(str(best["case_id"])) + "."
    )


def _how(variant: str) -> str:
    actions = {
        "bucket": "set DistributedDataParallel(bucket_cap_mb=...)",
        "hook": "register_comm_hook(None, default_hooks.<fp16|bf16>_compress_hook)",
        "accum": "accumulate gradients under model.no_sync() for k-1 of every k micro-batches",
        "grad_view": "gradient_as_bucket_view=True",
        "static_graph": "static_graph=True",
        "amp": "bf16 autocast",
    }
    keys = [part.partition("=")[0] for part in variant.split("+")]
    said = [actions[key] for key in keys if key in actions]
    return f": {'; '.join(said)}" if said else ""


def ddp_findings(summary: pd.DataFrame) -> list[str]:
    """Exposed communication, headroom and weak-scaling rules over the DDP summary."""
    if summary.empty:
        return []
    findings = []
    first = summary["case_id"].iloc[0]
    base = summary[summary["case_id"] == first]
    base = base.assign(share=base["exposed_pct"].fillna(base["comm_cost_ab_pct"]))
    exposed = base[base["share"] > EXPOSED_LIMIT_PCT].sort_values("share", ascending=False)
    for i, row in enumerate(exposed.to_dict("records")):
        logged = (
            f"exposed communication is {row['exposed_pct']:.0f}% of the step "
            f"({row['exposed_comm_us'] / 1e3:.3g} of {row['rank_step_us'] / 1e3:.3g} ms, DDP "
            "logging data)"
            if pd.notna(row["exposed_pct"])
            else "DDP logging data missing"
        )
        findings.append(
            f"DDP {_where(row)}: {logged}; A/B: communication costs "
            f"{row['comm_cost_ab_pct']:.0f}% of the step ({first})."
            + (_best_variant(summary) if i == 0 else "")
        )
    glob = base[base["scope"] == "global"]
    said = set(exposed["scope"])  # a scope whose communication was called costly above
    if not glob.empty and "global" not in said:  # (the two would contradict each other)
        row = glob.iloc[0]
        if row["headroom_pct"] < HEADROOM_LIMIT_PCT and row["world_size"] > 1:
            findings.append(
                f"DDP global n={row['world_size']}: with a no-op comm hook the step is only "
                f"{row['headroom_pct']:.0f}% faster ({row['noop_step_us'] / 1e3:.1f} vs "
                f"{row['rank_step_us'] / 1e3:.1f} ms): communication is not the bottleneck; "
                "look at compute (batch size, mixed precision, kernels)."
            )
    findings += _scaling_findings(scaling(summary))
    return findings


def _scaling_findings(rows: pd.DataFrame) -> list[str]:
    """Weak-scaling efficiency under 80% at the largest world size: which scope loses it."""
    if rows.empty or rows["efficiency"].isna().all():
        return []
    top = rows[rows["world_size"] == rows["world_size"].max()]
    top = top[top["scope"] == "global"] if (top["scope"] == "global").any() else top
    worst = top.iloc[int(top["efficiency"].to_numpy().argmin())]
    if worst["efficiency"] >= EFFICIENCY_LIMIT:
        return []
    parts = []
    for scope in ("intra", "inter"):
        sub = rows[rows["scope"] == scope]
        if not sub.empty:
            widest = sub[sub["world_size"] == sub["world_size"].max()]
            low = widest.iloc[int(widest["efficiency"].to_numpy().argmin())]
            parts.append(
                f"{_where(low.to_dict())} keeps {low['efficiency']:.0%} "
                f"(exposed communication {low['exposed_pct']:.0f}% of its step)"
            )
    intra = rows[rows["scope"] == "intra"]
    if worst["num_nodes"] > 1 and not intra.empty:
        kept = intra[intra["world_size"] == intra["world_size"].max()]["efficiency"].min()
        lost = 100 * (kept - worst["efficiency"])
        loss = (
            f"the loss is across nodes: {kept:.0%} inside a node, "
            f"{worst['efficiency']:.0%} with every node, {lost:.0f} points lost between nodes"
        )
        if kept < EFFICIENCY_LIMIT:
            loss = f"the loss starts inside a node already ({kept:.0%} there)"
    elif worst["num_nodes"] > 1:
        loss = "the loss is across nodes"
    else:
        loss = "the loss is inside the node"
    return [
        f"DDP weak scaling: efficiency {worst['efficiency']:.0%} at n={worst['world_size']} "
        f"({_where(worst.to_dict())}, {worst['samples_per_s']:.4g} samples/s against "
        f"{worst['world_size']} x one rank); {loss}"
        + (f". Per scope: {'; '.join(parts)}." if parts else ".")
    ]


def findings(analyzed: Analyzed) -> list[str]:
    """The DDP rules over a run, and the variants that did not fit in memory."""
    found = ddp_findings(analyzed.summary("ddp")) if analyzed.has("ddp") else []
    return found + memory_findings(analyzed.info, "ddp", "DDP")
