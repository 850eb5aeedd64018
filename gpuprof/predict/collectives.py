"""Collectives predicted from a run's own alpha-beta fits (gpuprof.predict.fits), and the
what-ifs that change their links. No torch. (Predictions on a described system use NCCL's
own model instead: gpuprof.predict.nccl, chosen in gpuprof.predict.network.)

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

from gpuprof.errors import UsageError
from gpuprof.predict.fits import Fit, ring_hops
from gpuprof.units import bus_factor


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
    # every rank in one ring across nodes at `whole_gpus` GPUs per node (a global fit, as
    # nccl-tests measures): each node's ranks adjacent, so a node's share of its hops and
    # the network's bound on its bandwidth are the same at any node count with as many GPUs
    whole: Link | None = None
    whole_gpus: int = 0


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
    together = [
        f for f in mine if f.scope == "global" and f.num_nodes > 1 and f.world_size > f.num_nodes
    ]
    widest = max(together, key=lambda f: (f.num_nodes, f.world_size), default=None)
    return Links(
        intra=largest([f for f in mine if f.num_nodes == 1]),
        inter=largest(across),
        rails=largest([f for f in mine if f.scope == "rails"]),
        whole=_link(widest) if widest else None,
        whole_gpus=widest.world_size // widest.num_nodes if widest else 0,
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
    source: str = "run"  # what it was predicted from: the run's fits, or a preset
    terms: str = ""  # a calibrated prediction: which terms the measurement gave


def predict_collective(
    links: Links, op: str, nodes: int, gpus: int, size: float, backend: str
) -> Collective:
    """The op on `size` bytes over nodes x gpus ranks; a UsageError names the missing link."""
    n = nodes * gpus
    if n < 2:
        raise UsageError(f"{op} on one rank moves nothing")
    inner = links.intra if gpus > 1 else None
    split = inner is not None or gpus == 1
    if nodes > 1 and links.whole and gpus == links.whole_gpus and not (split and links.inter):
        time = ring_time_us(op, n, size, links.whole)
        return Collective(
            time_us=time,
            busbw_gbps=bus_factor(op, n) * size / (time * 1e3),
            rel=links.whole.rel,
            algorithm=f"ring (each node's ranks adjacent, as measured at {gpus} per node)",
        )
    if links.whole and (not split or (nodes > 1 and links.inter is None and not links.rails)):
        raise UsageError(
            f"the run measured its collectives across nodes with {links.whole_gpus} GPUs per "
            f"node together only: the links inside a node and the network's cannot be told "
            f"apart at {nodes} node(s) x {gpus}",
            f"predict more nodes at {links.whole_gpus} GPUs per node, or give --hardware (the "
            "measurement then calibrates NCCL's model)",
        )
    if gpus > 1 and inner is None:
        raise UsageError(
            "the run measured no collective inside a node: cannot predict more than one rank "
            "per node",
            "give --hardware (a preset or a system file)",
        )
    if nodes > 1 and links.inter is None and links.rails is None:
        raise UsageError(
            "the run measured no collective across nodes: cannot predict more than one node",
            "give --nic-gbps (and --nics) or --hardware",
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
    nic_gbps: float | None = None  # line rate of each NIC, Gbit/s
    nics: int | None = None  # NICs per node (None: one per GPU)
    intra_gbps: float | None = None  # Gbit/s of each link inside a node
    grad_bytes: int | None = None  # bytes per gradient element (2: bf16/fp16)
    bucket_mb: float | None = None
    accum: int | None = None
    micro_batches: int | None = None
    compute_scale: float | None = None  # compute time x this (model size, hardware)
    optimizer_scale: float | None = None  # optimizer time x this (default: compute_scale)
    grad_params: int | None = None  # gradient elements (another model)
    # another kind of device (hardware): DDP's measured overheads and overlap do not carry over
    other_stack: bool = False


def _rate(link: Link | None, gbps: float, like: Link | None) -> Link:
    """`link` at another rate; a link the run never measured gets one piece at the rate, with
    the per-hop latency of `like` (the run's measured link inside a node)."""
    if link is not None:
        return link.with_rate(gbps)
    hop = like.at(math.inf)[0] if like is not None else 0.0
    return Link(pieces=((math.inf, hop, gbps),), rel=like.rel if like else 0.0, source="what-if")


def apply_links(links: Links, change: WhatIf, gpus: int) -> Links:
    """The links at the what-if's rates (line rates: real links reach somewhat less). Across
    nodes, one ring crosses one NIC (`inter`); each local rank's rail gets its share of the
    node's NICs (`rails`: nics / gpus of a NIC). A network the run never crossed
    takes the hop latency it measured inside the node."""
    out = links
    if change.intra_gbps is not None or change.nic_gbps is not None:
        out = replace(out, whole=None)  # which of its links a rate changes is not known
    if change.intra_gbps is not None:
        out = replace(out, intra=_rate(out.intra, change.intra_gbps / 8, out.intra))
    if change.nic_gbps is not None:
        share = 1.0 if change.nics is None else change.nics / max(1, gpus)
        across = out.inter or out.rails
        rates = {"inter": change.nic_gbps / 8, "rails": share * change.nic_gbps / 8}
        new = {
            name: _rate(getattr(out, name) or across, rate, out.intra)
            for name, rate in rates.items()
        }
        out = replace(out, inter=new["inter"], rails=new["rails"])
    return out
