"""Scaling: where the predicted DDP efficiency falls below 80%, and which what-if buys the most
there. Every number it states is a prediction and says so; it never mixes with measured gains."""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.predict.curves import report_curves
from gpuprof.predict.predictions import DDP, predict
from gpuprof.predict.whatifs import PredictRequest

EFFICIENCY_LIMIT = 0.8


def findings(analyzed: Analyzed) -> list[str]:
    """One finding where the prediction crosses EFFICIENCY_LIMIT, naming the best what-if."""
    curves = analyzed.cached("scaling", lambda: report_curves(analyzed))
    measured = _measured_shapes(analyzed)  # there the report shows the measurement
    found = [(curve, below_limit(curve.ddp, measured)) for curve in curves if not curve.ddp.empty]
    below = [(curve, rows.iloc[0]) for curve, rows in found if not rows.empty]
    if not below:
        return []
    curve, row = below[0]
    nodes, gpus = int(row["nodes"]), curve.gpus
    try:
        at = predict(analyzed, PredictRequest(nodes=(nodes,), gpus=gpus))
    except UsageError:
        return []
    where = f"{nodes} node(s) x {gpus} rank(s)"
    text = (
        f"Predicted (not measured): DDP weak-scaling efficiency falls to "
        f"{row['efficiency']:.0%} at {where} (step {row['step_ms']:.4g} ms, of which "
        f"{row['comm_added_ms']:.3g} ms added by its all_reduces)."
    )
    knobs = at.whatifs.iloc[1:] if len(at.whatifs) > 1 else at.whatifs.iloc[0:0]
    if not knobs.empty:
        best = knobs.iloc[int(knobs["gain_pct"].to_numpy().argmax())]
        if best["gain_pct"] > 0:
            text += (
                f" Best predicted knob there: {best['scenario']}, {best['gain_pct']:+.0f}% "
                f"samples/s (efficiency {best['efficiency']:.0%}); `gpuprof predict` shows "
                "the others."
            )
    return [text]


def below_limit(ddp: pd.DataFrame, measured: set[tuple[int, int]]) -> pd.DataFrame:
    """The predicted rows under EFFICIENCY_LIMIT at shapes (nodes, ranks) not measured."""
    shapes = zip(ddp["nodes"], ddp["world_size"], strict=True)
    new = pd.Series([(int(n), int(w)) not in measured for n, w in shapes], index=ddp.index)
    return ddp[(ddp["efficiency"] < EFFICIENCY_LIMIT) & new]


def _measured_shapes(analyzed: Analyzed) -> set[tuple[int, int]]:
    """(nodes, ranks) the DDP probe ran at."""
    if not analyzed.has(DDP):
        return set()
    ddp = analyzed.summary(DDP)
    return {(int(n), int(w)) for n, w in zip(ddp["num_nodes"], ddp["world_size"], strict=True)}
