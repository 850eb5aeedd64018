"""The DDP probe's two methods side by side, on 1, 2 and 4 ranks of this machine (gloo).

Runs `gpuprof run ddp --gpus 4` (weak scaling measures the first variant alone on one rank,
on 2 ranks of the node and on all 4) and prints, per case:

- sum%: forward + backward compute + exposed communication + optimizer, each timed on its own
  (DDP's logging data, the optimizer's own timer), against the measured step; target 95-105;
- overlap% by DDP's logging data and by the A/B runs (noop comm hook, buckets alone), and
  their difference in points; target within 10 (shown only where communication is at least
  1% of the step);
- communication time per sample of `accum=K` against the first variant (DDP's logging data:
  first bucket launched to last bucket done, per synchronised step); target >= 3x for K = 4.

    python benchmarks/ddp_methods.py [--gpus 4] [--budget-ms 3000] [--model-params 2M]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuprof import open_run
from gpuprof.analysis.summary import summarize_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--budget-ms", default="3000")
    parser.add_argument("--model-params", default="2M")
    parser.add_argument("--variants", default="default,accum=4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "gpuprof",
            "run",
            "ddp",
            "--gpus",
            str(args.gpus),
            "--device",
            "cpu",
            "--out",
            out,
            "--no-telemetry",
            "--budget-ms",
            args.budget_ms,
            "--model-params",
            args.model_params,
            "--ddp-variants",
            args.variants,
        ]
        print("$", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        run = open_run(next(Path(out).iterdir()))
        summary = summarize_run(run, "ddp")
    print(
        f"{'scope':>7} {'n':>2} {'variant':>10} {'step_ms':>8} {'sum%':>6} "
        f"{'overlap%log':>11} {'overlap%ab':>10} {'diff':>5} {'comm/sample_us':>14}"
    )
    for row in summary.to_dict("records"):
        log, ab = row["overlap_log_pct"], row["overlap_ab_pct"]
        both = log == log and ab == ab
        print(
            f"{row['scope']:>7} {row['world_size']:>2} {row['case_id']:>10} "
            f"{row['rank_step_us'] / 1e3:8.1f} {row['sum_pct']:6.1f} "
            f"{log:11.1f} {ab:10.1f} {abs(log - ab) if both else float('nan'):5.1f} "
            f"{row['comm_per_sample_us']:14.0f}"
        )
    glob = summary[summary["scope"] == "global"].set_index("case_id")
    first = glob.index[0]
    for variant in glob.index[1:]:
        if variant.startswith("accum="):
            for column, method in (
                ("comm_per_sample_us", "DDP logging data"),
                ("comm_cost_per_sample_us", "A/B"),
            ):
                ratio = glob.loc[first, column] / glob.loc[variant, column]
                print(f"communication per sample, {first} / {variant} ({method}): {ratio:.2f}x")


if __name__ == "__main__":
    main()
