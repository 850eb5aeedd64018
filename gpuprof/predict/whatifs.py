"""The what-ifs `gpuprof predict` puts beside its baseline (`predictions` says which): each
a `WhatIf` for gpuprof.predict.scaling, from the options or, without any, the candidate knobs
the advice compares."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.machine.hardware import gpu_peaks, node_preset
from gpuprof.predict.scaling import DDPBasis, Links, WhatIf
from gpuprof.specs.compute import SPEC as _COMPUTE

DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, kw_only=True)
class PredictRequest:
    """What to predict: shapes, sizes, the model, and the what-ifs (None: not given)."""

    nodes: tuple[int, ...] = DEFAULT_NODES
    gpus: int | None = None  # default: the run's ranks per node
    sizes: tuple[int, ...] = ()  # default: the run's largest size per op
    model_params: int | None = None
    compute_ms: float | None = None  # one rank's step on the target (forward+backward+opt)
    hardware: str | None = None
    network_gbps: float | None = None
    intra_gbps: float | None = None
    grad_dtype: str | None = None
    bucket_mb: float | None = None
    accum: int | None = None
    micro_batches: tuple[int, ...] = ()


def _hardware_change(request: PredictRequest, basis: DDPBasis | None, analyzed: Analyzed) -> WhatIf:
    """The what-if of --hardware: its links and, unless --compute-ms sets it, compute scaled by
    the run's measured float32 matmul rate against the preset GPU's."""
    assert request.hardware is not None
    try:
        preset = node_preset(request.hardware)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    scale = None
    if request.compute_ms is None and analyzed.has(_COMPUTE.name):
        measured = analyzed.summary(_COMPUTE.name)
        fp32 = measured[measured["dtype"] == "float32"]["tflops"]
        peak = (gpu_peaks(preset.gpu) or None) and gpu_peaks(preset.gpu).tflops.get("float32")  # type: ignore[union-attr]
        if not fp32.empty and peak:
            scale = float(fp32.median()) / peak
    return WhatIf(
        label=f"hardware {preset.name}",
        intra_gbps=preset.intra_busbw_gbps * 8,
        network_gbps=preset.nic_busbw_gbps * 8,
        hop_us=(preset.intra_hop_us, preset.inter_hop_us),
        compute_scale=scale,
        other_stack=True,
    )


def knobs(
    request: PredictRequest, analyzed: Analyzed, basis: DDPBasis | None, links: Links
) -> list[WhatIf]:
    """The what-if rows: those asked for (and all together), else the candidate knobs."""
    asked: list[WhatIf] = []
    if request.hardware:
        asked.append(_hardware_change(request, basis, analyzed))
    if request.network_gbps:
        asked.append(
            WhatIf(
                label=f"network {request.network_gbps:g} Gbit/s", network_gbps=request.network_gbps
            )
        )
    if request.intra_gbps:
        asked.append(
            WhatIf(label=f"intra-node {request.intra_gbps:g} Gbit/s", intra_gbps=request.intra_gbps)
        )
    if request.grad_dtype:
        asked.append(WhatIf(label=f"{request.grad_dtype} gradients", grad_bytes=2))
    if request.bucket_mb:
        asked.append(
            WhatIf(label=f"buckets of {request.bucket_mb:g} MB", bucket_mb=request.bucket_mb)
        )
    if request.accum:
        asked.append(WhatIf(label=f"accumulate {request.accum} micro-batches", accum=request.accum))
    if len(asked) > 1:
        combined: dict[str, Any] = {}
        for change in asked:
            combined.update(
                {
                    k: v
                    for k, v in change.__dict__.items()
                    if v not in (None, False) and k != "label"
                }
            )
        asked.append(WhatIf(label="all of the above", **combined))
    if asked:
        return asked
    found: list[WhatIf] = []
    across = links.inter or links.rails
    if across is not None:
        gbps = across.at(math.inf)[1] * 8
        found.append(WhatIf(label=f"network 2x ({2 * gbps:.3g} Gbit/s)", network_gbps=2 * gbps))
    if basis is not None and basis.grad_bytes == 4:
        found.append(WhatIf(label="bf16 gradients", grad_bytes=2))
    found.append(WhatIf(label="buckets of 100 MB", bucket_mb=100.0))
    found.append(WhatIf(label="accumulate 4 micro-batches", accum=4))
    return found


def model_change(request: PredictRequest, basis: DDPBasis) -> WhatIf:
    """The baseline's model: the run's, or another one scaled by FLOPs (params x tokens)."""
    params = request.model_params
    scale = None
    if params:
        scale = params / basis.num_params
    if request.compute_ms:
        scale = request.compute_ms * 1e3 / basis.single_us
    return WhatIf(label="baseline", grad_params=params, compute_scale=scale)


def merge(base: WhatIf, change: WhatIf, fixed_compute: bool) -> WhatIf:
    """A what-if on top of the baseline's model: compute scales multiply, unless --compute-ms
    fixed the target's compute."""
    scale = base.compute_scale
    if change.compute_scale is not None and not fixed_compute:
        scale = (scale or 1.0) * change.compute_scale
    return replace(change, grad_params=change.grad_params or base.grad_params, compute_scale=scale)
