"""A gloo job that hangs on purpose, with PyTorch's flight recorder on: every rank records its
collectives (TORCH_FR_BUFFER_SIZE), the ranks that wait time out, and each rank writes its
dump as PyTorch writes one (`_dump_fr_trace`, the pickle NCCL's watchdog writes on a timeout;
`--json`: the JSON form) to OUT_DIR/rank_<r>. The kind of folder `gpuprof trace
--flight-recorder` reads.

Scenarios:
  skip      rank 1 skips the 4th all_reduce of the default group (the others wait for it)
  group     on a second group of ranks 0-2, rank 0 skips the group's 2nd all_reduce (and
            waits in a barrier of all ranks)

    python tests/jobs/flight_recorder.py OUT_DIR [--scenario skip] [--ranks 3] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, args: argparse.Namespace, store: str) -> None:
    # a long timeout to join (ranks start at different times on a busy machine); the short one
    # only for the collective that hangs
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=args.ranks,
        timeout=datetime.timedelta(seconds=120),
    )  # fmt: skip
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    hung = None
    if args.scenario == "skip":
        if rank != 1:
            hung = dist.all_reduce(t, async_op=True)
    else:
        group = dist.new_group([0, 1, 2])
        if rank < 3:
            dist.all_reduce(torch.ones(256, dtype=torch.bfloat16), group=group)
            if rank != 0:
                hung = dist.all_reduce(
                    torch.ones(256, dtype=torch.bfloat16), group=group, async_op=True
                )
        if rank not in (1, 2):
            hung = dist.barrier(async_op=True)
    if hung is not None:
        with contextlib.suppress(RuntimeError):  # the wait timed out, as a hung job's does
            hung.wait(timeout=datetime.timedelta(seconds=args.timeout))
    import torch._C._distributed_c10d as c10d

    dump = c10d._dump_fr_trace_json(True, False) if args.json else c10d._dump_fr_trace(True, True)
    out = Path(args.out)
    (out / f".rank_{rank}").write_bytes(dump)
    (out / f".rank_{rank}").rename(out / f"rank_{rank}")
    # stay (as a hung job does) until every rank has dumped, then leave without tearing down the
    # hung group: its teardown would wait on the collective that never completes
    deadline = time.monotonic() + 120
    while len(list(out.glob("rank_*"))) < args.ranks and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--scenario", choices=["skip", "group"], default="skip")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        mp.spawn(worker, args=(args, store), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
