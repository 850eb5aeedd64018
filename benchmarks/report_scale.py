"""How `gpuprof report` scales with telemetry: a copy of a real small run gets a synthetic
telemetry table of --rows rows (sampling instants x 10 sources: host, 2 cores, a NIC, 4 GPUs,
lo, an InfiniBand port) spanning the run's cases; prints the time of `gpuprof report` and the
size of the HTML (targets: at most 10 s and 10 MB for 1,000,000 rows).

    python benchmarks/report_scale.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpuprof import open_run

SOURCES = [
    "host",
    "cpu0",
    "cpu1",
    "nic:eth0",
    "nic:lo",
    "ib:mlx5_0/1",
    "gpu0",
    "gpu1",
    "gpu2",
    "gpu3",
]


def synthetic_telemetry(instants: int, start_ns: int, end_ns: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    t = np.linspace(start_ns, end_ns, instants).astype(np.int64)
    frames = []
    for source in SOURCES:
        frame = pd.DataFrame({"t_ns": t, "host": "node0", "source": source})
        if source in ("host",) or source.startswith("cpu"):
            frame["cpu_pct"] = rng.uniform(0, 100, instants)
        if source.startswith(("nic:", "ib:")):
            frame["tx_bytes"] = np.cumsum(rng.integers(0, 10**7, instants))
            frame["rx_bytes"] = frame["tx_bytes"]
            frame["tx_gbps"] = rng.uniform(0, 10, instants)
            frame["rx_gbps"] = frame["tx_gbps"]
        if source.startswith("gpu"):
            frame["gpu_util_pct"] = rng.uniform(0, 100, instants)
            frame["power_w"] = rng.uniform(100, 700, instants)
            frame["sm_clock_mhz"] = 1980.0
            frame["nvlink_tx_gbps"] = rng.uniform(0, 400, instants)
            frame["throttled"] = rng.random(instants) < 0.001
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--run", type=Path, help="a run to copy (default: a fresh quick sweep)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if args.run is None:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuprof",
                    "sweep",
                    "--gpus",
                    "2",
                    "--device",
                    "cpu",
                    "--out",
                    str(out / "src"),
                    "--no-report",
                    "--no-telemetry",
                ],
                check=True,
                capture_output=True,
            )
            args.run = next((out / "src").iterdir())
        run_dir = out / "run"
        shutil.copytree(args.run, run_dir)
        table = open_run(run_dir).table("collectives")
        telemetry = synthetic_telemetry(
            args.rows // len(SOURCES),
            int(table["start_unix_ns"].min()),
            int(table["end_unix_ns"].max()),
        )
        telemetry.to_parquet(run_dir / "telemetry.parquet", index=False)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpuprof", "report", str(run_dir)],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - start
        size = (run_dir / "report.html").stat().st_size
        print(
            f"{len(telemetry):,} telemetry rows: gpuprof report {seconds:.2f} s, "
            f"report.html {size / 1e6:.2f} MB"
        )


if __name__ == "__main__":
    main()
