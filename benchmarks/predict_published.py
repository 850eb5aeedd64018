"""NCCL's model (gpuprof.predict.nccl) against published nccl-tests results.

    python benchmarks/predict_published.py [FILE.tsv]

Predicts every row of the published set on its system preset (the algorithm forced only
where the source states it), prints each row's error and, per size class, how many rows
fall within 15%. docs/validation.md quotes its output. Also times predicting 1 to 1,024
nodes for every collective and size (the predictor's speed target: under a second).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from gpuprof.machine.systems import PRESETS
from gpuprof.predict.nccl import OPS, P2P_OPS, collective
from gpuprof.predict.published import BOUND, DATA, LARGE, predicted, rows


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


if __name__ == "__main__":
    main()
