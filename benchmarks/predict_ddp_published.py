"""The DDP prediction against published multi-node training throughput, held out by scale.

    python benchmarks/predict_ddp_published.py [FILE.tsv]

Each series of benchmarks/results/published_ddp.tsv (vendor benchmark tables: one model,
precision and sequence length on 1 to 32 nodes) on a system NCCL's model has is calibrated by
one row and its data-parallel efficiency (throughput per GPU over the one-node row's)
predicted at every larger GPU count (gpuprof.predict.published_ddp): first from its one-node
row, then from its smallest row across nodes (what a measurement across two nodes gives).
Prints each row and how many fall within 5 points, per source. docs/validation.md quotes its
output.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gpuprof.predict.published_ddp import POINTS, Scored, read, scored

DATA = Path(__file__).resolve().parent / "results" / "published_ddp.tsv"


def report(rows: list[Scored], title: str) -> None:
    print(f"== {title}")
    by_source: dict[str, list[float]] = defaultdict(list)
    print(f"{'gpus':>5} {'K':>4} {'published':>9} {'predicted':>9} {'points':>7}  series")
    for r in rows:
        print(
            f"{r.gpus:>5} {r.accum:>4} {r.published:9.3f} {r.predicted:9.3f} {r.points:+7.1f}"
            f"  {r.series[:110]}"
        )
        model = r.series.split(" | ")[1]
        table = model.split("[")[-1].split(",")[0].rstrip("]")
        by_source[f"{model.split()[0]}, {table}"].append(r.points)
    print()
    for table, points in by_source.items():
        within = sum(abs(p) <= POINTS for p in points)
        print(f"{table}: {within}/{len(points)} within {POINTS:g} points")
    points = [r.points for r in rows]
    within = sum(abs(p) <= POINTS for p in points)
    median = statistics.median(abs(p) for p in points)
    print(
        f"all: {within}/{len(points)} within {POINTS:g} points ({100 * within / len(points):.0f}%),"
        f" median |error| {median:.1f} points, {sum(p > 0 for p in points)} predicted above"
    )
    print()


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    report(scored(read(path)), "calibrated by each series' one-node row")
    report(
        scored(read(path), crossing=True), "calibrated by each series' smallest row across nodes"
    )


if __name__ == "__main__":
    main()
