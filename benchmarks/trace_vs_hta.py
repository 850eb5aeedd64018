"""gpuprof's trace breakdown against Holistic Trace Analysis's own, on the same files: per
rank, idle %, compute %, non-compute % (HTA's temporal breakdown) and the communication time
that compute overlaps (HTA's comm/comp overlap), with the difference in points.

HTA is not a dependency of gpuprof (it pulls in jupyterlab): give a Python that has it, e.g.
`python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis`.

    python benchmarks/trace_vs_hta.py --hta-python /tmp/hta/bin/python DIR [DIR ...]

Each DIR holds the traces of one job (one file per rank); tests/data/hta_trace_filter is one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from gpuprof.traces.job import read_job

HTA = """
import json, sys, warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
tb = a.get_temporal_breakdown(visualize=False)
ov = a.get_comm_comp_overlap(visualize=False)
out = {}
for _, r in tb.iterrows():
    out[int(r["rank"])] = [r["idle_time_pctg"], r["compute_time_pctg"], r["non_compute_time_pctg"]]
for _, r in ov.iterrows():
    out[int(r["rank"])].append(r["comp_comm_overlap_pctg"])
print(json.dumps(out))
"""
NAMES = ("idle %", "compute %", "non-compute %", "overlap %")


def ours(folder: Path) -> dict[int, list[float]]:
    tables = read_job(folder, jobs=1)
    out = {}
    for _, r in tables.ranks.iterrows():
        span = r["span_us"]
        overlap = 100 * r["overlap_us"] / r["comm_us"] if r["comm_us"] else float("nan")
        out[int(r["rank"])] = [
            100 * r["idle_us"] / span,
            100 * r["compute_us"] / span,
            100 * (r["exposed_comm_us"] + r["other_us"]) / span,
            overlap,
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", required=True, help="a Python with HolisticTraceAnalysis")
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    worst = 0.0
    for folder in args.folders:
        done = subprocess.run(
            [args.hta_python, "-c", HTA, str(folder)], check=True, capture_output=True, text=True
        )
        theirs = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
        mine = ours(folder)
        for rank in sorted(theirs):
            diffs = [abs(a - b) for a, b in zip(mine[rank], theirs[rank], strict=True) if a == a]
            worst = max([worst, *diffs])
            cells = ", ".join(
                f"{n} {m:.2f}/{t:.2f}"
                for n, m, t in zip(NAMES, mine[rank], theirs[rank], strict=True)
            )
            print(f"{folder.name} rank {rank}: gpuprof/HTA {cells}; worst {max(diffs):.2f} pt")
    print(f"worst difference over every rank and number: {worst:.2f} points (goal: 2)")


if __name__ == "__main__":
    main()
