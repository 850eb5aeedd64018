"""`gpuprof predict` against measurements it did not fit on, on the emulated cluster.

    python benchmarks/predict_heldout.py --out /tmp/held [--nodes 2,3,4] [--rate 200mbit]
        [--reuse]

Runs the same plan on 2, 3 and 4 emulated nodes of one rank each (benchmarks/emulated_sweep.py:
network namespaces, every link shaped to --rate): all_reduce and all_gather from 1 KiB to
4 MiB, the DDP probe (default variant) and the pipeline (GPipe and 1F1B, m = 4 and 8). Then fits
on the first (2-node) run only and prints, for the others, predicted / measured - 1 of:
all_reduce and all_gather busbw at every size of at least 1 MiB, the DDP step, and the pipeline
step (from the 2-node stage times; and, to separate the schedule model from this machine's CPU
contention, from the held-out run's own stage times). --reuse reads runs already under --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAN = [
    "--probes", "collectives,ddp,pipeline", "--op", "all_reduce,all_gather",
    "--sizes", "1K,8K,64K,256K,1M,2M,4M", "--scopes", "global", "--budget-ms", "300",
    "--min-iters", "5", "--warmup", "2", "--ddp-variants", "default",
    "--schedules", "GPipe,1F1B", "--micro-batches", "4,8",
]  # fmt: skip


def measure(out: Path, nodes: int, rate: str) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "emulated_sweep.py"), "--nodes", str(nodes)]
    cmd += ["--gpus", "1", "--rate", rate, "--out", str(out / f"n{nodes}"), "--", *PLAN]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the {nodes}-node run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def main() -> int:
    from gpuprof.analysis.summary import Analyzed
    from gpuprof.predict.collectives import links_for, predict_collective
    from gpuprof.predict.ddp import ddp_basis, predict_ddp
    from gpuprof.predict.fits import fit_collectives
    from gpuprof.predict.network import FitNetwork
    from gpuprof.predict.pipeline import pipeline_bases, predict_pipeline
    from gpuprof.runs.store import open_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nodes", default="2,3,4")
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    out, shapes = Path(args.out), [int(n) for n in args.nodes.split(",")]
    if not args.reuse:
        for nodes in shapes:
            measure(out, nodes, args.rate)
    runs = {n: Analyzed(open_run("latest", out / f"n{n}" / "n0")) for n in shapes}
    fitted, held = runs[shapes[0]], shapes[1:]
    fits, _ = fit_collectives(fitted.summary("collectives"))
    print(f"fitted on {shapes[0]} nodes; held out: {held}")
    for op in ("all_reduce", "all_gather"):
        links = links_for(fits, op, "float32")
        errors = []
        for n in held:
            rows = runs[n].summary("collectives")
            rows = rows[(rows["op"] == op) & (rows["size_bytes"] >= 1 << 20)]
            for size, group in rows.groupby("size_bytes"):
                got = predict_collective(links, op, n, 1, float(size), "gloo")
                measured = float(group["busbw_gbps"].min())
                errors.append(got.busbw_gbps / measured - 1)
                print(f"  {op} n={n} {size / 2**20:.1f} MiB: predicted {got.busbw_gbps * 1e3:.2f}"
                      f" MB/s, measured {measured * 1e3:.2f}: {errors[-1]:+.1%}")  # fmt: skip
        print(f"{op}: worst |predicted/measured - 1| = {max(abs(e) for e in errors):.1%}")
    basis = ddp_basis(fitted.summary("ddp"), 1)
    links = links_for(fits, "all_reduce", "float32")
    worst = 0.0
    for n in held:
        ddp = runs[n].summary("ddp")
        measured = float(ddp[ddp["scope"] == "global"]["step_us"].iloc[0])
        got = predict_ddp(basis, FitNetwork(links), n, 1, "gloo")
        worst = max(worst, abs(got.step_us / measured - 1))
        print(f"  ddp n={n}: predicted {got.step_us / 1e3:.1f} ms, measured "
              f"{measured / 1e3:.1f}: {got.step_us / measured - 1:+.1%}")  # fmt: skip
    print(f"ddp step: worst {worst:.1%}")
    bases = {b.schedule: b for b in pipeline_bases(fitted.summary("pipeline"))}
    for label, own in (
        ("from the fitted run's stage times", False),
        ("with own stage times", True),
    ):
        worst = 0.0
        for n in held:
            for row in runs[n].summary("pipeline").to_dict("records"):
                fitted_basis = bases.get(row["schedule"])
                if fitted_basis is None:
                    continue
                basis_p = fitted_basis
                if own:
                    basis_p = dataclasses.replace(
                        fitted_basis, t_f=row["t_f_us"], t_b=row["t_b_us"], t_w=0.0
                    )
                got = predict_pipeline(basis_p, int(row["p"]), int(row["m"]))
                if got is None:
                    continue
                err = got[0] / row["step_us"] - 1
                worst = max(worst, abs(err))
                print(f"  pipeline {row['schedule']} p={row['p']} m={row['m']} ({label}): "
                      f"predicted {got[0] / 1e3:.0f} ms, measured {row['step_us'] / 1e3:.0f}: "
                      f"{err:+.1%}; stage F+B {row['t_f_us'] + row['t_b_us']:.0f} us "
                      f"(fitted run: {fitted_basis.t_f + fitted_basis.t_b:.0f})")  # fmt: skip
        print(f"pipeline step {label}: worst {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
