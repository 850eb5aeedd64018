"""Pipeline bubbles: theory per schedule and measurement from per-rank timelines.

Theory (REFERENCE.md; p stages, m micro-batches, v chunks per rank):
- GPipe (Huang et al., arXiv 1811.06965) and 1F1B (Narayanan et al., arXiv 2104.04473):
  bubble / ideal = (p-1)/m; Interleaved 1F1B: (p-1)/(v m). As a fraction of the step:
  x / (1 + x).
- ZB-H1 (Qi et al., arXiv 2401.10241): bubble = (p-1)(T_F + T_B - T_W) per stage against an
  ideal of m (T_F + T_B + T_W), with T_B the input-gradient and T_W the weight-gradient part
  of the backward; ZB-V: about 0 when T_F = T_B = T_W (not modelled otherwise).

Measured, per rank: 1 - busy / step, busy being the union of the rank's compute intervals
(F, B, W) inside the step and step the wall time from the first start to the last end over
all ranks.
"""

from __future__ import annotations

import math

import pandas as pd

from gpuprof.analysis import require_columns

COMPUTE_KINDS = ("F", "B", "W")


def bubble_ratio(schedule: str, p: int, m: int, v: int = 1) -> float:
    """bubble / ideal compute time for the 1F1B family (GPipe, 1F1B, Interleaved1F1B)."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError("p, m and v must be at least 1")
    if schedule in ("GPipe", "1F1B"):
        return (p - 1) / m
    if schedule == "Interleaved1F1B":
        return (p - 1) / (v * m)
    raise ValueError(f"no closed form for schedule {schedule!r}")


def bubble_fraction(
    schedule: str,
    p: int,
    m: int,
    v: int = 1,
    *,
    t_f: float | None = None,
    t_b: float | None = None,
    t_w: float | None = None,
) -> float | None:
    """The theoretical bubble as a fraction of the step; None where the schedule's theory
    needs times that were not given (or, for ZB-V, unequal times)."""
    if schedule in ("GPipe", "1F1B", "Interleaved1F1B"):
        x = bubble_ratio(schedule, p, m, v)
        return x / (1 + x)
    if t_f is None or t_b is None or t_w is None:
        return None
    if schedule in ("ZBH1", "InterleavedZeroBubble"):
        bubble = max(0.0, (p - 1) * (t_f + t_b - t_w))
        return bubble / (bubble + m * (t_f + t_b + t_w))
    if schedule == "ZBVZeroBubble":
        return (
            0.0
            if math.isclose(t_f, t_b, rel_tol=0.1) and math.isclose(t_b, t_w, rel_tol=0.1)
            else None
        )
    return None


def micro_batches_for(p: int, target: float, v: int = 1) -> int:
    """The fewest micro-batches that bring the 1F1B-family bubble fraction to `target`."""
    if not 0 < target < 1:
        raise ValueError("target must be a fraction between 0 and 1")
    ratio = target / (1 - target)  # fraction f = x/(1+x)  <=>  x = f/(1-f)
    return max(1, math.ceil((p - 1) / (v * ratio) - 1e-9))


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def measured_bubbles(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per rank: busy compute time, the step's wall time, and bubble = 1 - busy/step.
    `timeline`: one row per interval with rank, kind (F, B, W, or waits like SEND/RECV),
    start and end (any one time unit)."""
    require_columns(timeline, ["rank", "kind", "start", "end"], "pipeline timeline")
    step = float(timeline["end"].max() - timeline["start"].min())
    rows = []
    for rank, rows_of in timeline.groupby("rank", sort=True):
        compute = rows_of[rows_of["kind"].isin(COMPUTE_KINDS)]
        busy = _union_length(list(zip(compute["start"], compute["end"], strict=True)))
        rows.append(
            {
                "rank": rank,
                "busy": busy,
                "step": step,
                "bubble": 1 - busy / step if step > 0 else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def stage_imbalance(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per rank: mean compute per micro-batch (F + B + W), its share of the mean, and which
    rank bounds the step (the slowest stage)."""
    require_columns(timeline, ["rank", "kind", "start", "end", "micro_batch"], "pipeline timeline")
    compute = timeline[timeline["kind"].isin(COMPUTE_KINDS)]
    per_mb = (
        compute.assign(duration=compute["end"] - compute["start"])
        .groupby(["rank", "micro_batch"])["duration"]
        .sum()
        .groupby("rank")
        .mean()
        .rename("compute_per_micro_batch")
        .reset_index()
    )
    mean = per_mb["compute_per_micro_batch"].mean()
    per_mb["pct_of_mean"] = 100 * per_mb["compute_per_micro_batch"] / mean
    per_mb["bottleneck"] = (
        per_mb["compute_per_micro_batch"] == per_mb["compute_per_micro_batch"].max()
    )
    return per_mb


def bottleneck_step_time(stage_times: list[float], m: int) -> float:
    """GPipe/1F1B step time bound by the slowest stage: (m + p - 1) x max stage time per
    micro-batch (every micro-batch waits for the slowest stage; fill and drain add p - 1)."""
    return (m + len(stage_times) - 1) * max(stage_times)
