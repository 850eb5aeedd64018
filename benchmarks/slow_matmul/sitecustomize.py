"""A real, confined slowdown for the A/B check's detection rates (`benchmarks/gate_rates.py`,
scenarios ab-matmul and ab-matmul-1.1): with this folder on PYTHONPATH and
GPUPROF_BENCH_SLOW_MATMUL=F, every `torch.matmul` does F - 1 of its work again (it multiplies
that share of the rows of its first operand once more), as a model change that adds work to
its matrix products would. Nothing else changes: `a @ b` and the linear layers (F.linear),
numpy, copies and the DDP step are untouched, so the compute probe's matmul cases are the
ones slowed (their canary is numpy's matmul). Not part of gpuprof.
"""

import os

_FACTOR = float(os.environ.get("GPUPROF_BENCH_SLOW_MATMUL") or 1.0)

if _FACTOR > 1.0:
    import torch

    _matmul = torch.matmul

    def _slower(a, b, *, out=None):  # type: ignore[no-untyped-def]
        result = _matmul(a, b, out=out) if out is not None else _matmul(a, b)
        rows = round(a.shape[-2] * (_FACTOR - 1.0)) if a.dim() >= 2 else 0
        if rows:
            _matmul(a[..., :rows, :], b)  # the extra work, its result dropped
        return result

    torch.matmul = _slower
