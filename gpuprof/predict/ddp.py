"""The DDP step predicted from its measured breakdown (docs/prediction.md, "DDP"): compute
as measured (or scaled to other hardware), the buckets' all_reduces from a network model, what
the backward hides. No torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from gpuprof.errors import UsageError
from gpuprof.predict.collectives import WhatIf
from gpuprof.predict.network import Network

FIRST_BUCKET_BYTES = 1 << 20  # torch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)


def ddp_buckets(grad_bytes: float, bucket_mb: float) -> list[float]:
    """DDP's buckets in the order they are reduced: the first of 1 MiB, the rest up to the cap."""
    first = min(grad_bytes, FIRST_BUCKET_BYTES)
    rest = grad_bytes - first
    cap = bucket_mb * (1 << 20)
    full, tail = divmod(rest, cap)
    return [first, *([cap] * int(full)), *([tail] if tail > 0 else [])]


@dataclass(frozen=True, kw_only=True)
class DDPBasis:
    """What the DDP predictions start from (the first variant of the run's DDP probe)."""

    variant: str
    num_params: int
    grad_bytes: int  # per element, as measured
    samples_per_step: float  # per rank
    single_us: float  # the step on one rank alone
    base_us: float  # the step without the all_reduce (no-op hook), at the largest world
    optimizer_us: float
    comm_only_us: float  # the buckets' all_reduces alone, there
    cost_us: float  # what the all_reduce adds to the step there (step - no-op step)
    backward_us: float  # backward compute there (the window an all_reduce can hide in)
    step_us: float
    nodes: int
    gpus: int
    bucket_mb: float = 25.0
    spread: float = 0.0  # one rank's step without communication: relative spread (ranks, steps)


def ddp_basis(summary: pd.DataFrame, gpus_per_node: int) -> DDPBasis:
    """The basis from a DDP summary; a UsageError when it lacks one rank alone or a larger
    world."""
    single = summary[summary["scope"] == "single"]
    if single.empty:
        raise UsageError("the run's DDP probe has no one-rank case (it ran without --scaling)")
    variant = str(single["case_id"].iloc[0])
    rows = summary[(summary["case_id"] == variant) & (summary["world_size"] > 1)]
    if rows.empty:
        raise UsageError("the run's DDP probe ran on one rank only: nothing to scale from")
    top = rows.sort_values(["world_size", "num_nodes"]).iloc[-1]
    hook = "hook=fp16" in variant or "hook=bf16" in variant
    # what the all_reduce added to the step: the difference of the medians the table shows
    # (the paired A/B median differs from it by noise), so the measured shape comes back
    cost = float(top["step_us"]) - float(top["noop_step_us"])
    return DDPBasis(
        variant=variant,
        num_params=int(top["num_params"]),
        grad_bytes=2 if hook else 4,
        samples_per_step=float(top["samples_per_step"]),
        single_us=float(single["step_us"].iloc[0]),
        base_us=float(top["noop_step_us"]),
        optimizer_us=float(top["optimizer_us"]),
        comm_only_us=float(top["comm_only_us"]),
        cost_us=cost if np.isfinite(cost) else float(top["exposed_comm_us"]),
        backward_us=float(top["backward_compute_us"]),
        step_us=float(top["step_us"]),
        nodes=int(top["num_nodes"]),
        gpus=int(top["world_size"]) // int(top["num_nodes"]) if int(top["num_nodes"]) else 1,
        spread=_finite(top.get("step_spread", 0.0)),
    )


