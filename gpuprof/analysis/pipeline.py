"""Pipeline bubbles: theory per schedule and measurement from per-rank timelines.

Theory (docs/methodology.md; p stages, m micro-batches, v chunks per rank):
- GPipe (Huang et al., arXiv 1811.06965) and 1F1B (Narayanan et al., arXiv 2104.04473):
  bubble / ideal = (p-1)/m; Interleaved 1F1B: (p-1)/(v m). As a fraction of the step:
  x / (1 + x).
- ZB-H1 (Qi et al., arXiv 2401.10241): bubble = (p-1)(T_F + T_B - T_W) per stage against an
  ideal of m (T_F + T_B + T_W), with T_B the input-gradient and T_W the weight-gradient part
  of the backward; ZB-V: about 0 when T_F = T_B = T_W (not modelled otherwise).

Measured, per rank: 1 - busy / step, busy being the union of the rank's compute intervals
(F, B, W) inside the step and step the wall time from the first start to the last end over
all ranks.

Simulated: each rank's own order of operations in the measured step, replayed with the
median time of each (stage, kind) and no communication: the schedule's bubble with these
stage times, free of transport and noise (F(s) waits for F(s-1) of the same micro-batch,
B(s) for B(s+1) or, on the last stage, its own F; W for its B).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from gpuprof.analysis import RunTables, require_columns

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
    if schedule == "ZBH1":
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
    """Per rank: mean compute per micro-batch (F + B + W, of every chunk the rank holds, per
    step), its share of the mean, and which rank bounds the step (the slowest stage)."""
    require_columns(timeline, ["rank", "kind", "start", "end", "micro_batch"], "pipeline timeline")
    compute = timeline[timeline["kind"].isin(COMPUTE_KINDS)]
    steps = ["iteration"] if "iteration" in compute.columns else []
    per_mb = (
        compute.assign(duration=compute["end"] - compute["start"])
        .groupby(["rank", *steps, "micro_batch"])["duration"]
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
    """GPipe/1F1B step time bound by the slowest stage: every micro-batch passes through it
    one after another (m x its time per micro-batch) and the first one also through every
    other stage on the way in and out (their times once): m x max + sum of the others. With
    equal stages this is the textbook (m + p - 1) x t."""
    slowest = max(stage_times)
    return m * slowest + sum(stage_times) - slowest


def simulate(ops: pd.DataFrame, durations: dict[tuple[int, str], float]) -> pd.DataFrame:
    """Replay each rank's operations (rows of rank, kind, stage, micro_batch, in order) with
    `durations[(stage, kind)]` and no communication; per rank busy, step and bubble."""
    require_columns(ops, ["rank", "kind", "stage", "micro_batch"], "pipeline operations")
    compute = ops[ops["kind"].isin(COMPUTE_KINDS)]
    queues = {
        rank: list(zip(g["kind"], g["stage"], g["micro_batch"], strict=True))
        for rank, g in compute.groupby("rank", sort=True)
    }
    last_stage = int(compute["stage"].max())
    done: dict[tuple[str, int, int], float] = {}
    free = dict.fromkeys(queues, 0.0)
    busy = dict.fromkeys(queues, 0.0)
    position = dict.fromkeys(queues, 0)

    def ready(kind: str, stage: int, mb: int) -> float | None:
        if kind == "F":
            needs = [("F", stage - 1, mb)] if stage > 0 else []
        elif kind == "B":
            needs = [("F", stage, mb)] + ([("B", stage + 1, mb)] if stage < last_stage else [])
        else:
            needs = [("B", stage, mb)]
        if any(need not in done for need in needs):
            return None
        return max((done[need] for need in needs), default=0.0)

    remaining = sum(len(q) for q in queues.values())
    while remaining:
        progressed = False
        for rank, queue in queues.items():
            while position[rank] < len(queue):
                kind, stage, mb = queue[position[rank]]
                after = ready(kind, int(stage), int(mb))
                if after is None:
                    break
                length = durations[(int(stage), kind)]
                end = max(free[rank], after) + length
                done[(kind, int(stage), int(mb))] = end
                free[rank], busy[rank] = end, busy[rank] + length
                position[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("the operations wait on each other: not a valid schedule")
    step = max(free.values())
    return pd.DataFrame(
        [
            {
                "rank": r,
                "busy": busy[r],
                "step": step,
                "bubble": 1 - busy[r] / step if step > 0 else float("nan"),
            }
            for r in queues
        ]
    )


TIMELINE_KEYS = ["case_id", "rank", "iteration"]


def summarize_pipeline(cases: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """One row per schedule and micro-batch count: step, measured bubble (mean and worst
    rank), theory (closed form with the measured T_F, T_B, T_W), simulated bubble, stage
    imbalance and the bottleneck-stage model of the step."""
    require_columns(
        cases, ["case_id", "rank", "schedule", "p", "m", "v", "clock_error_us"], "pipeline"
    )
    require_columns(
        timeline,
        [*TIMELINE_KEYS, "kind", "stage", "micro_batch", "start_us", "end_us"],
        "pipeline timeline",
    )
    params = cases.groupby("case_id", sort=False).agg(
        schedule=("schedule", "first"),
        p=("p", "first"),
        m=("m", "first"),
        v=("v", "first"),
        clock_error_us=("clock_error_us", "max"),
    )
    known: dict[Any, Any] = params.to_dict("index")
    rows = []
    for case_id, events in timeline.groupby("case_id", sort=False):
        if case_id not in known:
            continue
        info = known[case_id]
        events = events.rename(columns={"start_us": "start", "end_us": "end"})
        events = events.assign(duration=events["end"] - events["start"])
        per_step = []
        for iteration, step_events in events.groupby("iteration"):
            compute = step_events[step_events["kind"].isin(COMPUTE_KINDS)]
            measured = measured_bubbles(compute)
            waits = step_events[step_events["kind"] == "WAIT"]
            per_step.append(
                {
                    "iteration": iteration,
                    "step_us": float(measured["step"].iloc[0]),
                    "bubble": float(measured["bubble"].mean()),
                    "bubble_max": float(measured["bubble"].max()),
                    "wait_us": float(waits["duration"].sum()) / max(1, events["rank"].nunique()),
                }
            )
        steps = pd.DataFrame(per_step)
        compute = events[events["kind"].isin(COMPUTE_KINDS)]
        kind_times = compute.groupby("kind")["duration"].median()
        t_f, t_b = kind_times.get("F"), kind_times.get("B")
        t_w = kind_times.get("W", 0.0 if "W" not in kind_times else None)
        theory = bubble_fraction(
            str(info["schedule"]),
            int(info["p"]),
            int(info["m"]),
            int(info["v"]),
            t_f=t_f,
            t_b=t_b,
            t_w=t_w,
        )
        medians = compute.groupby(["stage", "kind"], as_index=False)["duration"].median()
        durations = {
            (int(stage), str(kind)): float(value)
            for stage, kind, value in zip(
                medians["stage"], medians["kind"], medians["duration"], strict=True
            )
        }
        median_iteration = steps.sort_values("step_us")["iteration"].iloc[len(steps) // 2]
        order = events[events["iteration"] == median_iteration].sort_values("start")
        simulated = simulate(order, {(int(s), str(k)): float(d) for (s, k), d in durations.items()})
        imbalance = stage_imbalance(compute)
        per_rank = imbalance["compute_per_micro_batch"]
        slowest_rank = int(imbalance["rank"].iloc[int(per_rank.to_numpy().argmax())])
        model = (
            bottleneck_step_time(list(per_rank), int(info["m"]))
            if int(info["v"]) == 1
            else float("nan")
        )
        step = float(steps["step_us"].median())
        rows.append(
            {
                "case_id": case_id,
                "schedule": info["schedule"],
                "p": int(info["p"]),
                "m": int(info["m"]),
                "v": int(info["v"]),
                "step_us": step,
                "num_iterations": len(steps),
                "bubble_pct": 100 * float(steps["bubble"].median()),
                "bubble_max_pct": 100 * float(steps["bubble_max"].median()),
                "theory_pct": 100 * theory if theory is not None else float("nan"),
                "simulated_pct": 100 * float(simulated["bubble"].mean()),
                "t_f_us": t_f,
                "t_b_us": t_b,
                "t_w_us": kind_times.get("W", float("nan")),
                "wait_us": float(steps["wait_us"].median()),
                "imbalance_pct": 100 * (float(per_rank.max()) / float(per_rank.mean()) - 1),
                "bottleneck_rank": slowest_rank,
                "model_step_us": model,
                "model_error_pct": 100 * (step / model - 1) if pd.notna(model) else float("nan"),
                "clock_error_us": float(info["clock_error_us"]),
                "median_iteration": int(median_iteration),  # the step the Gantt chart draws
            }
        )
    return pd.DataFrame(rows)


def stage_table(cases: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per case and rank: layers held, compute per micro-batch (F + B + W per step), its share
    of the mean, and the layers each rank would hold if work followed measured speed
    (`balanced_layers`: layers proportional to 1 / time per layer, same total)."""
    require_columns(cases, ["case_id", "rank", "chunk_layers", "v"], "pipeline")
    first = cases.groupby(["case_id", "rank"])[["chunk_layers", "v"]].first()
    held: dict[Any, Any] = {
        key: int(row["chunk_layers"] * row["v"]) for key, row in first.iterrows()
    }
    frames = []
    for case_id, events in timeline.groupby("case_id", sort=False):
        events = events.rename(columns={"start_us": "start", "end_us": "end"})
        per_rank = stage_imbalance(events[events["kind"].isin(COMPUTE_KINDS)])
        per_rank.insert(0, "case_id", case_id)
        per_rank["layers"] = [held.get((case_id, r)) for r in per_rank["rank"]]
        speed = per_rank["layers"] / per_rank["compute_per_micro_batch"]
        share = speed / speed.sum()
        total = per_rank["layers"].sum()
        per_rank["balanced_layers"] = (share * total).round().astype("Int64")
        frames.append(per_rank)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The pipeline summary of a run (its cases and their timeline)."""
    return summarize_pipeline(run.table("pipeline"), run.table("pipeline_timeline"))


def overview(summary: pd.DataFrame) -> pd.DataFrame:
    """The report overview's rows: each schedule at its largest micro-batch count, as % of its
    step: busy time and the measured bubble (mean over stages)."""
    rows = []
    for schedule, by in summary.groupby("schedule", sort=False):
        last = by.sort_values("m").iloc[-1]
        bubble = float(last["bubble_pct"])
        rows.append(
            {
                "label": f"pipeline {schedule} p={last['p']} m={last['m']}",
                "compute time": 100 - bubble,
                "bubble / wait": bubble,
            }
        )
    return pd.DataFrame(rows)
