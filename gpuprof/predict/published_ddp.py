"""Published multi-node training throughput (vendor benchmark tables: one model at 1 to 32
nodes) against the DDP prediction (gpuprof.predict.ddp), held out by scale: each series (one
system, model, precision and sequence length or image size) is calibrated by one row, its
one-node row or (`crossing`) its smallest row across nodes, and its data-parallel efficiency
predicted at every larger GPU count, never fitted to them.

What a row gives is one step's time: `K x compute + optimizer + all_reduce` (K accumulated
micro-batches, one all_reduce of the gradients after the last of them, as these training
scripts do). The optimizer and the all_reduce come from the system (its memory bandwidth,
NCCL's model on its preset); the compute per micro-batch is what is left of the measured step:
at the calibrating row's own shape, so a row across nodes carries what crossing nodes did to
every micro-batch there (as a gpuprof DDP probe measured across nodes does). At N GPUs: the
row's own K, the all_reduce across N/8 nodes. The rows' table (the columns of
benchmarks/results/published_ddp.tsv) comes in as dicts."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.systems import PRESETS, System
from gpuprof.predict.collectives import WhatIf
from gpuprof.predict.ddp import DDPBasis, ddp_buckets, predict_ddp
from gpuprof.predict.network import SystemNetwork

POINTS = 5.0  # the validation counts rows whose efficiency is within this many points
# bytes an Adam-family step moves per parameter (fp32 master weights, both moments, the
# gradient): read p, g, m, v and write p, m, v (28 B), LAMB's second pass reads the update and
# the weight and writes the weight (12 B more): a memory-bound kernel at the GPU's bandwidth
OPTIMIZER_BYTES = 40
# the systems NCCL's model has (Ampere and later); the tables' V100 systems are left out
SYSTEMS = {"DGX A100": "dgx-a100"}


@dataclass(frozen=True)
class Scored:
    """One published row at more GPUs than its series' one-node row, and the prediction."""

    series: str
    gpus: int
    accum: int
    published: float  # efficiency: throughput per GPU over the one-node row's
    predicted: float
    source: str

    @property
    def points(self) -> float:
        return 100 * (self.predicted - self.published)


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _params(text: str) -> int:
    found = re.fullmatch(r"([\d.]+)([MB])", text.strip())
    if not found:
        raise ValueError(f"parameters {text!r}: a count like 340M")
    return int(float(found.group(1)) * (1e6 if found.group(2) == "M" else 1e9))


def _system(row: dict[str, str]) -> System | None:
    name = next((preset for key, preset in SYSTEMS.items() if key in row["system"]), None)
    if name is None:
        return None
    return replace(PRESETS[name], gpu=f"NVIDIA {row['gpu']}")


def _accum(row: dict[str, str]) -> int | None:
    """The accumulation the table prints (None: not printed, e.g. BART's tables, whose
    defaults hold the global batch: not 1, and not known)."""
    text = row["accum_steps"].strip()
    return None if text in ("", "NA") else int(float(text))


def _series(row: dict[str, str]) -> str:
    return " | ".join(row[k] for k in ("system", "model", "precision", "seq_len_or_image"))


def basis(row: dict[str, str], system: System) -> DDPBasis:
    """What a row measured, as the DDP prediction's basis: the step of one micro-batch
    without communication and the optimizer, the gradients' all_reduce at the row's shape
    exposed (after the last micro-batch: nothing hides it)."""
    params = _params(row["params"])
    half = re.search(r"FP16|BF16|AMP", row["precision"]) is not None
    grad = 2 if half else 4
    gpus, per_node = int(row["gpus"]), int(row["gpus_per_node"])
    nodes = max(1, gpus // per_node)
    accum, batch = _accum(row) or 1, float(row["batch_per_gpu"])
    step_us = accum * batch / (float(row["throughput"]) / gpus) * 1e6
    peaks = gpu_peaks(system.gpu)
    memory = (peaks.memory_gbps if peaks else None) or 0.0
    optimizer = params * OPTIMIZER_BYTES / (memory * 1e3) if memory else 0.0
    net = SystemNetwork(system)
    buckets = ddp_buckets(params * grad, math.inf)  # DDP's first 1 MiB, then all the rest
    comm = sum(
        net.collective("all_reduce", nodes, gpus // nodes, b, "nccl").time_us for b in buckets
    )
    micro = (step_us - optimizer - comm) / accum
    return DDPBasis(
        variant="published",
        num_params=params,
        grad_bytes=grad,
        samples_per_step=batch,
        single_us=micro + optimizer,
        base_us=micro + optimizer,
        optimizer_us=optimizer,
        comm_only_us=comm,
        cost_us=comm,
        backward_us=0.0,
        step_us=micro + optimizer + comm,
        nodes=nodes,
        gpus=gpus // nodes,
        bucket_mb=math.inf,  # no cap: one all_reduce after the last micro-batch
    )


def scored(rows: Iterable[dict[str, str]], crossing: bool = False) -> list[Scored]:
    """Every row at more GPUs than its series' one-node row (`crossing`: than its smallest
    row across nodes), on the systems NCCL's model has, predicted from that one row (the
    efficiency against the one-node row's throughput per GPU, as published); series whose
    accumulation is not printed are left out."""
    series: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        series.setdefault(_series(row), []).append(row)
    out: list[Scored] = []
    for name, members in series.items():
        system = _system(members[0])
        per_node = int(members[0]["gpus_per_node"])
        if system is None or per_node != system.gpus_per_node:
            continue
        by_gpus: dict[int, dict[str, str]] = {}
        for row in members:  # a series' first row at a GPU count (tables repeat the base)
            by_gpus.setdefault(int(row["gpus"]), row)
        if per_node not in by_gpus or any(_accum(row) is None for row in by_gpus.values()):
            continue
        rate = float(by_gpus[per_node]["throughput"]) / per_node
        across = sorted(g for g in by_gpus if g > per_node and g % per_node == 0)
        at = across[0] if crossing and across else per_node
        calibrated = basis(by_gpus[at], system)
        net = SystemNetwork(system)
        for gpus, row in sorted(by_gpus.items()):
            if gpus <= at or gpus % per_node:
                continue
            accum = _accum(row) or 1
            step = predict_ddp(
                calibrated, net, gpus // per_node, per_node, "nccl", WhatIf(accum=accum)
            )
            predicted = accum * float(row["batch_per_gpu"]) / (step.step_us / 1e6)
            out.append(
                Scored(
                    series=name,
                    gpus=gpus,
                    accum=accum,
                    published=float(row["throughput"]) / gpus / rate,
                    predicted=predicted / rate,
                    source=row["source"],
                )
            )
    return out
