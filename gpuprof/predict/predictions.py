"""`gpuprof predict`: what a run's measurements say about other cluster shapes, hardware and
models (docs/methodology.md, "Scaling predictions"). No torch: the fits and models live in
gpuprof.predict.fits and gpuprof.predict.scaling; this module turns a run and the options
into scenarios and tables.

The baseline is the run's hardware and model, or another model (--model-params, --hidden and
--layers, --compute-ms). Each other option is a what-if row beside it (--hardware,
--network-gbps, --intra-gbps, --grad-dtype, --bucket-mb, --accum), all of them together when
more than one is given; without any, the candidate knobs the advice compares: the network
twice as fast, 16-bit gradients, 100 MB buckets, 4 accumulation steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.predict.fits import Fit, fit_collectives, fits_frame
from gpuprof.predict.scaling import (
    DDPBasis,
    Links,
    WhatIf,
    ddp_basis,
    links_for,
    pipeline_bases,
    predict_collective,
    predict_ddp,
    predict_pipeline,
)
from gpuprof.predict.whatifs import PredictRequest, knobs, merge, model_change
from gpuprof.specs.collectives import SPEC as _COLLECTIVES
from gpuprof.specs.ddp import SPEC as _DDP
from gpuprof.specs.pipeline import SPEC as _PIPELINE

# the probes predictions read (their names spelled by their specs only)
COLLECTIVES, DDP, PIPELINE = _COLLECTIVES.name, _DDP.name, _PIPELINE.name

EFFICIENCY_MARKS = (0.8, 0.5)


@dataclass
class Prediction:
    """Everything `predict` says about one run."""

    backend: str
    gpus: int
    nodes: tuple[int, ...]
    fits: pd.DataFrame
    collectives: pd.DataFrame
    ddp: pd.DataFrame
    whatifs: pd.DataFrame
    pipeline: pd.DataFrame
    crossings: dict[float, int | None]
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (`predict --format json`)."""

        def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
            return [
                {
                    str(k): (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for k, v in r.items()
                }
                for r in frame.to_dict("records")
            ]

        return {
            "backend": self.backend,
            "gpus_per_node": self.gpus,
            "nodes": list(self.nodes),
            "fits": records(self.fits),
            COLLECTIVES: records(self.collectives),
            DDP: records(self.ddp),
            "whatifs": records(self.whatifs),
            PIPELINE: records(self.pipeline),
            "efficiency_below": {f"{int(100 * k)}%": v for k, v in self.crossings.items()},
            "assumptions": self.assumptions,
            "notes": self.notes,
        }


def predict(analyzed: Analyzed, request: PredictRequest) -> Prediction:
    """Every prediction the run supports; a UsageError when it supports none."""
    info = analyzed.info
    backend = str(info.get("backend") or "gloo")
    gpus = request.gpus or int(info.get("gpus_per_node") or 1)
    if any(n < 1 for n in request.nodes) or gpus < 1:
        raise UsageError("--nodes and --gpus must be at least 1")
    notes: list[str] = []
    fits: list[Fit] = []
    if analyzed.has(COLLECTIVES):
        fits, notes = fit_collectives(analyzed.summary(COLLECTIVES))
    if not fits:
        raise UsageError(
            "the run has no collective measured at 2 or more sizes: nothing to fit",
            "run a sweep with the collectives probe (e.g. gpuprof run collectives -b 1K -e 16M)",
        )
    basis = None
    if analyzed.has(DDP):
        try:
            basis = ddp_basis(analyzed.summary(DDP), int(info.get("gpus_per_node") or 1))
        except UsageError as exc:
            notes.append(f"DDP not predicted: {exc.message}")
    links = {(f.op, f.dtype): links_for(fits, f.op, f.dtype) for f in fits}
    collectives = _collectives(analyzed, request, links, backend, gpus, notes)
    ddp, whatifs, crossings = _ddp(analyzed, request, basis, links, backend, gpus, notes)
    pipeline = _pipeline(analyzed, request, notes)
    return Prediction(
        backend=backend,
        gpus=gpus,
        nodes=request.nodes,
        fits=fits_frame(fits),
        collectives=collectives,
        ddp=ddp,
        whatifs=whatifs,
        pipeline=pipeline,
        crossings=crossings,
        assumptions=assumptions(backend, basis, request),
        notes=notes,
    )


def _collectives(
    analyzed: Analyzed,
    request: PredictRequest,
    links: dict[tuple[str, str], Links],
    backend: str,
    gpus: int,
    notes: list[str],
) -> pd.DataFrame:
    rows = []
    for (op, dtype), op_links in sorted(links.items()):
        measured = analyzed.summary(COLLECTIVES)
        own = measured[(measured["op"] == op) & (measured["dtype"] == dtype)]
        sizes = request.sizes or (int(own["size_bytes"].max()),)
        for nodes in request.nodes:
            for size in sizes:
                try:
                    got = predict_collective(op_links, op, nodes, gpus, size, backend)
                except UsageError as exc:
                    if nodes * gpus > 1:
                        _note(notes, exc.one_line())
                    continue
                rows.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "nodes": nodes,
                        "world_size": nodes * gpus,
                        "size_bytes": size,
                        "time_us": got.time_us,
                        "busbw_gbps": got.busbw_gbps,
                        "busbw_low": got.busbw_gbps / (1 + got.rel),
                        "busbw_high": got.busbw_gbps * (1 + got.rel),
                        "algorithm": got.algorithm,
                    }
                )
    return pd.DataFrame(rows)


