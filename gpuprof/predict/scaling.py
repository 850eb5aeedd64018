"""Scaling predictions from a run's own measurements (docs/methodology.md, "Scaling
predictions"): collectives from the alpha-beta fits (gpuprof.predict.fits), the DDP step from
its measured breakdown, the pipeline step from its measured stage times. No torch.

Algorithms (which one each prediction assumes, and why):
- ring: every op on gloo, and every op but all_reduce on NCCL: one ring over all ranks with
  each node's ranks adjacent, so it crosses every NIC once; its slowest link and longest hop
  set the time: hops(n) x hop + busfactor(n) x S / link.
- hierarchical (NCCL all_reduce on more than one node with more than one GPU per node):
  reduce_scatter inside the node, all_reduce of S/g across nodes on the rails (one ring per
  local rank, at once), all_gather inside the node: what NCCL's ring and tree both approach
  at large sizes; at small sizes on many nodes NCCL's tree has log-many hops, so the
  latency there is an upper bound.
The uncertainty band of a prediction is the worst relative residual of the fits it uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gpuprof.analysis.pipeline import bubble_fraction
from gpuprof.errors import UsageError
from gpuprof.predict.fits import Fit, ring_hops
from gpuprof.specs.collectives import bus_factor

FIRST_BUCKET_BYTES = 1 << 20  # torch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)


@dataclass(frozen=True, kw_only=True)
class Link:
    """One link class for one op: per-hop latency and per-link bandwidth for each regime of
    sizes (a fit's pieces), and where they came from."""

    pieces: tuple[tuple[float, float, float], ...]  # (up to size, hop_us, GB/s)
    rel: float  # relative uncertainty of what it predicts
    source: str

    def at(self, size: float) -> tuple[float, float]:
        """(hop_us, GB/s) for an op on `size` bytes."""
        return next((hop, gbps) for upto, hop, gbps in self.pieces if size <= upto)

    def with_rate(self, gbps: float, hop_us: float | None = None) -> Link:
        """The same link at another bandwidth (and hop latency)."""
        pieces = tuple((u, h if hop_us is None else hop_us, gbps) for u, h, _ in self.pieces)
        return Link(pieces=pieces, rel=self.rel, source="what-if")


@dataclass(frozen=True, kw_only=True)
class Links:
    """An op's links: inside a node, one ring across nodes, every local rank across at once."""

    intra: Link | None = None
    inter: Link | None = None
    rails: Link | None = None


def _link(fit: Fit) -> Link:
    hops, factor = ring_hops(fit.op, fit.world_size), bus_factor(fit.op, fit.world_size)
    return Link(
        pieces=tuple((p.upto, p.alpha_us / hops, factor * p.beta_gbps) for p in fit.pieces),
        rel=fit.worst_rel,
        source=f"{fit.op} {fit.scope} n={fit.world_size}",
    )


def links_for(fits: list[Fit], op: str, dtype: str) -> Links:
    """The op's links from the run's fits: intra from the largest world inside one node, inter
    from one rank per node (`inter`, or `global` with one rank per node), rails from `rails`."""
    mine = [f for f in fits if f.op == op and f.dtype == dtype]

    def largest(chosen: list[Fit]) -> Link | None:
        if not chosen:
            return None
        return _link(max(chosen, key=lambda f: (f.world_size, f.scope == "intra")))

    across = [
        f
        for f in mine
        if f.num_nodes > 1
        and (f.scope == "inter" or (f.scope == "global" and f.world_size == f.num_nodes))
    ]
    return Links(
        intra=largest([f for f in mine if f.num_nodes == 1]),
        inter=largest(across),
        rails=largest([f for f in mine if f.scope == "rails"]),
    )


def ring_time_us(op: str, n: int, size: float, *links: Link) -> float:
    """hops(n) x hop + busfactor(n) x size / link, on the longest hop and slowest link."""
    found = [link.at(size) for link in links]
    hop, gbps = max(h for h, _ in found), min(g for _, g in found)
    return ring_hops(op, n) * hop + bus_factor(op, n) * size / (gbps * 1e3)


@dataclass(frozen=True, kw_only=True)
class Collective:
    """A predicted collective: time, busbw, its relative uncertainty and the algorithm."""

    time_us: float
    busbw_gbps: float
    rel: float
    algorithm: str


def predict_collective(
    links: Links, op: str, nodes: int, gpus: int, size: float, backend: str
) -> Collective:
    """The op on `size` bytes over nodes x gpus ranks; a UsageError names the missing link."""
    n = nodes * gpus
    if n < 2:
        raise UsageError(f"{op} on one rank moves nothing")
    inner = links.intra if gpus > 1 else None
    if gpus > 1 and inner is None:
        raise UsageError(
            f"no {op} measured inside a node: cannot predict more than one rank per node",
            "give --intra-gbps or --hardware",
        )
    if nodes > 1 and links.inter is None and links.rails is None:
        raise UsageError(
            f"no {op} measured across nodes: cannot predict more than one node",
            "give --network-gbps or --hardware",
        )
    if nodes > 1 and gpus > 1 and op == "all_reduce" and backend == "nccl":
        assert inner is not None
        across = links.rails or links.inter
        assert across is not None
        time = (
            ring_time_us("reduce_scatter", gpus, size, inner)
            + ring_time_us("all_reduce", nodes, size / gpus, across)
            + ring_time_us("all_gather", gpus, size, inner)
        )
        rel = max(inner.rel, across.rel)
        algorithm = "hierarchical (reduce_scatter in node, all_reduce across, all_gather)"
    else:
        used = [link for link in (inner, links.inter or links.rails if nodes > 1 else None) if link]
        time = ring_time_us(op, n, size, *used)
        rel, algorithm = max(link.rel for link in used), "ring (each node's ranks adjacent)"
    busbw = bus_factor(op, n) * size / (time * 1e3)
    return Collective(time_us=time, busbw_gbps=busbw, rel=rel, algorithm=algorithm)


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """A change to predict with; None keeps what was measured."""

    label: str = "as measured"
    network_gbps: float | None = None  # Gbit/s of each inter-node link (and each rail)
    intra_gbps: float | None = None  # Gbit/s of each link inside a node
    grad_bytes: int | None = None  # bytes per gradient element (2: bf16/fp16)
    bucket_mb: float | None = None
    accum: int | None = None
    micro_batches: int | None = None
    compute_scale: float | None = None  # compute time x this (model size, hardware)
    grad_params: int | None = None  # gradient elements (another model)
    hop_us: tuple[float, float] | None = None  # (intra, inter) per-hop latency (hardware)
    # another software stack (hardware): DDP's measured overheads and overlap do not carry over
    other_stack: bool = False


def _rate(link: Link | None, gbps: float, hop_us: float | None) -> Link:
    if link is None or hop_us is not None:  # not measured, or a preset's (hardware): one piece
        return Link(pieces=((math.inf, hop_us or 0.0, gbps),), rel=0.0, source="what-if")
    return link.with_rate(gbps, hop_us)


def apply_links(links: Links, change: WhatIf) -> Links:
    """The links at the what-if's rates (line rates: real links reach somewhat less)."""
    out = links
    hops = change.hop_us or (None, None)
    if change.intra_gbps is not None:
        out = replace(out, intra=_rate(out.intra, change.intra_gbps / 8, hops[0]))
    if change.network_gbps is not None:
        across = out.inter or out.rails
        new = {
            name: _rate(getattr(out, name) or across, change.network_gbps / 8, hops[1])
            for name in ("inter", "rails")
        }
        out = replace(out, **new)
    return out


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
    cost_us: float  # what the all_reduce costs the step there (A/B)
    backward_us: float  # backward compute there (the window an all_reduce can hide in)
    step_us: float
    nodes: int
    gpus: int
    bucket_mb: float = 25.0


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
    cost = float(top["comm_cost_ab_us"])
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
    )


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
    basis: DDPBasis, links: Links, nodes: int, gpus: int, backend: str, change: WhatIf
) -> tuple[float, float, float]:
    """(all buckets' all_reduce time, the last bucket's, uncertainty) on nodes x gpus."""
    params = change.grad_params or basis.num_params
    grad = params * (change.grad_bytes or basis.grad_bytes)
    buckets = ddp_buckets(grad, change.bucket_mb or basis.bucket_mb)
    each = [predict_collective(links, "all_reduce", nodes, gpus, b, backend) for b in buckets]
    return sum(c.time_us for c in each), each[-1].time_us, max(c.rel for c in each)


