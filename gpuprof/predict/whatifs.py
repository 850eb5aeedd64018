"""The what-ifs `gpuprof predict` puts beside its baseline (`predictions` says which): each
a `WhatIf` for gpuprof.predict.scaling, from the options or, without any, the candidate knobs
the advice compares."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpuprof.analysis import gpu_names
from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.systems import System
from gpuprof.predict.collectives import WhatIf
from gpuprof.predict.ddp import DDPBasis
from gpuprof.predict.network import FitNetwork, Network
from gpuprof.specs.compute import SPEC as _COMPUTE
from gpuprof.specs.memory import SPEC as _MEMORY

DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, kw_only=True)
class PredictRequest:
    """What to predict: shapes, sizes, the model, and the what-ifs (None: not given)."""

    nodes: tuple[int, ...] = DEFAULT_NODES
    gpus: int | None = None  # default: the system's GPUs per node, else the run's ranks per node
    sizes: tuple[int, ...] = ()  # default: the run's largest size per op
    model_params: int | None = None
    compute_ms: float | None = None  # one rank's step on the target (forward+backward+opt)
    hardware: str | None = None  # a preset name or a .toml file (gpuprof.machine.systems)
    nic_gbps: float | None = None  # each NIC's line rate, Gbit/s
    nics: int | None = None  # NICs per node
    intra_gbps: float | None = None
    grad_dtype: str | None = None
    bucket_mb: float | None = None
    accum: int | None = None
    micro_batches: tuple[int, ...] = ()
    experts: int | None = None  # a MoE layer's experts in all (default: as many a rank as run)


def asks_ddp(request: PredictRequest) -> bool:
    """Whether the request asks for what only a DDP prediction answers."""
    asked = (request.model_params, request.compute_ms, request.accum, request.grad_dtype)
    return any(v is not None for v in (*asked, request.bucket_mb))


def same_hardware(analyzed: Analyzed, system: System) -> bool:
    """Whether the run measured the system's GPU (its fits then describe the same links): its
    ranks' GPUs, or the GPU of the system it says it was measured on (`import --hardware`)."""
    if str(analyzed.info.get("device") or "") != "cuda":
        return False
    names = set(gpu_names(analyzed.info).values())
    described = analyzed.info.get("hardware")
    if isinstance(described, dict) and described.get("gpu"):
        names.add(str(described["gpu"]))
    target = gpu_peaks(system.gpu)
    return bool(target) and any(gpu_peaks(n) == target for n in names if n)


def baseline_network(fitted: FitNetwork, request: PredictRequest, notes: list[str]) -> Network:
    """The run's fits; where the run crossed no network, --nic-gbps (and --nics) is its
    network, with the per-hop latency measured inside the node (said in the notes)."""
    if request.nic_gbps is None or fitted.links.inter or fitted.links.rails or fitted.links.whole:
        return fitted
    nics = f"{request.nics} NIC(s) per node" if request.nics else "one NIC per GPU"
    note = (
        f"across nodes: {nics} of {request.nic_gbps:g} Gbit/s as given (line rate), each hop's "
        "latency the run's own inside the node"
    )
    if note not in notes:
        notes.append(note)
    change = WhatIf(nic_gbps=request.nic_gbps, nics=request.nics)
    return FitNetwork(fitted.links, change=change, source="run + --nic-gbps")


def hardware_change(request: PredictRequest, analyzed: Analyzed, system: System) -> WhatIf:
    """Another kind of device: compute scaled by the run's measured float32 matmul rate
    against the system GPU's (unless --compute-ms gives the step), the optimizer (memory
    bound) by the run's copy bandwidth against the GPU's memory bandwidth."""
    peaks = gpu_peaks(system.gpu)
    scale = optimizer = None
    if request.compute_ms is None and peaks and analyzed.has(_COMPUTE.name):
        measured = analyzed.summary(_COMPUTE.name)
        fp32 = measured[measured["dtype"] == "float32"]["tflops"]
        peak = peaks.tflops.get("float32")
        if not fp32.empty and peak:
            scale = float(fp32.median()) / peak
    if request.compute_ms is None and peaks and peaks.memory_gbps and analyzed.has(_MEMORY.name):
        copies = analyzed.summary(_MEMORY.name)["bandwidth_gbps"].dropna()
        if not copies.empty:
            optimizer = float(copies.max()) / peaks.memory_gbps
    return WhatIf(
        label=f"hardware {system.name}",
        compute_scale=scale,
        optimizer_scale=optimizer or scale,
        other_stack=True,
    )


def knobs(request: PredictRequest, basis: DDPBasis | None, net: Network) -> list[WhatIf]:
    """The what-if rows: those asked for (and all together), else the candidate knobs."""
    asked: list[WhatIf] = []
    if request.nic_gbps and not _is_baseline(net):
        asked.append(
            WhatIf(
                label=f"NICs of {request.nic_gbps:g} Gbit/s",
                nic_gbps=request.nic_gbps,
                nics=request.nics,
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
    fitted = net if isinstance(net, FitNetwork) and net.change is None else None
    across = (fitted.links.inter or fitted.links.rails) if fitted else None
    if across is not None:  # the network the run crossed, twice as fast
        gbps = across.at(math.inf)[1] * 8
        found.append(WhatIf(label=f"network 2x ({2 * gbps:.3g} Gbit/s)", nic_gbps=2 * gbps))
    if basis is not None and basis.grad_bytes == 4:
        found.append(WhatIf(label="bf16 gradients", grad_bytes=2))
    found.append(WhatIf(label="buckets of 100 MB", bucket_mb=100.0))
    if not request.accum:  # --accum sets the baseline's
        found.append(WhatIf(label="accumulate 4 micro-batches", accum=4))
    return found


def _is_baseline(net: Network) -> bool:
    """Whether --nic-gbps already made the baseline's network (a one-node run)."""
    return isinstance(net, FitNetwork) and net.source == "run + --nic-gbps"


def model_change(request: PredictRequest, basis: DDPBasis) -> WhatIf:
    """The baseline's model: the run's, or another one scaled by FLOPs (params x tokens), with
    --accum micro-batches per step."""
    params = request.model_params
    scale = None
    if params:
        scale = params / basis.num_params
    if request.compute_ms:
        scale = request.compute_ms * 1e3 / basis.single_us
    return WhatIf(label="baseline", grad_params=params, compute_scale=scale, accum=request.accum)


def merge(base: WhatIf, change: WhatIf, fixed_compute: bool) -> WhatIf:
    """A what-if on top of the baseline: compute scales multiply (unless --compute-ms fixed
    the target's compute), the baseline's hardware and model carry over."""
    scale, optimizer = base.compute_scale, base.optimizer_scale
    if change.compute_scale is not None and not fixed_compute:
        scale = (scale or 1.0) * change.compute_scale
    if change.optimizer_scale is not None and not fixed_compute:
        optimizer = (optimizer or base.compute_scale or 1.0) * change.optimizer_scale
    return replace(
        change,
        label=change.label if change.label != "as measured" else base.label,
        grad_params=change.grad_params or base.grad_params,
        compute_scale=scale,
        optimizer_scale=optimizer,
        other_stack=change.other_stack or base.other_stack,
        accum=change.accum or base.accum,
    )
