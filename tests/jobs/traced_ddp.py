"""A small DDP training job on CPU (gloo) recorded with torch.profiler, one trace per rank:
the kind of job `gpuprof trace` reads. It trains the DDP probe's synthetic transformer with
the probe's optimizer and loss, so the two breakdowns can be compared; `--slow-rank R
--delay-ms D` makes rank R's data loading D ms slower per step (a straggler on purpose).
`--ddp-logging FILE` also writes, per rank and step, DDP's own logging data (sample rate 1,
as the DDP probe reads it) and the optimizer's wall time: the same steps, measured by DDP.

    python tests/jobs/traced_ddp.py OUT_DIR [--ranks 2] [--steps 6] [--slow-rank 1 --delay-ms 40]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from gpuprof.probes._model import synthetic_model
from gpuprof.probes.ddp import LOGGING_FIELDS, logging_supported


class Batches(Dataset[torch.Tensor]):
    """Random batches; slow on one rank when asked (its input pipeline is the straggler)."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self.args, self.rank = args, rank
        self.gen = torch.Generator().manual_seed(1000 + rank)

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.rank == self.args.slow_rank and self.args.delay_ms > 0:
            time.sleep(self.args.delay_ms / 1e3)
        a = self.args
        return torch.randn(a.batch, a.seq, a.hidden, generator=self.gen)


def worker(rank: int, args: argparse.Namespace, store: str) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.ranks)
    model = DistributedDataParallel(synthetic_model(args.hidden, args.layers, torch.device("cpu")))
    logging = args.ddp_logging is not None and logging_supported(model)
    records: list[dict[str, float]] = []
    optimizer_us = 0.0  # the previous step's
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    loader = DataLoader(Batches(args, rank), batch_size=None, shuffle=False, num_workers=0)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=args.steps)
    handler = torch.profiler.tensorboard_trace_handler(
        str(args.out), worker_name=f"rank{rank}", use_gzip=args.gzip
    )
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=handler,
        record_shapes=not args.no_shapes,
    ) as prof:
        for step, batch in enumerate(loader):
            if step == args.steps + 2:
                break
            opt.zero_grad(set_to_none=True)
            loss = model(batch).float().square().mean()
            if logging:  # this forward made DDP record the previous step's statistics
                data = model._get_ddp_logging_data()  # type: ignore[no-untyped-call]
                if step > 0 and "backward_comm_time" in data:
                    logged = {ours: float(data[k]) / 1e3 for k, ours in LOGGING_FIELDS.items()}
                    record = {"step": step - 1, "iteration": int(data["iteration"])}
                    records.append({**record, **logged, "optimizer_us": optimizer_us})
            loss.backward()
            t0 = time.perf_counter_ns()
            opt.step()
            optimizer_us = (time.perf_counter_ns() - t0) / 1e3
            prof.step()
    if logging:
        Path(f"{args.ddp_logging}.rank{rank}").write_text(json.dumps(records))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="steps recorded")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--ddp-logging", type=Path, help="write DDP's logging data to FILE.rankR")
    parser.add_argument(
        "--no-shapes", action="store_true", help="no input shapes: less profiler overhead, no bytes"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        mp.spawn(worker, args=(args, store), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
