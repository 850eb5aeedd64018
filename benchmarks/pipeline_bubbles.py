"""Measured pipeline bubbles against theory on this machine (gloo), and a slow stage.

1. GPipe and 1F1B on balanced stages, m in {p, 2p, 4p}: measured bubble (mean over ranks of
   1 - busy / step, median over steps) against (p-1)/(m+p-1); targets: within 5 points for
   p=2, within 10 for p=4 (four ranks share two cores here).
2. The same with the last stage twice as heavy (--stage-weights 1,..,1,2): the slowest rank
   named, and the measured step against the bottleneck-stage model (m x slowest + the others)
   within 10%.

Stages of 32 layers by default (~65 ms forward per micro-batch here): each gloo hop costs
~3-4 ms on this 2-core machine (posting the send and receive of 256 KiB, and the transfer),
which adds about 5 points to a GPipe bubble at 16 layers and 2-3 points at 32.

    python benchmarks/pipeline_bubbles.py [--gpus 2] [--stage-layers 32] [--budget-ms 3000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuprof import open_run
from gpuprof.analysis.summary import summarize_run


def measure(out: str, args: argparse.Namespace, *extra: str) -> object:
    cmd = [
        sys.executable,
        "-m",
        "gpuprof",
        "run",
        "pipeline",
        "--gpus",
        str(args.gpus),
        "--device",
        "cpu",
        "--out",
        out,
        "--no-telemetry",
        "--schedules",
        "GPipe,1F1B",
        "--stage-layers",
        str(args.stage_layers),
        "--budget-ms",
        args.budget_ms,
        "--micro-batches",
        ",".join(str(f * args.gpus) for f in (1, 2, 4)),
        *extra,
    ]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    run = open_run(sorted(p for p in Path(out).iterdir() if p.is_dir())[-1])
    return summarize_run(run, "pipeline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--stage-layers", type=int, default=32)
    parser.add_argument("--budget-ms", default="3000")
    args = parser.parse_args()
    target = 5.0 if args.gpus <= 2 else 10.0
    with tempfile.TemporaryDirectory() as out:
        even = measure(out, args)
        print(
            f"{'schedule':>8} {'p':>2} {'m':>3} {'measured%':>9} {'theory%':>8} "
            f"{'diff':>6} {'sim%':>6} {'within':>7}"
        )
        for row in even.to_dict("records"):  # type: ignore[attr-defined]
            diff = row["bubble_pct"] - row["theory_pct"]
            print(
                f"{row['schedule']:>8} {row['p']:>2} {row['m']:>3} {row['bubble_pct']:9.1f} "
                f"{row['theory_pct']:8.1f} {diff:+6.1f} {row['simulated_pct']:6.1f} "
                f"{'yes' if abs(diff) <= target else 'NO':>7}"
            )
        weights = ",".join(["1"] * (args.gpus - 1) + ["2"])
        slow = measure(out, args, "--stage-weights", weights)
        print(f"stage weights {weights}:")
        for row in slow.to_dict("records"):  # type: ignore[attr-defined]
            print(
                f"{row['schedule']:>8} m={row['m']:<3} slowest rank {row['bottleneck_rank']} "
                f"(+{row['imbalance_pct']:.0f}% of the mean)  step {row['step_us'] / 1e3:.1f} "
                f"ms  model {row['model_step_us'] / 1e3:.1f} ms  error "
                f"{row['model_error_pct']:+.1f}%"
            )


if __name__ == "__main__":
    main()
