"""NCCL's model (gpuprof.predict.nccl) against published nccl-tests results.

    python benchmarks/predict_published.py [FILE.tsv]

Predicts every row of the published set on its system preset (the algorithm forced only
where the source states it), prints each row's error and, per size class, how many rows
fall within 15%. Then held out by scale: every system published at two or more node counts
(data/published_scales.tsv) calibrated at its smallest node count across nodes and scored
at the larger ones, beside the preset alone on the same rows. docs/validation.md quotes its
output. Also times predicting 1 to 1,024 nodes for every collective and size, from the preset
and from a calibrated run through `gpuprof predict` (the speed target: under a second).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.systems import PRESETS, load_system
from gpuprof.predict.nccl import OPS, P2P_OPS, collective
from gpuprof.predict.network import FABRIC_BANDS, FABRIC_GROUPS
from gpuprof.predict.predictions import predict
from gpuprof.predict.published import (
    BOUND,
    DATA,
    LARGE,
    SIZE_CLASSES,
    HeldOut,
    held_out,
    predicted,
    rows,
)
from gpuprof.predict.whatifs import PredictRequest
from gpuprof.runs.imported import import_logs
from gpuprof.runs.store import open_run
from gpuprof.units import bus_factor

LOG = Path(__file__).resolve().parents[1] / "tests/data/nccl-tests"
CALIBRATION_LOG = LOG / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"


def _summary(name: str, chosen: list[HeldOut]) -> str:
    def line(errors: list[float]) -> str:
        within = sum(abs(e) <= BOUND for e in errors)
        median = statistics.median(abs(e) for e in errors) if errors else math.nan
        return f"{within}/{len(errors)} within 15%, median |error| {100 * median:.1f}%"

    return (
        f"{name}: calibrated {line([h.error for h in chosen])}; "
        f"preset alone {line([h.preset_error for h in chosen])}"
    )


def _fabric(h: HeldOut) -> str:
    """The fabric of a published row's system (its preset's)."""
    return load_system(h.row["preset"]).fabric


def held_out_report() -> None:
    scored, left = held_out()
    for h in scored:
        r = h.row
        print(
            f"{r['system'][:44]:44s} {r['op']:10s} {r['algorithm'] or '-':14s} "
            f"{h.calibrated_at:>2d}->{int(r['nodes']):<3d} {int(r['size_bytes']):>12d} "
            f"published {h.published:10.1f} us  calibrated {100 * h.error:+6.1f}%  "
            f"preset {100 * h.preset_error:+6.1f}%"
        )
    for why in left:
        print(f"left out: {why}")
    for name, _, _ in SIZE_CLASSES:
        print(_summary(name, [h for h in scored if h.size_class == name]))
    systems = len({h.row["system"] for h in scored})
    print(_summary(f"all held-out rows ({systems} systems)", scored))
    for group in FABRIC_BANDS:  # the fabric groups a calibrated row's band follows
        rows = [h for h in scored if FABRIC_GROUPS.get(_fabric(h)) == group]
        presets = ", ".join(sorted({h.row["preset"] for h in rows}))
        print(_summary(f"{group} ({presets})", rows))
        for name, _, _ in SIZE_CLASSES:
            print(_summary(f"  {name}", [h for h in rows if h.size_class == name]))
    for system in dict.fromkeys(h.row["system"] for h in scored):
        print(_summary(f"  {system[:60]}", [h for h in scored if h.row["system"] == system]))
    two, _ = held_out(scales=2)
    systems = len({h.row["system"] for h in two})
    print(_summary(f"calibrated at the two smallest node counts ({systems} systems)", two))


def calibrated_speed() -> None:
    with tempfile.TemporaryDirectory() as out:
        (run_dir,) = import_logs([CALIBRATION_LOG], Path(out), [], "collectives", "dgx-h100")
        analyzed = Analyzed(open_run(run_dir))
        # a second count for the two-count path's cost: the same log said to be 4 nodes (its
        # rank lines dropped, each busbw 32 ranks' factor of its algbw, as the import checks),
        # as tests/test_nccl_import.py makes it
        lines = []
        for line in CALIBRATION_LOG.read_text().splitlines():
            fields = line.split()
            if "Rank " in line:
                continue
            if len(fields) == 13 and fields[0].isdigit():
                factor = bus_factor("all_reduce", 32)
                fields[7], fields[11] = (f"{float(fields[i]) * factor:.2f}" for i in (6, 10))
                line = "  ".join(fields)
            lines.append(line)
        (Path(out) / "all_reduce_4n.log").write_text("\n".join(lines) + "\n")
        (other,) = import_logs(
            [Path(out) / "all_reduce_4n.log"], Path(out), [], "collectives", "dgx-h100", 4, 8
        )
        request = PredictRequest(
            nodes=tuple(2**k for k in range(11)), sizes=tuple(2**k for k in range(3, 35))
        )
        predict(analyzed, PredictRequest(nodes=(2,)))  # scipy's import is no prediction
        for also, what in (((), "an imported 2-node run"), ((Analyzed(open_run(other)),),
                           "it and a 4-node one (--calibrate-with)")):  # fmt: skip
            started = time.perf_counter()
            found = predict(analyzed, request, also)
            seconds = time.perf_counter() - started
            calibrated = (found.collectives["source"] != "preset dgx-h100").sum()
            print(
                f"speed, calibrated: {len(found.collectives)} predictions ({calibrated} "
                f"calibrated; 1..1024 nodes, every op, 8 B..16 GiB) from {what} in "
                f"{seconds:.2f} s"
            )


def main() -> None:
    data = rows(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
    classes: dict[str, list[float]] = {"large (>= 256 MiB)": [], "small and medium": []}
    for row in data:
        value, choice = predicted(row)
        err = value / float(row["value"]) - 1
        size = int(row["size_bytes"])
        classes["large (>= 256 MiB)" if size >= LARGE else "small and medium"].append(err)
        print(
            f"{row['preset']:12s} {int(row['ranks']):5d} {row['op']:14s} {size:>12d} "
            f"{row['metric']:10s} published {float(row['value']):9.2f} predicted {value:9.2f} "
            f"{100 * err:+7.1f}%  {choice}"
        )
    every = [e for errs in classes.values() for e in errs]
    for name, errs in [*classes.items(), ("all rows", every)]:
        within = sum(abs(e) <= BOUND for e in errs)
        median = sorted(abs(e) for e in errs)[len(errs) // 2]
        print(f"{name}: {within}/{len(errs)} within 15%, median |error| {100 * median:.1f}%")
    started = time.perf_counter()
    count = 0
    for nodes in [2**k for k in range(11)]:
        for op in OPS + P2P_OPS:
            for size in [2**k for k in range(3, 35)]:
                collective(PRESETS["dgx-h100"], op, 8 * nodes, float(size))
                count += 1
    seconds = time.perf_counter() - started
    print(f"speed: {count} predictions (1..1024 nodes, every op, 8 B..16 GiB) in {seconds:.2f} s")
    assert math.isfinite(seconds)
    held_out_report()
    calibrated_speed()


if __name__ == "__main__":
    main()
