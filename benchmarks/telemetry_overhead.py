"""Telemetry overhead: probe times with the node's sampler on and off, and the sampler's CPU.

Two gloo ranks. For each size, alternating repeats (on/off, then off/on) time one gpuprof
all_reduce case through the real harness, with this node's sampler process running (started
by rank 0 as a sweep does, at --hz) or not. Prints the median of the per-repeat ratios on/off
(target: at most 1.02) and the ratio of the medians of all iterations pooled per condition.
Then the sampler runs alone for 10 s: its CPU time over wall time after
start-up (target: at most 3% of one core at 10 Hz).

    python benchmarks/telemetry_overhead.py [--repeats 21] [--hz 10] [--sizes 1M,16M] [--pin]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness_overhead import gpuprof_case, join_world, slowest_rank_times

from gpuprof.launch.torchrun import free_port
from gpuprof.probes._harness import Scope
from gpuprof.telemetry import sampler
from gpuprof.units import format_size, parse_size_list


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def measure(ctx: Any, scope: Scope, size: int, args: argparse.Namespace, on: bool) -> list[float]:
    """The slowest rank's time per iteration of one case, with or without the sampler."""
    proc = None
    if on and ctx.rank == 0:
        proc = started_sampler(Path(args.out), args.hz)
    dist.barrier()
    times = slowest_rank_times(gpuprof_case(ctx, scope, size, args.iters, 3, 0))
    dist.barrier()
    if proc is not None:
        sampler.stop(proc)
    return times


def worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    ctx, scope = join_world(rank, world, port, args.out, args.pin)
    for size in args.sizes:
        ratios, pooled = [], {True: [], False: []}  # type: ignore[var-annotated]
        for rep in range(args.repeats):
            order = (True, False) if rep % 2 == 0 else (False, True)
            result = {on: measure(ctx, scope, size, args, on) for on in order}
            ratios.append(statistics.median(result[True]) / statistics.median(result[False]))
            for on, times in result.items():
                pooled[on].extend(times)
        if rank == 0:
            ratio = statistics.median(pooled[True]) / statistics.median(pooled[False])
            print(
                f"{format_size(size):>8}: median ratio on/off {statistics.median(ratios):.3f}, "
                f"pooled {ratio:.3f} ({' '.join(f'{r:.2f}' for r in ratios)})",
                flush=True,
            )
    dist.destroy_process_group()


def started_sampler(out: Path, hz: float) -> Any:
    """A sampler that has taken its first samples (its start-up is not sampling cost)."""
    proc = sampler.start(out, "bench", hz, stderr=subprocess.DEVNULL)
    path = sampler.telemetry_path(out, 0)
    while not (path.exists() and path.stat().st_size) and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)
    return proc


def sampler_cpu(hz: float, out: str, seconds: float = 10.0) -> float:
    """CPU seconds per wall second of a sampler alone, after its start-up."""
    proc = started_sampler(Path(out), hz)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    share = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
    sampler.stop(proc)
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--sizes", type=parse_size_list, default=parse_size_list("1M,16M"))
    parser.add_argument("--pin", action="store_true", help="pin rank r to core r")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        args.out = out
        mp.spawn(worker, args=(2, free_port(), args), nprocs=2, join=True)
        share = sampler_cpu(args.hz, out)
        print(f"sampler CPU at {args.hz:g} Hz: {100 * share:.2f}% of one core (10 s, alone)")


if __name__ == "__main__":
    main()
