"""Bubble arithmetic against hand-made timelines (docs/methodology.md, Pipeline bubbles)."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuprof.advice.pipeline import pipeline_findings
from gpuprof.analysis.pipeline import (
    bottleneck_step_time,
    bubble_fraction,
    bubble_ratio,
    measured_bubbles,
    micro_batches_for,
    simulate,
    stage_imbalance,
    stage_table,
    summarize_pipeline,
)


def gpipe_timeline(p: int, m: int, t_f: float, t_b: float) -> pd.DataFrame:
    """All forwards, then all backwards (reverse micro-batch order), each stage waiting for
    the previous one: the GPipe schedule drawn by hand."""
    rows = []
    for s in range(p):
        for j in range(m):
            start = (s + j) * t_f
            rows.append(
                {"rank": s, "kind": "F", "micro_batch": j, "start": start, "end": start + t_f}
            )
            k = m - 1 - j  # backward order
            start_b = (m + p - 1) * t_f + (p - 1 - s + k) * t_b
            rows.append(
                {"rank": s, "kind": "B", "micro_batch": j, "start": start_b, "end": start_b + t_b}
            )
        rows.append({"rank": s, "kind": "RECV", "micro_batch": -1, "start": 0.0, "end": s * t_f})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (2, 8), (4, 4), (4, 16)])
def test_measured_gpipe_bubble_equals_theory(p: int, m: int) -> None:
    measured = measured_bubbles(gpipe_timeline(p, m, t_f=1.0, t_b=2.0))
    assert measured["step"].iloc[0] == pytest.approx((m + p - 1) * 3.0)
    theory = bubble_fraction("GPipe", p, m)
    assert theory == pytest.approx((p - 1) / (m + p - 1))
    assert measured["bubble"].tolist() == pytest.approx([theory] * p)


def test_hand_drawn_two_stage_example() -> None:
    # p=2, m=4, T_F=1, T_B=2: a 15-unit step, 12 busy units per rank -> 20% bubble
    measured = measured_bubbles(gpipe_timeline(2, 4, 1.0, 2.0))
    assert measured["busy"].tolist() == [12.0, 12.0] and measured["step"].iloc[0] == 15.0
    assert measured["bubble"].tolist() == pytest.approx([0.2, 0.2])


def test_overlapping_intervals_count_once() -> None:
    frame = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "kind": ["F", "B", "W"],
            "start": [0.0, 1.0, 5.0],
            "end": [2.0, 3.0, 10.0],
        }
    )
    assert measured_bubbles(frame)["busy"].iloc[0] == 8.0


def test_schedule_formulas() -> None:
    assert bubble_ratio("1F1B", 4, 8) == pytest.approx(3 / 8)
    assert bubble_ratio("Interleaved1F1B", 4, 8, v=2) == pytest.approx(3 / 16)
    assert bubble_fraction("1F1B", 4, 8) == pytest.approx(3 / 11)
    zb = bubble_fraction("ZBH1", 4, 8, t_f=1.0, t_b=1.0, t_w=1.0)
    assert zb == pytest.approx(3 / 27)  # (p-1)(T_F+T_B-T_W) against m(T_F+T_B+T_W)
    assert bubble_fraction("ZBVZeroBubble", 4, 8, t_f=1.0, t_b=1.0, t_w=1.0) == 0.0
    assert bubble_fraction("ZBH1", 4, 8) is None  # needs the measured times
    with pytest.raises(ValueError, match="no closed form"):
        bubble_ratio("DualPipeV", 4, 8)


def test_micro_batches_for_a_target_bubble() -> None:
    m = micro_batches_for(4, 0.10)
    assert m == 27 and bubble_fraction("1F1B", 4, m) <= 0.10 + 1e-12  # type: ignore[operator]
    assert bubble_fraction("1F1B", 4, m - 1) > 0.10  # type: ignore[operator]
    assert micro_batches_for(4, 0.10, v=2) == 14


def test_slow_stage_is_named_and_bounds_the_step() -> None:
    timeline = gpipe_timeline(2, 4, 1.0, 2.0)
    slow = timeline["rank"] == 1
    timeline.loc[slow, "end"] = timeline.loc[slow, "start"] + 2 * (
        timeline.loc[slow, "end"] - timeline.loc[slow, "start"]
    )  # rank 1 twice as slow
    imbalance = stage_imbalance(timeline).set_index("rank")
    assert imbalance.loc[1, "bottleneck"] and not imbalance.loc[0, "bottleneck"]
    assert imbalance.loc[1, "pct_of_mean"] == pytest.approx(100 * 6 / 4.5)
    assert bottleneck_step_time([3.0, 6.0], m=4) == 27.0  # 4 x 6 + 3
    assert bottleneck_step_time([2.0, 2.0, 2.0, 2.0], m=8) == (8 + 4 - 1) * 2.0


def _as_timeline(frame: pd.DataFrame, case_id: str, iteration: int = 0) -> pd.DataFrame:
    """A hand-drawn timeline in the run format (us columns, a stage per rank)."""
    out = frame.rename(columns={"start": "start_us", "end": "end_us"}).assign(
        case_id=case_id, iteration=iteration, stage=frame["rank"]
    )
    out.loc[out["kind"] == "RECV", "kind"] = "WAIT"
    return out


def test_simulation_replays_the_gpipe_order() -> None:
    # the schedule's own order with its own times and no communication: exactly the theory
    order = gpipe_timeline(4, 8, 1.0, 2.0).sort_values("start")
    order = order[order["kind"] != "RECV"].assign(stage=lambda f: f["rank"])
    sim = simulate(order, {(s, k): t for s in range(4) for k, t in (("F", 1.0), ("B", 2.0))})
    assert sim["bubble"].tolist() == pytest.approx([bubble_fraction("GPipe", 4, 8)] * 4)
    # a stage twice as slow: the step follows the bottleneck model
    slow = {(s, k): t * (2 if s == 1 else 1) for s in range(4) for k, t in (("F", 1.0), ("B", 2.0))}
    step = simulate(order, slow)["step"].iloc[0]
    assert step == pytest.approx(bottleneck_step_time([3.0, 6.0, 3.0, 3.0], 8))
    with pytest.raises(ValueError, match="wait on each other"):
        simulate(order.iloc[::-1], slow)


def test_summary_advice_and_split_from_a_hand_drawn_run() -> None:
    # GPipe p=2, m=4, T_F=1 ms, T_B=2 ms: bubble 20%; rank 1 twice as slow in a second case
    even = _as_timeline(gpipe_timeline(2, 4, 1000.0, 2000.0), "GPipe.m4")
    slow = gpipe_timeline(2, 4, 1000.0, 2000.0).sort_values("start")
    order = slow[slow["kind"] != "RECV"].assign(stage=lambda f: f["rank"])
    times = {
        (s, k): t * (2 if s == 1 else 1)
        for s in range(2)
        for k, t in (("F", 1000.0), ("B", 2000.0))
    }
    # re-time the same order with rank 1 twice as slow (what a slow stage would record)
    rows, free, done = [], {0: 0.0, 1: 0.0}, {}
    for _ in range(2):
        for r in (0, 1):
            for rec in order[order["rank"] == r].to_dict("records"):
                key = (rec["kind"], rec["stage"], rec["micro_batch"])
                if key in done:
                    continue
                need = (
                    [("F", 0, rec["micro_batch"])]
                    if key[0] == "F" and r == 1
                    else [("B", 1, rec["micro_batch"])]
                    if key[0] == "B" and r == 0
                    else [("F", 1, rec["micro_batch"])]
                    if key[0] == "B"
                    else []
                )
                if any(n not in done for n in need):
                    break
                start = max([free[r], *(done[n] for n in need)])
                done[key] = free[r] = start + times[(r, key[0])]
                rows.append({**rec, "start": start, "end": free[r]})
    skewed = _as_timeline(pd.DataFrame(rows), "GPipe.m4.slow")
    timeline = pd.concat([even, skewed], ignore_index=True)
    cases = pd.DataFrame(
        [
            {
                "case_id": c,
                "rank": r,
                "schedule": "GPipe",
                "p": 2,
                "m": 4,
                "v": 1,
                "clock_error_us": 50.0,
                "chunk_layers": 4,
            }
            for c in ("GPipe.m4", "GPipe.m4.slow")
            for r in (0, 1)
        ]
    )
    summary = summarize_pipeline(cases, timeline).set_index("case_id")
    assert summary.loc["GPipe.m4", "bubble_pct"] == pytest.approx(20.0)
    assert summary.loc["GPipe.m4", "theory_pct"] == pytest.approx(20.0)
    assert summary.loc["GPipe.m4", "simulated_pct"] == pytest.approx(20.0)
    assert (
        summary.loc["GPipe.m4", "t_f_us"] == 1000.0 and summary.loc["GPipe.m4", "t_b_us"] == 2000.0
    )
    assert summary.loc["GPipe.m4.slow", "bottleneck_rank"] == 1
    assert summary.loc["GPipe.m4.slow", "model_error_pct"] == pytest.approx(0.0, abs=1e-9)
    stages = stage_table(cases, timeline)
    split = stages[stages["case_id"] == "GPipe.m4.slow"]["balanced_layers"].tolist()
    assert split == [5, 3]  # 4 + 4 layers, rank 1 at half speed: 2/3 and 1/3 of 8
    (finding,) = pipeline_findings(summary.reset_index(), stages)  # 20% is not above 20%
    assert "rank 1 takes 6 ms per micro-batch, 33% above the mean" in finding
    assert "split the layers 5,3 instead of 4,4" in finding and "+0.0%" in finding


def test_bubble_advice_names_the_micro_batches_and_interleaving() -> None:
    row = {
        "case_id": "1F1B.m8",
        "schedule": "1F1B",
        "p": 4,
        "m": 8,
        "v": 1,
        "step_us": 1e6,
        "bubble_pct": 31.0,
        "theory_pct": 27.3,
        "simulated_pct": 28.0,
        "wait_us": 5e4,
        "imbalance_pct": 3.0,
        "model_step_us": 1e6,
        "model_error_pct": 0.0,
    }
    (finding,) = pipeline_findings(pd.DataFrame([row]), pd.DataFrame())
    assert finding.startswith("Pipeline 1F1B p=4 m=8: measured bubble 31% of the step (theory 27%")
    assert "under 10% from m=27 micro-batches" in finding
    assert "Interleaved1F1B with v=2 chunks per rank: theory 16% at m=8" in finding
    quiet = {**row, "bubble_pct": 12.0}
    assert pipeline_findings(pd.DataFrame([quiet]), pd.DataFrame()) == []
    # several schedules above the limit: one finding naming each, not one each
    zb = {**row, "schedule": "ZBVZeroBubble", "theory_pct": float("nan"), "bubble_pct": 43.0,
          "simulated_pct": 6.0}  # fmt: skip
    gpipe = {**row, "schedule": "GPipe", "bubble_pct": 25.0}
    (grouped,) = pipeline_findings(pd.DataFrame([row, zb, gpipe]), pd.DataFrame())
    assert grouped.startswith("Pipeline bubbles above 20% of the step in 3 schedules at p=4 m=8")
    assert "1F1B 31% (theory 27%, simulated 28%)" in grouped
    assert "ZBVZeroBubble 43% (simulated 6%)" in grouped
    assert "m=27 for 1F1B, m=27 for GPipe" in grouped and "nan" not in grouped
    assert "In 1 of them the measured bubble exceeds the simulated one by 37 points" in grouped


def test_the_pipeline_keeps_to_its_stages_on_a_large_job() -> None:
    """All ranks up to 16 stages; beyond, 16 ranks spread over the job (crossing its nodes),
    so a step of m + p - 1 micro-batches does not grow with the cluster."""
    from gpuprof.errors import UsageError
    from gpuprof.probes.pipeline import pipeline_group
    from gpuprof.registry import get, preset
    from gpuprof.specs.pipeline import PipelineParams, stage_ranks

    assert stage_ranks(2, 8, 16) == tuple(range(16))
    assert stage_ranks(1024, 8, 16) == tuple(i * 512 for i in range(16))  # every 64th node
    assert stage_ranks(3, 8, 16) == (0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19, 21, 22)
    whole, spread = pipeline_group(2, 8, 16), pipeline_group(128, 8, 16)
    assert (whole.scope, whole.world_size) == ("global", 16)
    assert (spread.scope, spread.world_size, spread.num_nodes) == ("stages", 16, 16)
    spec = get("pipeline")
    assert spec.count_cases(preset(spec, "quick", "cuda", 1024, 8), 1024, 8) == spec.count_cases(
        preset(spec, "quick", "cuda", 2, 8), 2, 8
    )
    with pytest.raises(UsageError, match="2 entries for 16 stages"):
        PipelineParams(stage_weights=(1.0, 2.0)).check_job(64, 8, "cuda")
