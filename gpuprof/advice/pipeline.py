"""Pipeline: bubble and stage-imbalance rules over the pipeline summary and stage table."""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.pipeline import bubble_fraction, micro_batches_for, stage_table
from gpuprof.analysis.summary import Analyzed

BUBBLE_LIMIT_PCT = 20.0
BUBBLE_TARGET = 0.10
IMBALANCE_LIMIT_PCT = 15.0


def pipeline_findings(summary: pd.DataFrame, stages: pd.DataFrame) -> list[str]:
    """Bubble above 20% -> the micro-batch count that brings it under 10% by the formula, or
    interleaving with v=2; a stage above 115% of the mean -> which one, and a better split."""
    if summary.empty:
        return []
    findings = []
    above: list[pd.Series] = []
    for schedule, rows in summary.groupby("schedule", sort=False):
        top = rows.iloc[int(rows["m"].to_numpy().argmax())]
        if top["bubble_pct"] <= BUBBLE_LIMIT_PCT:
            continue
        p, m, v = int(top["p"]), int(top["m"]), int(top["v"])
        theory = (
            f"theory {top['theory_pct']:.0f}%"
            if pd.notna(top["theory_pct"])
            else "no closed-form theory for this schedule"
        )
        text = (
            f"Pipeline {schedule} p={p} m={m}: measured bubble {top['bubble_pct']:.0f}% of "
            f"the step ({theory}, schedule simulated with the "
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
        above.append(top)
    if len(above) > 1:  # one finding for the schedules, not one each that say nearly the same
        findings = [_grouped(pd.DataFrame(above))]
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
            if pd.notna(case["model_step_us"])
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


def _grouped(tops: pd.DataFrame) -> str:
    """The bubble finding of several schedules at once: each one's measured, theory and
    simulated bubble, the micro-batch counts that bring the closed-form ones under the target,
    and the send/recv waits where the measured bubble exceeds the simulated one."""
    parts = []
    for top in tops.to_dict("records"):
        theory = f"theory {top['theory_pct']:.0f}%, " if pd.notna(top["theory_pct"]) else ""
        parts.append(
            f"{top['schedule']} {top['bubble_pct']:.0f}% ({theory}simulated "
            f"{top['simulated_pct']:.0f}%)"
        )
    p, m = int(tops["p"].iloc[0]), int(tops["m"].iloc[0])
    shape = f"p={p} m={m}" if tops["p"].nunique() == 1 and tops["m"].nunique() == 1 else "their"
    text = (
        f"Pipeline bubbles above {BUBBLE_LIMIT_PCT:.0f}% of the step in {len(tops)} schedules "
        f"at {shape}: {'; '.join(parts)}"
        + (
            " (zero-bubble schedules have no closed-form theory)."
            if tops["theory_pct"].isna().any()
            else "."
        )
    )
    closed = tops[tops["schedule"].isin(["GPipe", "1F1B", "Interleaved1F1B"])]
    needs = {
        str(r["schedule"]): micro_batches_for(int(r["p"]), BUBBLE_TARGET, int(r["v"]))
        for r in closed.to_dict("records")
    }
    if needs:
        listed = ", ".join(f"m={n} for {name}" for name, n in needs.items())
        text += (
            f" By (p-1)/(v m) each falls under {BUBBLE_TARGET:.0%} from {listed} (same global "
            "batch: smaller micro-batches)."
        )
    waits = tops[tops["simulated_pct"] < tops["bubble_pct"] - 5]
    if len(waits):
        excess = waits["bubble_pct"] - waits["simulated_pct"]
        ms = waits["wait_us"] / 1e3

        def span(low: float, high: float, fmt: str) -> str:
            return (
                format(low, fmt)
                if format(low, fmt) == format(high, fmt)
                else (f"{format(low, fmt)}-{format(high, fmt)}")
            )

        text += (
            f" In {len(waits)} of them the measured bubble exceeds the simulated one by "
            f"{span(excess.min(), excess.max(), '.0f')} points: send/recv waits "
            f"({span(ms.min(), ms.max(), '.3g')} ms per rank per step) are on the critical path."
        )
    return text


def stages(analyzed: Analyzed) -> pd.DataFrame:
    """The stage table of a run's pipeline cases (computed once per run)."""
    run = analyzed.run
    return analyzed.cached(
        "pipeline-stages",
        lambda: stage_table(run.table("pipeline"), run.table("pipeline_timeline")),
    )


def findings(analyzed: Analyzed) -> list[str]:
    """The pipeline rules over a run."""
    if not analyzed.has("pipeline", "pipeline_timeline"):
        return []
    summary = analyzed.summary("pipeline")
    return pipeline_findings(summary, stages(analyzed)) if not summary.empty else []