def _finite(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    return number if np.isfinite(number) else 0.0


def slowest_of(ranks: int) -> float:
    """The expected largest of `ranks` standard normal draws (Blom's approximation,
    Phi^-1((n - 0.375) / (n + 0.25)); 0 for one rank): how far above its mean the slowest
    rank's step lies, in standard deviations."""
    if ranks <= 1:
        return 0.0
    return NormalDist().inv_cdf((ranks - 0.375) / (ranks + 0.25))


def straggling(spread: float, accum: int, ranks: int, measured_ranks: int) -> float:
    """The compute at `ranks` over the compute at the measured world: every step waits for
    the slowest rank, E[max] = mean x (1 + cv x z(ranks)); a step of `accum` independent
    micro-batches varies by spread / sqrt(accum)."""
    cv = spread / math.sqrt(max(1, accum))
    return (1 + cv * slowest_of(ranks)) / (1 + cv * slowest_of(measured_ranks))


@dataclass(frozen=True, kw_only=True)
class DDPStep:
    """A predicted DDP step (per accumulation step) and what follows from it."""

    step_us: float
    exposed_us: float
    comm_us: float
    efficiency: float
    samples_per_s: float
    rel: float


def _comm(
    basis: DDPBasis, net: Network, nodes: int, gpus: int, backend: str, change: WhatIf
) -> tuple[float, float, float]:
    """(all buckets' all_reduce time, the last bucket's, uncertainty) on nodes x gpus."""
    params = change.grad_params or basis.num_params
    grad = params * (change.grad_bytes or basis.grad_bytes)
    buckets = ddp_buckets(grad, change.bucket_mb or basis.bucket_mb)
    each = [net.collective("all_reduce", nodes, gpus, b, backend) for b in buckets]
    return sum(c.time_us for c in each), each[-1].time_us, max(c.rel for c in each)


def predict_ddp(
    basis: DDPBasis, net: Network, nodes: int, gpus: int, backend: str, change: WhatIf | None = None
) -> DDPStep:
    """The DDP step on nodes x gpus ranks, weak scaling (the batch per rank kept).

    step = compute + exposed, compute = the measured step without its all_reduce (x the
    what-if's compute scale), exposed = max(k x comm(N) - H, 0): k calibrates the collectives
    model to the buckets' all_reduces DDP measured alone at the run's largest world (bucket
    copies, parameter-bounded buckets), H = the all_reduce time the backward hid there (k x
    comm - what the all_reduce added to the step; negative where it added more than its own
    time), scaled with the compute, so the run's own shape comes back as measured. On another
    kind of device (`other_stack`) k = 1, the window is the scaled backward and the last
    bucket (reduced after the backward) is never hidden.
    With accumulation K: K micro-batches of compute, one exposed all_reduce, one optimizer
    step. Every step waits for the slowest rank: the compute scales with the expected maximum
    of N ranks' steps against the run's own world, from the spread of one rank's step the run
    measured (not on another kind of device: its spread is not the target's)."""
    change = change or WhatIf()
    scale = change.compute_scale or 1.0
    accum = change.accum or 1
    if change.other_stack:  # NCCL on its own stream: the backward is the window, k = 1
        kappa, hidden = 1.0, basis.backward_us * scale
    else:  # k is calibrated on the network as measured, never on a what-if's
        measured_comm, _, _ = _comm(basis, net, basis.nodes, basis.gpus, backend, WhatIf())
        kappa = basis.comm_only_us / measured_comm if measured_comm > 0 else 1.0
        # negative where the all_reduce added more than its own time (DDP's hooks and bucket
        # copies, ranks waiting for each other): that much stays added at every shape
        hidden = (kappa * measured_comm - basis.cost_us) * scale
    net = net.changed(change)
    optimizer = basis.optimizer_us * (change.optimizer_scale or scale)
    # the step without its all_reduce at the run's world; on another kind of device the
    # run's own multi-rank overhead (DDP's hooks on this device, ranks sharing its cores) does
    # not carry over: the one-rank step
    own = basis.single_us if change.other_stack else basis.base_us
    compute_one = (own - basis.optimizer_us) * scale
    single = accum * (basis.single_us - basis.optimizer_us) * scale + optimizer
    # every step waits for the slowest rank: the run's own spread, on its own kind of device
    spread = 0.0 if change.other_stack else basis.spread
    slowest = straggling(spread, accum, nodes * gpus, basis.nodes * basis.gpus)
    compute = accum * compute_one * slowest + optimizer
    if nodes * gpus == 1:
        return DDPStep(
            step_us=single,
            exposed_us=0.0,
            comm_us=0.0,
            efficiency=1.0,
            samples_per_s=accum * basis.samples_per_step / (single / 1e6),
            rel=0.0,
        )
    comm, last, rel = _comm(
        basis, net, nodes, gpus, "nccl" if change.other_stack else backend, change
    )
    # the measured stack: H came from the run itself, so what it left exposed stays consistent;
    # the window model (other hardware): the last bucket starts after the backward, never hidden
    floor = kappa * last if change.other_stack else 0.0
    exposed = max(kappa * comm - hidden, floor, 0.0)
    step = compute + exposed
    return DDPStep(
        step_us=step,
        exposed_us=exposed,
        comm_us=kappa * comm,
        efficiency=single / step,
        samples_per_s=nodes * gpus * accum * basis.samples_per_step / (step / 1e6),
        rel=rel * exposed / step,
    )
