"""The predictions a report draws (its scaling section and the advice read them)."""

from __future__ import annotations

from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.predict.predictions import Prediction, predict
from gpuprof.predict.whatifs import PredictRequest

SINGLE_NODE_RANKS = (1, 2, 4, 8, 16, 32, 64)


def report_curves(analyzed: Analyzed) -> list[Prediction]:
    """The predictions the report draws: over node counts (the run's ranks per node) for a
    multi-node run; over ranks in one node for a one-node run. Empty when nothing fits."""
    nodes = int(analyzed.info.get("num_nodes") or 1)
    if nodes > 1:
        requests = [PredictRequest()]
    else:
        requests = [PredictRequest(nodes=(1,), gpus=g) for g in SINGLE_NODE_RANKS]
    found = []
    for request in requests:
        try:
            found.append(predict(analyzed, request))
        except UsageError:
            return []
    return found
