"""Ceilings against direct references, side by side in one process (one rank, gloo).

- memory: gpuprof's host copy case (through the harness: warmup, check, agreed iterations,
  records) against `numpy.copyto` on buffers of the same size; both counted as bytes read
  plus written; target: within 15%.
- compute: gpuprof's float32 matmul case against a direct `torch.matmul(a, b, out=c)` loop;
  both counted as 2 n^3 FLOP; target: within 10%.

Alternating repeats; prints the per-repeat ratios (gpuprof / reference) and their median.
Threads: `--threads` (default 1: numpy's copy is single-threaded, and a 2-rank sweep on this
2-core machine gives each rank one).

    python benchmarks/ceilings.py [--repeats 7] [--size 64M] [--n 1024] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gpuprof.launch.torchrun import free_port
from gpuprof.machine.groups import device_rounds
from gpuprof.probes import compute, memory
from gpuprof.probes._harness import Budget, Context, init, make_scopes, run_case
from gpuprof.runs.records import read_shard
from gpuprof.specs.ceilings import CeilingParams
from gpuprof.units import format_size, parse_size

BUDGET = Budget(warmup_iters=3, min_iters=10, max_iters=200, budget_s=0.5)


def last_median_us(ctx: Context) -> float:
    records = [r for r in read_shard(ctx.writer.path) if r["type"] == "case"]
    return statistics.median(records[-1]["times_us"])


def probe_bandwidth(ctx: Context, scope: object, size: int) -> float:
    params = CeilingParams(kinds=("host_copy",), size_bytes=size)
    run_case(ctx, "memory", scope, memory._case(ctx, params, "host_copy", "alone"), BUDGET)  # type: ignore[arg-type]
    return 2 * size / last_median_us(ctx) / 1e3


def numpy_bandwidth(size: int, iters: int = 30) -> float:
    src = (np.arange(size, dtype=np.int64) % 251).astype(np.uint8)
    dst = np.empty_like(src)
    for _ in range(3):
        np.copyto(dst, src)
    times = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        np.copyto(dst, src)
        times.append((time.perf_counter_ns() - start) / 1e3)
    return 2 * size / statistics.median(times) / 1e3


def probe_gflops(ctx: Context, scope: object, n: int) -> float:
    params = CeilingParams(dtypes=("float32",), n=n)
    run_case(ctx, "compute", scope, compute._case(ctx, params, "float32", "alone"), BUDGET)  # type: ignore[arg-type]
    return 2 * n**3 / last_median_us(ctx) / 1e3


def matmul_gflops(n: int, iters: int = 15) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        torch.matmul(a, b, out=out)
        times.append((time.perf_counter_ns() - start) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=parse_size, default=parse_size("64M"))
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    with tempfile.TemporaryDirectory() as out:
        ctx = init(Path(out), "cpu", 300.0)
        ctx.verbose = False
        scope = make_scopes(ctx, device_rounds(1, 1, "alone"))[0]
        rows = [
            (
                f"memory host copy {format_size(args.size)} (GB/s)",
                lambda: probe_bandwidth(ctx, scope, args.size),
                lambda: numpy_bandwidth(args.size),
                "numpy.copyto",
            ),
            (
                f"compute float32 matmul n={args.n} (GFLOP/s)",
                lambda: probe_gflops(ctx, scope, args.n),
                lambda: matmul_gflops(args.n),
                "torch.matmul loop",
            ),
        ]
        for title, ours, ref, ref_name in rows:
            ratios, mine, theirs = [], [], []
            for rep in range(args.repeats):
                first, second = (ours, ref) if rep % 2 == 0 else (ref, ours)
                a, b = first(), second()
                got, want = (a, b) if rep % 2 == 0 else (b, a)
                mine.append(got)
                theirs.append(want)
                ratios.append(got / want)
            print(
                f"{title}: gpuprof {statistics.median(mine):.2f}, {ref_name} "
                f"{statistics.median(theirs):.2f}, median ratio "
                f"{statistics.median(ratios):.3f} ({' '.join(f'{r:.2f}' for r in ratios)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
