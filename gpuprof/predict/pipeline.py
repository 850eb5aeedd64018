"""The pipeline step predicted from its measured stage times and the bubble theory
(docs/prediction.md, "Pipeline"). No torch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprof.analysis.pipeline import bubble_fraction


@dataclass(frozen=True, kw_only=True)
class PipelineBasis:
    """Per schedule, from the run's pipeline cases at p stages: compute per micro-batch and
    chunk, and the step's excess over the bubble theory fitted as c x (p-1) + e x m x v."""

    schedule: str
    p: int
    v: int
    t_f: float
    t_b: float
    t_w: float
    fill_us: float  # c: per stage boundary on the fill/drain path
    per_mb_us: float  # e: per micro-batch and chunk (send/recv in the steady state)
    measured: dict[int, float]  # m -> step_us at p


def _theory_step(
    schedule: str, p: int, m: int, v: int, t_f: float, t_b: float, t_w: float
) -> float | None:
    ideal = m * v * (t_f + t_b + t_w)
    frac = bubble_fraction(schedule, p, m, v, t_f=t_f, t_b=t_b, t_w=t_w if t_w else None)
    return None if frac is None or frac >= 1 else ideal / (1 - frac)


def pipeline_bases(summary: pd.DataFrame) -> list[PipelineBasis]:
    """One basis per schedule whose theory applies (GPipe, 1F1B, Interleaved1F1B; ZB with
    its times)."""
    bases = []
    for schedule, rows in summary.groupby("schedule", sort=False):
        p, v = int(rows["p"].iloc[0]), int(rows["v"].iloc[0])
        if p < 2:
            continue
        t_f, t_b = float(rows["t_f_us"].median()), float(rows["t_b_us"].median())
        t_w = float(rows["t_w_us"].median()) if rows["t_w_us"].notna().any() else 0.0
        points = []
        for m, step in zip(rows["m"], rows["step_us"], strict=True):
            theory = _theory_step(str(schedule), p, int(m), v, t_f, t_b, t_w)
            if theory is not None:
                points.append((int(m) * v, step - theory))
        if not points:
            continue
        mv = np.array([x for x, _ in points], dtype=float)
        excess = np.array([y for _, y in points], dtype=float)
        if len(set(mv)) > 1:  # both terms are costs: never negative (scipy's nnls)
            # deferred: loads scipy
            from scipy.optimize import nnls

            (const, per_mb), _ = nnls(np.column_stack([np.ones_like(mv), mv]), excess)
        else:
            per_mb, const = 0.0, max(0.0, float(excess.mean()))
        bases.append(
            PipelineBasis(
                schedule=str(schedule),
                p=p,
                v=v,
                t_f=t_f,
                t_b=t_b,
                t_w=t_w,
                fill_us=float(const) / (p - 1),
                per_mb_us=float(per_mb),
                measured={
                    int(m): float(s) for m, s in zip(rows["m"], rows["step_us"], strict=True)
                },
            )
        )
    return bases


def predict_pipeline(basis: PipelineBasis, p: int, m: int) -> tuple[float, float] | None:
    """(step_us, bubble fraction) for p stages of the measured stage size and m micro-batches,
    or None where the schedule's theory does not apply."""
    theory = _theory_step(basis.schedule, p, m, basis.v, basis.t_f, basis.t_b, basis.t_w)
    if theory is None:
        return None
    step = theory + basis.fill_us * (p - 1) + basis.per_mb_us * m * basis.v
    busy = m * basis.v * (basis.t_f + basis.t_b + basis.t_w)
    return step, 1 - busy / step
