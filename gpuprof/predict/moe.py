"""A mixture-of-experts layer's dispatch and combine at other node and expert counts.

NCCL runs all_to_all as point-to-point sends and receives (outside its tuning model): each
rank's bytes to ranks in its node at the NVLink rate and to other nodes at its share of the
node's NICs, both at once (`gpuprof.predict.nccl.point_to_point`; the run's own fits where
it has no system). A MoE dispatch is an all_to_all whose busiest rank receives more than the
others: every rank routes alike (the moe probe's plan, `specs.routing`), so each source sends
the busiest rank the same tokens and its bytes split between its node and the network as an
equal all_to_all's do. The layer therefore waits for an all_to_all whose buffer is the busiest
rank's received bytes x n / (n - 1); the combine (the transpose) for the same, on its send
side.

Where the run measured the layer at its own shape, each routing's prediction there is set
against the measurement, and the ratio carries to every other shape (the row says so): what
the model misses at the measured shape (gloo's or NCCL's own overheads) is taken as measured
input, never fitted to the rows predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.predict.network import Network
from gpuprof.predict.whatifs import PredictRequest
from gpuprof.runs.store import PLAN_JSON, read_json
from gpuprof.specs.moe import SPEC as _MOE
from gpuprof.specs.routing import Routing, zipf_weights
from gpuprof.units import DTYPE_BYTES

MOE = _MOE.name


@dataclass(frozen=True)
class MoEBasis:
    """One measured flat routing: the layer's shape and, at the run's shape, its times."""

    label: str  # the skew, or "histogram"
    weights: tuple[float, ...]  # the histogram's expert shares (its E fixed); () for a skew
    tokens: int
    hidden: int
    dtype: str
    top_k: int
    experts_per_rank: int
    capacity_factor: float
    placement: str
    nodes: int  # the run's shape
    gpus: int
    dispatch_us: float
    combine_us: float

    def routing(self, ranks: int, experts: int | None) -> Routing:
        """The routing over `ranks` ranks of `experts` experts (default: as many a rank as
        the run had; a histogram keeps its own count)."""
        if self.label == "histogram":
            count, weights = len(self.weights), self.weights
        else:
            count = experts or self.experts_per_rank * ranks
            weights = tuple(zipf_weights(count, float(self.label)))
        return Routing(
            ranks=ranks,
            tokens=self.tokens,
            experts=count,
            top_k=min(self.top_k, count),
            weights=weights,
            placement=self.placement,
            capacity_factor=self.capacity_factor or None,
        )


def moe_bases(summary: pd.DataFrame, histogram: tuple[float, ...]) -> list[MoEBasis]:
    """The flat routings of a MoE summary (`histogram`: the run's --moe-routing counts)."""
    out = []
    for row in summary[summary["layout"] == "flat"].to_dict("records"):
        ranks, nodes = int(row["world_size"]), int(row["num_nodes"])
        weights: tuple[float, ...] = ()  # a skew's shares follow from it at each expert count
        if row["skew"] == "histogram":
            if not histogram:
                continue
            weights = tuple(c / sum(histogram) for c in histogram)
        out.append(
            MoEBasis(
                label=str(row["skew"]),
                weights=weights,
                tokens=int(row["tokens"]),
                hidden=int(row["hidden"]),
                dtype=str(row["dtype"]),
                top_k=int(row["top_k"]),
                experts_per_rank=max(1, int(row["experts"]) // ranks),
                capacity_factor=float(row["capacity_factor"]),
                placement=str(row["placement"]),
                nodes=nodes,
                gpus=ranks // nodes,
                dispatch_us=float(row["dispatch_us"]),
                combine_us=float(row["combine_us"]),
            )
        )
    return out


def busiest_received(routing: Routing, width: int, gpus: int) -> tuple[int, int]:
    """Bytes the busiest rank receives from other ranks in a dispatch, and of those the bytes
    from other nodes (`gpus` ranks a node)."""
    flat = routing.dispatch_tokens()
    ranks = range(routing.ranks)
    received = [sum(flat[src][d] for src in ranks if src != d) for d in ranks]
    hot = max(ranks, key=lambda d: received[d])
    crossing = sum(flat[src][hot] for src in ranks if src // gpus != hot // gpus)
    return received[hot] * width, crossing * width


def _layer_us(
    basis: MoEBasis, net: Network, nodes: int, gpus: int, backend: str, experts: int | None
) -> tuple[float, Routing, int, Any]:
    """The model's dispatch time (us) on nodes x gpus ranks, its routing, the bytes the
    busiest rank receives from other nodes and the all_to_all prediction it came from."""
    ranks = nodes * gpus
    routing = basis.routing(ranks, experts)
    received, crossing = busiest_received(routing, basis.hidden * DTYPE_BYTES[basis.dtype], gpus)
    size = received * ranks / (ranks - 1)
    got = net.collective("all_to_all", nodes, gpus, size, backend)
    return got.time_us, routing, crossing, got


def predict_moe(
    bases: list[MoEBasis],
    net: Network,
    nodes_list: tuple[int, ...],
    gpus: int,
    backend: str,
    experts: int | None,
    notes: list[str],
) -> pd.DataFrame:
    """Per routing and node count: the dispatch and combine the layer waits for."""
    rows = []
    for basis in bases:
        factors: tuple[float, float] | None = None
        if basis.nodes * basis.gpus > 1 and basis.gpus == gpus and basis.dispatch_us > 0:
            try:
                at_run, *_ = _layer_us(basis, net, basis.nodes, basis.gpus, backend, None)
                factors = (basis.dispatch_us / at_run, basis.combine_us / at_run)
            except UsageError:
                factors = None
        for nodes in nodes_list:
            ranks = nodes * gpus
            if ranks < 2:
                continue
            try:
                model_us, routing, crossing, got = _layer_us(
                    basis, net, nodes, gpus, backend, experts
                )
            except UsageError as exc:
                line = f"MoE not predicted at {nodes} nodes: {exc.message}"
                notes.extend([] if line in notes else [line])
                continue
            width = basis.hidden * DTYPE_BYTES[basis.dtype]
            buffer = sum(routing.kept) * width
            dispatch = combine = model_us
            source = f"all_to_all ({got.source})"
            if factors is not None:
                dispatch, combine = model_us * factors[0], model_us * factors[1]
                source += (
                    f" x the run's measured dispatch at {basis.nodes}x{basis.gpus} "
                    f"({factors[0]:.2f})"
                )
            rows.append(
                {
                    "skew": basis.label,
                    "capacity_factor": basis.capacity_factor,
                    "nodes": nodes,
                    "world_size": ranks,
                    "experts": routing.experts,
                    "imbalance": round(routing.imbalance(), 3),
                    "dropped": routing.dropped,
                    "net_bytes": crossing,
                    "dispatch_us": dispatch,
                    "combine_us": combine,
                    "model_us": model_us,
                    "busbw_gbps": buffer / dispatch / 1e3 * (ranks - 1) / ranks,
                    # the busiest rank's network bytes over the dispatch: DeepEP's "bottleneck
                    # bandwidth" (RDMA) across nodes
                    "net_gbps": crossing / dispatch / 1e3,
                    "rel": got.rel,
                    "source": source,
                    "terms": got.terms,
                }
            )
    return pd.DataFrame(rows)


def moe_prediction(
    analyzed: Analyzed,
    nets: dict[tuple[str, str], Network],
    preset: Network | None,
    request: PredictRequest,
    gpus: int,
    backend: str,
    notes: list[str],
) -> pd.DataFrame:
    """The MoE rows of `gpuprof predict` for a run that measured the moe probe (empty
    otherwise): on the run's all_to_all fits (of the layer's dtype, else float32's), else
    the described system's network."""
    if not analyzed.has(MOE):
        return pd.DataFrame()
    summary = analyzed.summary(MOE)
    folder = getattr(analyzed.run, "path", None)
    plan_file = Path(folder) / PLAN_JSON if folder else None
    plan = read_json(plan_file) if plan_file is not None and plan_file.exists() else {}
    histogram = tuple((plan.get(MOE) or {}).get("histogram") or ())
    bases = moe_bases(summary, histogram)
    dtype = str(summary["dtype"].iloc[0]) if not summary.empty else "float32"
    net = nets.get(("all_to_all", dtype)) or nets.get(("all_to_all", "float32")) or preset
    if not bases or net is None:
        notes.append(
            "MoE not predicted: "
            + ("no flat routing was measured" if not bases else "no all_to_all fit or system")
        )
        return pd.DataFrame()
    return predict_moe(bases, net, request.nodes, gpus, backend, request.experts, notes)