def _ddp_rows(
    basis: DDPBasis, links: Links, backend: str, gpus: int, nodes: tuple[int, ...], change: WhatIf
) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        step = predict_ddp(basis, links, n, gpus, backend, change)
        rows.append(
            {
                "scenario": change.label,
                "nodes": n,
                "world_size": n * gpus,
                "step_ms": step.step_us / 1e3,
                "exposed_ms": step.exposed_us / 1e3,
                "comm_ms": step.comm_us / 1e3,
                "efficiency": step.efficiency,
                "samples_per_s": step.samples_per_s,
                "step_low_ms": step.step_us * (1 - step.rel) / 1e3,
                "step_high_ms": step.step_us * (1 + step.rel) / 1e3,
            }
        )
    return rows


def _ddp(
    analyzed: Analyzed,
    request: PredictRequest,
    basis: DDPBasis | None,
    links: dict[tuple[str, str], Links],
    backend: str,
    gpus: int,
    notes: list[str],
) -> tuple[pd.DataFrame, pd.DataFrame, dict[float, int | None]]:
    empty = pd.DataFrame()
    crossings: dict[float, int | None] = {}
    ar = links.get(("all_reduce", "float32"))
    if basis is None or ar is None:
        if basis is not None:
            notes.append("DDP not predicted: the run has no float32 all_reduce fit")
        return empty, empty, crossings
    base = model_change(request, basis)
    rows = []
    for nodes in request.nodes:
        try:
            rows += _ddp_rows(basis, ar, backend, gpus, (nodes,), base)
        except UsageError as exc:
            _note(notes, f"DDP at {nodes} node(s) not predicted: {exc.one_line()}")
    ddp = pd.DataFrame(rows)
    for mark in EFFICIENCY_MARKS:
        below = ddp[ddp["efficiency"] < mark] if not ddp.empty else ddp
        crossings[mark] = int(below["nodes"].min()) if not below.empty else None
    at = max(request.nodes)
    fixed = request.compute_ms is not None
    ours = ddp[ddp["nodes"] == at] if not ddp.empty else ddp
    reference: dict[str, Any] | None = None
    if not ours.empty:
        reference = {str(k): v for k, v in ours.iloc[0].to_dict().items()}
    what: list[dict[str, Any]] = [{**reference, "gain_pct": 0.0}] if reference else []
    for change in knobs(request, analyzed, basis, ar):
        try:
            row = _ddp_rows(basis, ar, backend, gpus, (at,), merge(base, change, fixed))[0]
        except UsageError as exc:
            _note(notes, f"what-if {change.label}: {exc.one_line()}")
            continue
        ref = reference["samples_per_s"] if reference else math.nan
        row["gain_pct"] = 100 * (row["samples_per_s"] / ref - 1)
        what.append(row)
    return ddp, pd.DataFrame(what), crossings


