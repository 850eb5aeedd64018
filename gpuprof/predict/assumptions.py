"""What `gpuprof predict` assumes, said once per prediction: the collectives' model, the DDP
and pipeline models, and what another kind of device changes."""

from __future__ import annotations

from gpuprof.machine.systems import System
from gpuprof.predict.ddp import DDPBasis
from gpuprof.predict.network import MODEL_BAND, bands, preset_band
from gpuprof.predict.whatifs import PredictRequest


def source_note(system: System, same: bool, calibrated: bool = False, named: bool = True) -> str:
    """Where the collectives come from on a system: the run's measurement, its fits or the
    preset (`named`: whether the run says which GPU it measured)."""
    if calibrated:
        return (
            f"the run measured {system.gpu}: its collectives calibrate NCCL's model on "
            f"{system.name} (latency and transfer per size), carried to other shapes"
        )
    if same:
        return (
            f"the run measured {system.gpu}: inside one node its own fits; across nodes the "
            f"preset {system.name} under NCCL's model"
        )
    if not named:
        return (
            f"the run does not say which GPU it measured (a log without rank lines): collectives "
            f"from the preset {system.name} under NCCL's model (import the log with --hardware "
            f"{system.name} to say it was measured there: it then calibrates the model)"
        )
    return (
        f"the run measured another device: collectives from the preset {system.name} under "
        "NCCL's model"
    )


def assumptions(
    backend: str,
    basis: DDPBasis | None,
    request: PredictRequest,
    system: System | None,
    calibrated: bool = False,
    same: bool = False,
    pipeline: bool = False,
) -> list[str]:
    """What every prediction assumes, said once (the pipeline's and the compute's on
    another device where a DDP or pipeline prediction was made)."""
    if system is not None:
        one, two, whose = bands(system)
        lines = [
            f"Collectives on {system.name}: NCCL's own cost model (ring, tree, NVLS, NVLS-tree, "
            "CollNet, PAT; LL, LL128, Simple), the fastest algorithm and protocol per size as "
            "NCCL would pick, its channels from the preset's NVLink and NICs "
            f"(docs/prediction.md). Band: +-{MODEL_BAND:.0%} inside one NVLink domain, the "
            "model's error on published bandwidth rows; across domains the preset alone's 75th "
            f"percentile on published results of {whose} held out by scale, "
            f"+-{preset_band(system):.0%}"
            + (
                "; calibrated by the run's own measurement (latency x, transfer x per size, "
                f"carried to other shapes): +-{one:.0%}, the 75th percentile of that error on "
                f"published results of {whose} held out by scale; carried between two measured "
                f"node counts: +-{two:.0%} (docs/validation.md)."
                if calibrated
                else "."
            )
        ]
    else:
        lines = [
            "Collectives: time = hops x per-hop latency + bus factor x size / per-link "
            "bandwidth, both from the run's alpha-beta fits. "
            + (
                "NCCL all_reduce across nodes with more than one GPU per node: hierarchical "
                "(reduce_scatter in the node, all_reduce of size/g across nodes on the rails, "
                "all_gather); every other op a ring. Where the run's fits cover a node's GPUs "
                "across nodes only all at once (an nccl-tests log of 2 x 8): every op a ring "
                "with each node's ranks adjacent, at that many GPUs per node, on the hop and "
                "slowest link measured."
                if backend == "nccl"
                else "gloo: one ring over all ranks, each node's ranks adjacent (it crosses "
                "each NIC once), on its slowest link and longest hop."
            ),
            "Band: the worst relative residual of the fits a prediction uses.",
        ]
    if basis is not None:
        lines.append(
            f"DDP ({basis.variant}, {basis.num_params:,} parameters measured): weak scaling, "
            "the batch per rank kept; compute = the step without its all_reduce (a no-op "
            "comm hook's step); comm_added = what the all_reduces add to it: the buckets' "
            "all_reduces (calibrated to what DDP measured alone) less what the backward hid at "
            "the run's largest world (not DDP logging's exposed time, which the report shows); "
            "on other hardware, what the backward cannot hide, the last bucket at least."
            + (" At the run's own shape: as measured." if system is None or same else "")
        )
    trains = basis is not None or pipeline
    if request.model_params and trains:
        lines.append(
            "Another model: gradients of its size; its step as --compute-ms gives it"
            if request.compute_ms
            else "Another model: compute scaled by its parameter count (FLOPs per token are "
            "about 6 x parameters, at the same tokens per rank); gradients of its size."
        )
    if request.compute_ms and trains:
        lines.append("--compute-ms: the one-rank step on the target, as given.")
    if system is not None and not same and trains:  # the run measured another kind of device
        lines.append(
            f"On {system.name}'s GPU: compute scaled by the run's float32 matmul rate against "
            "the GPU's datasheet float32 peak, the optimizer by the run's copy bandwidth against "
            "its memory bandwidth (unless --compute-ms gives the step); the run's framework "
            "overhead and pipeline send/recv time are not carried to another kind of device."
        )
    if pipeline:
        lines.append(
            "Pipeline (one stage per GPU: p = nodes x GPUs per node): step = the bubble theory "
            "with the measured per-micro-batch stage times + the step's excess over theory at "
            "the measured p, fitted as c x (p - 1) + e x m x v (hops on the fill and drain, "
            "send/recv per micro-batch)."
        )
    return lines
