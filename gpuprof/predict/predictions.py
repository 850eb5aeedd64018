"""`gpuprof predict`: what a run's measurements say about other cluster shapes, hardware and
models (docs/prediction.md). No torch: the fits, networks and models live in
gpuprof.predict.fits, .network, .nccl, .ddp and .pipeline; this module turns a run and the
options into scenarios and tables.

The baseline is the run's hardware (or the system --hardware describes) and its model (or
another: --model-params, --hidden and --layers, --compute-ms); a one-node run's network is
--nic-gbps where given. Each other option is a what-if row beside it (--nic-gbps on a run that
crossed nodes, --intra-gbps, --grad-dtype, --bucket-mb, --accum), all of them together when
more than one is given; without any, the candidate knobs the advice compares: the network
twice as fast (a run that crossed nodes), 16-bit gradients, 100 MB buckets, 4 accumulation
steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from gpuprof.analysis import gpu_model
from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.machine.systems import System
from gpuprof.predict.assumptions import assumptions, source_note
from gpuprof.predict.calibrations import calibration_notes, measured_calibrations, run_system
from gpuprof.predict.collectives import WhatIf, links_for
from gpuprof.predict.ddp import DDPBasis, ddp_basis, predict_ddp
from gpuprof.predict.fits import Fit, fit_collectives, fits_frame
from gpuprof.predict.moe import MOE, moe_prediction
from gpuprof.predict.nccl import OPS
from gpuprof.predict.network import (
    CalibratedNetwork,
    FitNetwork,
    MixedNetwork,
    Network,
    SystemNetwork,
)
from gpuprof.predict.pipeline import pipeline_bases, predict_pipeline
from gpuprof.predict.whatifs import (
    PredictRequest,
    asks_ddp,
    baseline_network,
    hardware_change,
    knobs,
    merge,
    model_change,
    same_hardware,
)
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
    moe: pd.DataFrame = field(default_factory=pd.DataFrame)

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
            MOE: records(self.moe),
            "efficiency_below": {f"{int(100 * k)}%": v for k, v in self.crossings.items()},
            "assumptions": self.assumptions,
            "notes": self.notes,
        }


def predict(
    analyzed: Analyzed, request: PredictRequest, also: tuple[Analyzed, ...] = ()
) -> Prediction:
    """Every prediction the run supports; a UsageError when it supports none. `also`: more
    runs on the same system whose collectives calibrate too (`--calibrate-with`: another node
    count; each prediction takes the nearest measured one)."""
    info = analyzed.info
    backend = str(info.get("backend") or "gloo")
    system = run_system(info, request.hardware)
    gpus = (
        request.gpus
        or (system.gpus_per_node if system else 0)
        or int(info.get("gpus_per_node") or 1)
    )
    if any(n < 1 for n in request.nodes) or gpus < 1:
        raise UsageError("--nodes and --gpus must be at least 1")
    notes: list[str] = []
    fits: list[Fit] = []
    if analyzed.has(COLLECTIVES):
        # fitted once per run: the report predicts several shapes, its findings again
        fitted = analyzed.cached(
            "collective fits", lambda: fit_collectives(analyzed.summary(COLLECTIVES))
        )
        fits, notes = list(fitted[0]), list(fitted[1])
    if not fits and system is None:
        raise UsageError(
            "the run has no collective measured at 2 or more sizes: nothing to fit",
            "run a sweep with the collectives probe, or predict on a system (--hardware)",
        )
    basis = None
    if analyzed.has(DDP):
        try:
            basis = ddp_basis(analyzed.summary(DDP), int(info.get("gpus_per_node") or 1))
        except UsageError as exc:
            notes.append(f"DDP not predicted: {exc.message}")
    same = system is not None and same_hardware(analyzed, system)
    calibrations = measured_calibrations(analyzed, also, system, same)
    if system is not None:
        backend = "nccl"
        named = bool(gpu_model(info) or info.get("hardware")) or info.get("device") != "cuda"
        notes.append(source_note(system, same, bool(calibrations), named))
        notes += calibration_notes(calibrations, system)
    nets = {
        (f.op, f.dtype): _network(
            FitNetwork(links_for(fits, f.op, f.dtype)), system, same, request, notes
        )
        for f in fits
    }
    if system is not None:  # every op NCCL has, in float32, whether the run measured it or not
        for op in OPS:
            nets.setdefault((op, "float32"), _network(None, system, same, request, notes))
        for key, found in calibrations.items():
            fallback = nets.get(key) or _network(None, system, same, request, notes)
            nets[key] = CalibratedNetwork(system, tuple(found), fallback)
    collectives = _collectives(analyzed, request, nets, backend, gpus, notes)
    preset = SystemNetwork(system) if system is not None else None
    moe = moe_prediction(analyzed, nets, preset, request, gpus, backend, notes)
    scale, trains = None, True
    if system is not None and not same:
        scale = hardware_change(request, analyzed, system).compute_scale
        if scale is None and request.compute_ms is None and (basis or analyzed.has(PIPELINE)):
            notes.append(
                f"DDP and pipeline not predicted on {system.name}: the run measured another "
                "device and has no float32 matmul rate to scale its compute by (run the "
                "compute probe, or give --compute-ms)"
            )
            basis, trains = None, False
    ddp, whatifs, crossings = _ddp(
        analyzed, request, basis, nets.get(("all_reduce", "float32")), backend, gpus, system, notes
    )
    other = None if system is None or same else (scale or 1.0)
    pipeline = _pipeline(analyzed, request, gpus, other, notes) if trains else pd.DataFrame()
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
        assumptions=assumptions(
            backend, basis, request, system, bool(calibrations), same, not pipeline.empty
        ),
        notes=notes,
        moe=moe,
    )


def _network(
    fitted: FitNetwork | None,
    system: System | None,
    same: bool,
    request: PredictRequest,
    notes: list[str],
) -> Network:
    """The baseline network of an op: the preset (the run's fits inside the node where they
    measured the same hardware), else the run's fits, with --nic-gbps as the network where the
    run crossed none."""
    if system is not None:
        preset = SystemNetwork(system)
        return MixedNetwork(run=fitted, system=preset) if same and fitted else preset
    assert fitted is not None
    return baseline_network(fitted, request, notes)


def _collectives(
    analyzed: Analyzed,
    request: PredictRequest,
    nets: dict[tuple[str, str], Network],
    backend: str,
    gpus: int,
    notes: list[str],
) -> pd.DataFrame:
    rows = []
    measured = analyzed.summary(COLLECTIVES) if analyzed.has(COLLECTIVES) else None
    for (op, dtype), net in sorted(nets.items()):
        own = (
            measured[(measured["op"] == op) & (measured["dtype"] == dtype)]
            if measured is not None
            else None
        )
        largest = int(own["size_bytes"].max()) if own is not None and len(own) else 1 << 30
        for nodes in request.nodes:
            for size in request.sizes or (largest,):
                try:
                    got = net.collective(op, nodes, gpus, size, backend)
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
                        "busbw_low": got.busbw_gbps * max(1 - got.rel, 0.0),
                        "busbw_high": got.busbw_gbps * (1 + got.rel),
                        "algorithm": got.algorithm,
                        "source": got.source,
                        "terms": got.terms,
                    }
                )
    return pd.DataFrame(rows)


def _ddp_rows(
    basis: DDPBasis, net: Network, backend: str, gpus: int, nodes: tuple[int, ...], change: WhatIf
) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        step = predict_ddp(basis, net, n, gpus, backend, change)
        rows.append(
            {
                "scenario": change.label,
                "nodes": n,
                "world_size": n * gpus,
                "step_ms": step.step_us / 1e3,
                "comm_added_ms": step.exposed_us / 1e3,
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
    net: Network | None,
    backend: str,
    gpus: int,
    system: System | None,
    notes: list[str],
) -> tuple[pd.DataFrame, pd.DataFrame, dict[float, int | None]]:
    empty = pd.DataFrame()
    crossings: dict[float, int | None] = {}
    if basis is None or net is None:
        if basis is not None:
            notes.append("DDP not predicted: the run has no float32 all_reduce fit")
        elif not analyzed.has(DDP) and (asks_ddp(request) or (request.nic_gbps and system)):
            notes.append(
                "DDP not predicted: the run measured no DDP step (gpuprof sweep's ddp probe), "
                "which --model-params, --compute-ms, --accum, --grad-dtype, --bucket-mb and "
                "the network what-ifs predict from"
            )
        return empty, empty, crossings
    base = model_change(request, basis)
    if system is not None and not same_hardware(analyzed, system):
        hardware = hardware_change(request, analyzed, system)
        base = replace(merge(base, hardware, request.compute_ms is not None), label=base.label)
    rows = []
    for nodes in request.nodes:
        try:
            rows += _ddp_rows(basis, net, backend, gpus, (nodes,), base)
        except UsageError as exc:
            _note(notes, exc.one_line())  # the collectives' cause: said once
    ddp = pd.DataFrame(rows)
    for mark in EFFICIENCY_MARKS:
        below = ddp[ddp["efficiency"] < mark] if not ddp.empty else ddp
        crossings[mark] = int(below["nodes"].min()) if not below.empty else None
    # the what-ifs at the most nodes the baseline reached
    at = int(ddp["nodes"].max()) if not ddp.empty else max(request.nodes)
    ours = ddp[ddp["nodes"] == at] if not ddp.empty else ddp
    reference: dict[str, Any] | None = None
    if not ours.empty:
        reference = {str(k): v for k, v in ours.iloc[0].to_dict().items()}
    what: list[dict[str, Any]] = [{**reference, "gain_pct": 0.0}] if reference else []
    for change in knobs(request, basis, net):
        try:
            row = _ddp_rows(basis, net, backend, gpus, (at,), merge(base, change, True))[0]
        except UsageError as exc:
            _note(notes, exc.one_line())
            continue
        ref = reference["samples_per_s"] if reference else math.nan
        row["gain_pct"] = 100 * (row["samples_per_s"] / ref - 1)
        what.append(row)
    return ddp, pd.DataFrame(what), crossings


def _note(notes: list[str], line: str) -> None:
    if line not in notes:
        notes.append(line)


def _pipeline(
    analyzed: Analyzed,
    request: PredictRequest,
    gpus: int,
    scale: float | None,
    notes: list[str],
) -> pd.DataFrame:
    """Per node count, a pipeline of one stage per GPU (p = nodes x gpus), each stage the size
    the run measured, at m = p, 2p, 4p (or --micro-batches). On another kind of device
    (`scale`: its compute against the run's) the stage times are scaled and the run's excess
    over theory (its send/recv and framework time) is not carried over."""
    if not analyzed.has(PIPELINE):
        return pd.DataFrame()
    bases = pipeline_bases(analyzed.summary(PIPELINE))
    if not bases:
        notes.append("pipeline not predicted: no schedule with a closed-form bubble was measured")
        return pd.DataFrame()
    rows = []
    for basis in bases:
        if scale is not None:
            basis = replace(
                basis,
                t_f=basis.t_f * scale,
                t_b=basis.t_b * scale,
                t_w=basis.t_w * scale,
                fill_us=0.0,
                per_mb_us=0.0,
                measured={},
            )
        for nodes in request.nodes:
            p = max(2, nodes * gpus)
            reference = predict_pipeline(basis, p, p)
            for m in request.micro_batches or (p, 2 * p, 4 * p):
                got = predict_pipeline(basis, p, m)
                if got is None or reference is None:
                    continue
                rows.append(
                    {
                        "gain_pct": 100 * ((m / got[0]) / (p / reference[0]) - 1),
                        "schedule": basis.schedule,
                        "nodes": nodes,
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
