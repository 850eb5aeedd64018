"""Harness overhead: gpuprof's all_reduce timing against a minimal hand-written loop.

Two gloo ranks on this machine. For each size, alternating repeats (ABAB, then BABA) run (a) one
gpuprof case through the real harness (`run_case`: warmup, correctness check, agreed iteration
count, records written to a shard and read back) and (b) a minimal torch.distributed loop timing
each all_reduce with perf_counter_ns. Both use the same iteration count (calibrated to about
`--seconds` per method and repeat) and the same statistic: the median over iterations of the
slowest rank's time. Prints per size the median of the per-repeat ratios gpuprof/hand (target:
at most 1.03), the ratio of the pooled medians, and every per-repeat ratio. Gloo on a shared
2-core machine is noisy per iteration (0.6 to 8 ms at 1 MiB here): hence many repeats.

    python benchmarks/harness_overhead.py [--repeats 21] [--seconds 0.4] [--sizes 1M,16M] [--pin]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpuprof.launch.torchrun import free_port
from gpuprof.machine.groups import GroupSpec
from gpuprof.probes import collectives
from gpuprof.probes._harness import Budget, Context, Scope, init, run_case
from gpuprof.runs.records import read_shard
from gpuprof.specs.collectives import CollectivesParams
from gpuprof.units import format_size, parse_size_list


def slowest_rank_times(times: list[float]) -> list[float]:
    """Per iteration, the max over ranks (times gathered from every rank)."""
    gathered: list[list[float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, times)
    return [max(column) for column in zip(*gathered, strict=True)]  # type: ignore[misc]


def slowest_rank_median(times: list[float]) -> float:
    """Median over iterations of the slowest rank's time: gpuprof's `time_us`."""
    return statistics.median(slowest_rank_times(times))


def hand_loop(size: int, iters: int, warmup: int) -> list[float]:
    """The reference: the smallest honest torch.distributed timing loop."""
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    times = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        dist.all_reduce(buf)
        times.append((time.perf_counter_ns() - start) / 1e3)
    return times


def gpuprof_case(ctx, scope, size: int, iters: int, warmup: int, rep: int) -> list[float]:  # type: ignore[no-untyped-def]
    """One case through the real harness; its times read back from this rank's shard."""
    params = CollectivesParams(ops=("all_reduce",), sizes=(size,))
    case = collectives.cases(ctx, scope, params)[0]
    budget = Budget(warmup_iters=warmup, min_iters=iters, max_iters=iters, budget_s=1e-9)
    run_case(ctx, "collectives", scope, case, budget)
    records = [r for r in read_shard(ctx.writer.path) if r["type"] == "case"]
    return list(records[-1]["times_us"])


def join_world(rank: int, world: int, port: int, out: str, pin: bool) -> tuple[Context, Scope]:
    """This spawned process as rank `rank` of a gloo world on loopback, one thread, optionally
    pinned to core `rank`; the world as one scope."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    if pin:
        os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    ctx = init(Path(out), "cpu", 300.0)
    ctx.verbose = False
    spec = GroupSpec(
        scope="global",
        world_size=world,
        num_nodes=1,
        members=(tuple(range(world)),),
        names=("all",),
    )
    scope = Scope(spec=spec, group=None, name="all", group_rank=rank, ranks=tuple(range(world)))
    return ctx, scope


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    ctx, scope = join_world(rank, world, port, out, args.pin)
    if rank == 0:
        print(
            f"{'size':>8} {'iters':>5} {'gpuprof_us':>10} {'hand_us':>9} {'pooled':>7}  "
            "median ratio (per-repeat ratios)"
        )
    for size in args.sizes:
        # Calibrate: iterations that take about --seconds per method and repeat (same on all
        # ranks, since slowest_rank_median gathers every rank's times).
        per_iter_us = slowest_rank_median(hand_loop(size, 5, args.warmup))
        iters = max(args.min_iters, int(args.seconds * 1e6 / per_iter_us))
        ratios, ours, refs = [], [], []
        for rep in range(args.repeats):
            order = ("gpuprof", "hand") if rep % 2 == 0 else ("hand", "gpuprof")
            result = {}
            for which in order:
                if which == "gpuprof":
                    times = gpuprof_case(ctx, scope, size, iters, args.warmup, rep)
                else:
                    times = hand_loop(size, iters, args.warmup)
                result[which] = slowest_rank_median(times)
                (ours if which == "gpuprof" else refs).extend(slowest_rank_times(times))
            ratios.append(result["gpuprof"] / result["hand"])
        if rank == 0:
            shown = " ".join(f"{r:.2f}" for r in ratios)
            pooled = statistics.median(ours) / statistics.median(refs)
            print(
                f"{format_size(size):>8} {iters:>5} {statistics.median(ours):>10.1f} "
                f"{statistics.median(refs):>9.1f} {pooled:>7.3f}  "
                f"{statistics.median(ratios):.3f} ({shown})",
                flush=True,
            )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seconds", type=float, default=0.4, help="per method and repeat")
    parser.add_argument("--min-iters", type=int, default=8)
    parser.add_argument("--pin", action="store_true", help="pin rank r to core r")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes", type=parse_size_list, default=parse_size_list("1M,16M,64M"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(worker, args=(2, free_port(), args, out), nprocs=2, join=True)


if __name__ == "__main__":
    main()
