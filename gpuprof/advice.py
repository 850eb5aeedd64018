"""Rules over analysis tables -> findings: what the data shows, its evidence, and what to do.

A finding never states what the data does not show: a rule that lacks its inputs (an unknown
GPU, no pair flagged) says nothing.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.summary import gpu_model
from gpuprof.hardware import gpu_peaks
from gpuprof.units import format_size


def collective_findings(summary: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    """all_reduce busbw on a full NVLink node against the known reference for that GPU."""
    peaks = gpu_peaks(gpu_model(info))
    if peaks is None or not peaks.all_reduce_busbw_gbps or summary.empty:
        return []
    one_node = summary[
        (summary["op"] == "all_reduce") & (summary["num_nodes"] == 1) & (summary["world_size"] == 8)
    ]
    if one_node.empty:
        return []
    best = one_node.loc[one_node["size_bytes"] == one_node["size_bytes"].max()]
    best = best.iloc[int(best["busbw_gbps"].to_numpy().argmax())]
    ref = peaks.all_reduce_busbw_gbps
    pct = 100 * best["busbw_gbps"] / ref
    verdict = (
        "as expected"
        if pct >= 90
        else "below the reference: check NVLink state (nvidia-smi nvlink -s), NCCL_ALGO/"
        "NCCL_PROTO overrides and GPU clocks"
    )
    return [
        f"all_reduce on 8 x {peaks.model} reaches {best['busbw_gbps']:.0f} GB/s busbw at "
        f"{format_size(best['size_bytes'])} ({best['scope']}), {pct:.0f}% of the ~{ref:.0f} "
        f"GB/s ring reference (REFERENCE.md): {verdict}."
    ]


def p2p_findings(summary: pd.DataFrame) -> list[str]:
    """One finding per pair flagged slow against its link class."""
    return [
        f"Pair {r['rank_a']}-{r['rank_b']} ({r['host_a']} to {r['host_b']}, {r['link_class']}, "
        f"{r['mode']}) moves {r['bw_gbps']:.3g} GB/s, {r['pct_of_class']:.0f}% of the median "
        f"{r['class_median_gbps']:.3g} GB/s of its class: check that link (cable, NIC, NVLink "
        "state) and rerun `gpuprof run p2p`."
        for r in summary[summary["flagged"]].to_dict("records")
    ]


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
    from gpuprof.analysis.ddp import variants

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
    from gpuprof.analysis.ddp import scaling

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
            if row["exposed_pct"] == row["exposed_pct"]
            else "DDP logging data missing"
        )
        findings.append(
            f"DDP {_where(row)}: {logged}; A/B: communication costs "
            f"{row['comm_cost_ab_pct']:.0f}% of the step ({first})."
            + (_best_variant(summary) if i == 0 else "")
        )
    glob = base[base["scope"] == "global"]
    if not glob.empty:
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


BUBBLE_LIMIT_PCT = 20.0
BUBBLE_TARGET = 0.10
IMBALANCE_LIMIT_PCT = 15.0


def pipeline_findings(summary: pd.DataFrame, stages: pd.DataFrame) -> list[str]:
    """Bubble above 20% -> the micro-batch count that brings it under 10% by the formula, or
    interleaving with v=2; a stage above 115% of the mean -> which one, and a better split."""
    from gpuprof.analysis.pipeline import bubble_fraction, micro_batches_for

    if summary.empty:
        return []
    findings = []
    for schedule, rows in summary.groupby("schedule", sort=False):
        top = rows.iloc[int(rows["m"].to_numpy().argmax())]
        if top["bubble_pct"] <= BUBBLE_LIMIT_PCT:
            continue
        p, m, v = int(top["p"]), int(top["m"]), int(top["v"])
        text = (
            f"Pipeline {schedule} p={p} m={m}: measured bubble {top['bubble_pct']:.0f}% of "
            f"the step (theory {top['theory_pct']:.0f}%, schedule simulated with the "
            f"measured stage times {top['simulated_pct']:.0f}%)."
        )
        if schedule in ("GPipe", "1F1B", "Interleaved1F1B"):
            need = micro_batches_for(p, BUBBLE_TARGET, v)
            text += (
                f" By (p-1)/(v m) the bubble falls under {BUBBLE_TARGET:.0%} from "
                f"m={need} micro-batches (same global batch: smaller micro-batches)"
            )
            if v == 1:
                inter = bubble_fraction("Interleaved1F1B", p, m, 2)
                measured = summary[(summary["schedule"] == "Interleaved1F1B") & (summary["m"] == m)]
                seen = (
                    f", measured {measured['bubble_pct'].iloc[0]:.0f}%"
                    if not measured.empty
                    else ""
                )
                text += (
                    f"; or Interleaved1F1B with v=2 chunks per rank: theory "
                    f"{100 * (inter or 0):.0f}% at m={m}{seen}"
                )
            text += "."
        if top["imbalance_pct"] > IMBALANCE_LIMIT_PCT and top["simulated_pct"] > (
            top["theory_pct"] + 5
        ):
            text += (
                " Most of it comes from unequal stages (the simulation with the measured "
                "stage times has it too): balance the stages first (below)."
            )
        if top["simulated_pct"] < top["bubble_pct"] - 5:
            text += (
                f" The measured bubble exceeds the simulated one by "
                f"{top['bubble_pct'] - top['simulated_pct']:.0f} points: send/recv waits "
                f"({top['wait_us'] / 1e3:.3g} ms per rank per step) are on the critical path."
            )
        findings.append(text)
    if stages.empty:
        return findings
    case = summary.iloc[int(summary["imbalance_pct"].to_numpy().argmax())]
    if case["imbalance_pct"] > IMBALANCE_LIMIT_PCT:
        ranks = stages[stages["case_id"] == case["case_id"]].sort_values("rank")
        slow = ranks.iloc[int(ranks["compute_per_micro_batch"].to_numpy().argmax())]
        mean = ranks["compute_per_micro_batch"].mean()
        split = ",".join(str(x) for x in ranks["balanced_layers"])
        now = ",".join(str(x) for x in ranks["layers"])
        model = (
            f"; the step ({case['step_us'] / 1e3:.4g} ms) matches the bottleneck-stage "
            f"model m x slowest + the others ({case['model_step_us'] / 1e3:.4g} ms, "
            f"{case['model_error_pct']:+.1f}%)"
            if case["model_step_us"] == case["model_step_us"]
            else ""
        )
        findings.append(
            f"Pipeline stage imbalance: rank {int(slow['rank'])} takes "
            f"{slow['compute_per_micro_batch'] / 1e3:.3g} ms per micro-batch, "
            f"{100 * slow['compute_per_micro_batch'] / mean - 100:.0f}% above the mean "
            f"({mean / 1e3:.3g} ms) and bounds the step ({case['schedule']} m={case['m']})"
            f"{model}. Lighten it: split the layers {split} instead of {now} (in proportion "
            "to each stage's measured speed)."
        )
    return findings
