"""The DDP prediction against published multi-node training throughput (NVIDIA's benchmark
tables, benchmarks/results/published_ddp.tsv), held out by scale: each series calibrated by its
one-node row or by its smallest row across nodes, its efficiency predicted at every larger GPU
count (docs/validation.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.machine.systems import PRESETS
from gpuprof.predict.collectives import WhatIf
from gpuprof.predict.ddp import predict_ddp
from gpuprof.predict.network import SystemNetwork
from gpuprof.predict.published_ddp import POINTS, _accum, basis, read, scored

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "published_ddp.tsv"
ROWS = read(TABLE)


def test_the_scored_rows_come_from_several_tables_and_never_calibrate() -> None:
    rows = scored(ROWS)
    assert len(rows) >= 60
    tables = {r.series.split("[")[1].split(",")[0] for r in rows}
    assert len(tables) >= 4, tables
    assert all(r.gpus > 8 and r.source.startswith("https://github.com/") for r in rows)
    # one flat all_reduce and an optimizer cannot make more GPUs faster per GPU
    assert all(r.predicted <= 1.0 + 1e-9 for r in rows)


def test_the_calibration_row_comes_back_as_published() -> None:
    system = PRESETS["dgx-a100"]
    row = next(r for r in ROWS if "DGX A100 (8x A100 80GB)" in r["system"] and r["gpus"] == "8")
    calibrated = basis(row, system)
    step = predict_ddp(calibrated, SystemNetwork(system), 1, 8, "nccl", WhatIf(accum=_accum(row)))
    per_gpu = _accum(row) * float(row["batch_per_gpu"]) / (step.step_us / 1e6)
    assert per_gpu == pytest.approx(float(row["throughput"]) / 8, rel=1e-9)
    assert calibrated.optimizer_us > 0 and calibrated.comm_only_us > 0


def test_the_published_figure_does_not_get_worse() -> None:
    """docs/validation.md quotes `python benchmarks/predict_ddp_published.py`: 40 of 73."""
    rows = scored(ROWS)
    within = sum(abs(r.points) <= POINTS for r in rows)
    assert within >= 40 and len(rows) == 73, (within, len(rows))


def test_a_row_across_nodes_calibrates_and_comes_back_as_published() -> None:
    """Calibrated by a row across nodes (`crossing`), its own shape gives back its throughput:
    the compute per micro-batch is what that row leaves after the optimizer and the
    all_reduce across its nodes."""
    system = PRESETS["dgx-a100"]
    row = next(r for r in ROWS if "DGX A100 (8x A100 80GB)" in r["system"] and r["gpus"] == "16")
    calibrated = basis(row, system)
    assert (calibrated.nodes, calibrated.gpus) == (2, 8)
    one_node = basis({**row, "gpus": "8", "throughput": str(float(row["throughput"]) / 2)}, system)
    assert calibrated.comm_only_us > one_node.comm_only_us  # the all_reduce crosses nodes
    step = predict_ddp(calibrated, SystemNetwork(system), 2, 8, "nccl", WhatIf(accum=_accum(row)))
    per_gpu = _accum(row) * float(row["batch_per_gpu"]) / (step.step_us / 1e6)
    assert per_gpu == pytest.approx(float(row["throughput"]) / 16, rel=1e-9)


def test_calibrated_across_nodes_no_calibration_row_is_scored() -> None:
    """docs/validation.md quotes `python benchmarks/predict_ddp_published.py`: from each
    series' smallest row across nodes, 41 of the 50 larger rows within 5 points."""
    rows = scored(ROWS, crossing=True)
    first_across: dict[str, int] = {}
    for row in ROWS:
        name = " | ".join(row[k] for k in ("system", "model", "precision", "seq_len_or_image"))
        gpus = int(row["gpus"])
        if gpus > int(row["gpus_per_node"]):
            first_across[name] = min(first_across.get(name, gpus), gpus)
    assert all(r.gpus > first_across[r.series] for r in rows)
    within = sum(abs(r.points) <= POINTS for r in rows)
    assert within >= 41 and len(rows) == 50, (within, len(rows))