def _note(notes: list[str], line: str) -> None:
    if line not in notes:
        notes.append(line)


def _pipeline(analyzed: Analyzed, request: PredictRequest, notes: list[str]) -> pd.DataFrame:
    if not analyzed.has(PIPELINE):
        return pd.DataFrame()
    bases = pipeline_bases(analyzed.summary(PIPELINE))
    if not bases:
        notes.append("pipeline not predicted: no schedule with a closed-form bubble was measured")
        return pd.DataFrame()
    rows = []
    for basis in bases:
        for p in (basis.p, 2 * basis.p, 4 * basis.p, 8 * basis.p):
            # the what-if: other micro-batch counts against m = p, in micro-batches per second
            reference = predict_pipeline(basis, p, p)
            for m in request.micro_batches or (p, 2 * p, 4 * p):
                got = predict_pipeline(basis, p, m)
                if got is None or reference is None:
                    continue
                rows.append(
                    {
                        "gain_pct": 100 * ((m / got[0]) / (p / reference[0]) - 1),
                        "schedule": basis.schedule,
                        "p": p,
                        "m": m,
                        "v": basis.v,
                        "step_ms": got[0] / 1e3,
                        "bubble_pct": 100 * got[1],
                        "measured_ms": basis.measured.get(m, math.nan) / 1e3
                        if p == basis.p
                        else math.nan,
                    }
                )
    return pd.DataFrame(rows)


def assumptions(backend: str, basis: DDPBasis | None, request: PredictRequest) -> list[str]:
    """What every prediction assumes, said once."""
    lines = [
        "Collectives: time = hops x per-hop latency + bus factor x size / per-link bandwidth, "
        "both from the run's alpha-beta fits. "
        + (
            "NCCL all_reduce across nodes with more than one GPU per node: hierarchical "
            "(reduce_scatter in the node, all_reduce of size/g across nodes on the rails, "
            "all_gather); every other op a ring."
            if backend == "nccl"
            else "gloo: one ring over all ranks, each node's ranks adjacent (it crosses each "
            "NIC once), on its slowest link and longest hop."
        ),
        "Band: the worst relative residual of the fits a prediction uses.",
    ]
    if basis is not None:
        lines.append(
            f"DDP ({basis.variant}, {basis.num_params:,} parameters measured): weak scaling, "
            "the batch per rank kept; compute = the step without its all_reduce; exposed = "
            "the buckets' all_reduces (calibrated to what DDP measured alone) less what the "
            "backward hid at the run's largest world; on other hardware, what the backward "
            "cannot hide, the last bucket at least."
        )
    if request.model_params:
        lines.append(
            "Another model: compute scaled by its parameter count (FLOPs per token are about "
            "6 x parameters, at the same tokens per rank); gradients of its size."
        )
    if request.compute_ms:
        lines.append("--compute-ms: the one-rank step on the target, as given.")
    if request.hardware:
        lines.append(
            "--hardware: its links as in the preset; compute scaled by the run's float32 "
            "matmul rate against the preset GPU's, unless --compute-ms gives it."
        )
    lines.append(
        "Pipeline (p = the measured stages x 1, 2, 4, 8): step = the bubble theory with the "
        "measured per-micro-batch stage times (each stage kept as measured) + the step's "
        "excess over theory at the measured p, "
        "fitted as c x (p - 1) + e x m x v (hops on the fill and drain, send/recv per "
        "micro-batch)."
    )
    return lines


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
