"""The MoE dispatch with equal splits against the collectives probe's all_to_all at the same
size: the same call (all_to_all_single without split sizes) through two doors, their bus
bandwidth side by side in each of several sweeps (both probes in one job, one after the
other, the order alternating from sweep to sweep: the second probe of a job runs on TCP
connections the first has warmed, which on CPU makes it faster).

    python benchmarks/moe_equal_splits.py --out /tmp/moeeq [--runs 8] [--gpus 2] \
        [--size 16M] [--hidden 256] [--device cpu]

Uniform routing (skew 0) over 2 experts a rank, top-2, no capacity: every rank sends every
rank tokens x top-k / ranks tokens, so the dispatch buffer is tokens x 2 x hidden x 4 bytes;
tokens are chosen to make it --size. Prints each run's two busbw and their ratio, then the
median ratio and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuprof.units import parse_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--size", default="16M")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget-ms", default="2000")
    args = parser.parse_args()
    from gpuprof.analysis.summary import summarize_run
    from gpuprof.runs.store import open_run

    size = parse_size(args.size)
    width = 2 if args.device == "cuda" else 4
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    tokens = size // (2 * args.hidden * width)
    ratios, moe_bw, coll_bw = [], [], []
    first: dict[str, list[float]] = {"moe": [], "collectives": []}
    second: dict[str, list[float]] = {"moe": [], "collectives": []}
    for k in range(args.runs):
        order = "collectives,moe" if k % 2 == 0 else "moe,collectives"
        out = Path(args.out) / f"r{k}"
        argv = [
            sys.executable, "-m", "gpuprof", "sweep", "--gpus", str(args.gpus),
            "--device", args.device, "--out", str(out), "--no-report", "--no-telemetry",
            "--probes", order, "--op", "all_to_all", "--sizes", args.size,
            "--dtype", dtype, "--moe-skew", "0", "--capacity-factor", "0",
            "--moe-layout", "flat", "--moe-tokens", str(tokens),
            "--moe-hidden", str(args.hidden), "--moe-dtype", dtype,
            "--budget-ms", args.budget_ms,
        ]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)
        run = open_run("latest", out)
        moe = summarize_run(run, "moe").iloc[0]
        coll = summarize_run(run, "collectives")
        coll = coll[coll["op"] == "all_to_all"].iloc[0]
        assert moe["imbalance"] == 1.0 and moe["kept_tokens"] * args.hidden * width == size
        moe_bw.append(float(moe["busbw_gbps"]))
        coll_bw.append(float(coll["busbw_gbps"]))
        ratios.append(moe_bw[-1] / coll_bw[-1])
        lead, follow = order.split(",")
        bw = {"moe": moe_bw[-1], "collectives": coll_bw[-1]}
        first[lead].append(bw[lead])
        second[follow].append(bw[follow])
        print(
            f"run {k} ({order}): moe dispatch {moe['dispatch_us']:.1f} us busbw "
            f"{moe_bw[-1]:.3f} GB/s, "
            f"collectives all_to_all {coll['time_us']:.1f} us busbw {coll_bw[-1]:.3f} GB/s, "
            f"ratio {ratios[-1]:.3f}",
            flush=True,
        )
    print(
        f"median ratio {statistics.median(ratios):.3f} (range {min(ratios):.3f}-"
        f"{max(ratios):.3f}); medians {statistics.median(moe_bw):.3f} / "
        f"{statistics.median(coll_bw):.3f} GB/s = "
        f"{statistics.median(moe_bw) / statistics.median(coll_bw):.3f}"
    )
    for place, bws in (("first", first), ("second (warmed by the other)", second)):
        if bws["moe"] and bws["collectives"]:
            moe_m, coll_m = statistics.median(bws["moe"]), statistics.median(bws["collectives"])
            print(
                f"each door when it runs {place} in its job: moe {moe_m:.3f} / collectives "
                f"{coll_m:.3f} GB/s = {moe_m / coll_m:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