def predict_ddp(
    basis: DDPBasis, links: Links, nodes: int, gpus: int, backend: str, change: WhatIf | None = None
) -> DDPStep:
    """The DDP step on nodes x gpus ranks, weak scaling (the batch per rank kept).

    step = compute + exposed, compute = the measured step without its all_reduce (x the
    what-if's compute scale), exposed = max(k x comm(N) - H, 0): k calibrates the collectives
    model to the buckets' all_reduces DDP measured alone at the run's largest world (bucket
    copies, parameter-bounded buckets), H = the all_reduce time the backward hid there (k x
    comm - its A/B cost), scaled with the compute, so the run's own shape comes back as
    measured. On other hardware (another stack) k = 1, the window is the scaled backward and
    the last bucket (reduced after the backward) is never hidden. With accumulation K: K
    micro-batches of compute, one exposed all_reduce."""
    change = change or WhatIf()
    # k is calibrated on the links as measured, never on a what-if's
    measured_comm, _, _ = _comm(basis, links, basis.nodes, basis.gpus, backend, WhatIf())
    links = apply_links(links, change)
    scale = change.compute_scale or 1.0
    accum = change.accum or 1
    kappa = basis.comm_only_us / measured_comm if measured_comm > 0 else 1.0
    hidden = max(0.0, kappa * measured_comm - basis.cost_us) * scale
    if change.other_stack:  # NCCL on its own stream: the backward is the window, k = 1
        kappa, hidden = 1.0, basis.backward_us * scale
    compute_one = (basis.base_us - basis.optimizer_us) * scale
    single = (accum * (basis.single_us - basis.optimizer_us) + basis.optimizer_us) * scale
    compute = accum * compute_one + basis.optimizer_us * scale
    if nodes * gpus == 1:
        return DDPStep(
            step_us=single,
            exposed_us=0.0,
            comm_us=0.0,
            efficiency=1.0,
            samples_per_s=accum * basis.samples_per_step / (single / 1e6),
            rel=0.0,
        )
    # other hardware: a GPU node, NCCL's algorithms
    comm, last, rel = _comm(
        basis, links, nodes, gpus, "nccl" if change.other_stack else backend, change
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
