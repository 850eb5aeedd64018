"""Bubble arithmetic against hand-made timelines (REFERENCE.md, Pipeline bubbles)."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuprof.analysis.pipeline import (
    bottleneck_step_time,
    bubble_fraction,
    bubble_ratio,
    measured_bubbles,
    micro_batches_for,
    stage_imbalance,
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
    assert bottleneck_step_time([3.0, 6.0], m=4) == 30.0
