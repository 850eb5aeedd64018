"""One telemetry sampler per node: host counters and (where NVML works) every GPU, at a fixed
rate on the wall clock the probes' phase markers use, appended to
`telemetry/node-<node rank>.jsonl` in the run folder (flushed about once a second). Files are
keyed by node rank, not host name: two nodes may share a name (cloned VMs, containers).

    python -m gpuprof.telemetry.sampler --out RUN/telemetry/node-0.jsonl --hz 10 --host HOST
        [--gpus BUS_ID,BUS_ID,...]   (only the job's GPUs; NVML lists every GPU of the machine)

It runs until SIGTERM (or SIGINT), then flushes and exits 0. Without NVML it samples the host
only and says so once on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from gpuprof.machine.nvml import open_nvml
from gpuprof.telemetry.host import HostSampler
from gpuprof.telemetry.nvml import GpuSampler

TELEMETRY_DIR = "telemetry"


def telemetry_path(run_dir: Path, node_rank: int) -> Path:
    """Where the sampler of node `node_rank` writes."""
    return run_dir / TELEMETRY_DIR / f"node-{node_rank}.jsonl"


class Sampler:
    """Takes one sample of everything this node has."""

    def __init__(
        self, host: str, nvml: Any, bus_ids: list[str] | None = None, node_rank: int = 0
    ) -> None:
        self.host = host
        self.node_rank = node_rank
        self.host_sampler = HostSampler()
        self.gpu_sampler = GpuSampler(nvml, bus_ids) if nvml is not None else None

    def rows(self) -> list[dict[str, Any]]:
        t_ns = time.time_ns()
        rows = self.host_sampler.sample(t_ns)
        if self.gpu_sampler is not None:
            rows += self.gpu_sampler.sample(t_ns)
        return [
            {"t_ns": t_ns, "host": self.host, "node_rank": self.node_rank, **row} for row in rows
        ]


def run(
    out: Path,
    hz: float,
    host: str,
    duration_s: float | None = None,
    bus_ids: list[str] | None = None,
    node_rank: int = 0,
) -> int:
    """Sample until SIGTERM/SIGINT (or `duration_s`); returns the number of samples taken."""
    nvml, why = open_nvml()
    if nvml is None:
        print(
            f"gpuprof: telemetry on {host}: NVML unavailable ({why}); host counters only",
            file=sys.stderr,
            flush=True,
        )
    sampler = Sampler(host, nvml, bus_ids, node_rank)
    stop = {"now": False}

    def halt(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)
    out.parent.mkdir(parents=True, exist_ok=True)
    period, start, count = 1.0 / hz, time.monotonic(), 0
    parent = os.getppid()
    with out.open("a", encoding="utf-8") as handle:
        last_flush = start
        while not stop["now"] and (duration_s is None or time.monotonic() - start < duration_s):
            _write(handle, sampler.rows())
            count += 1
            now = time.monotonic()
            if now - last_flush >= 1.0:
                handle.flush()
                last_flush = now
            if os.getppid() != parent:
                break  # the rank that started us is gone: do not outlive it
            # a fixed schedule, so a slow sample does not lower the rate
            time.sleep(max(0.0, start + count * period - time.monotonic()))
    return count


def _write(handle: IO[str], rows: list[dict[str, Any]]) -> None:
    handle.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def start(
    run_dir: Path,
    host: str,
    hz: float,
    bus_ids: list[str] | None = None,
    node_rank: int = 0,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start this node's sampler as a child process (GPUs: the job's `bus_ids`, else all)."""
    argv = [
        sys.executable,
        "-m",
        "gpuprof.telemetry.sampler",
        "--out",
        str(telemetry_path(run_dir, node_rank)),
        "--hz",
        f"{hz:g}",
        "--host",
        host,
        "--node-rank",
        str(node_rank),
    ]
    if bus_ids:
        argv += ["--gpus", ",".join(bus_ids)]
    return subprocess.Popen(argv, **popen)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a sampler and wait for its last flush."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gpuprof.telemetry.sampler")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--host", required=True)
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--gpus", help="PCI bus ids of the GPUs to sample (default: all)")
    parser.add_argument("--node-rank", type=int, default=0)
    args = parser.parse_args(argv)
    buses = [b for b in args.gpus.split(",") if b] if args.gpus else None
    run(args.out, args.hz, args.host, args.duration, buses, args.node_rank)


if __name__ == "__main__":
    main()
