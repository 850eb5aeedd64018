"""gpuprof's steps against the PyTorch profiler viewer's own overview (torch-tb-profiler, the
TensorBoard plugin torch.profiler's traces were written for), on the same files: per step, the
step's time, its kernel share and its data loader share, with the differences.

The viewer is not a dependency of gpuprof (it pulls in TensorBoard): give a Python that has
it, e.g. `python -m venv /tmp/tbv && /tmp/tbv/bin/pip install torch-tb-profiler`.

    python benchmarks/trace_vs_viewer.py --viewer-python /tmp/tbv/bin/python FILE [FILE ...]

The viewer 0.4.3 (its last release) also reads the GPU-side `ProfilerStep#N` annotations that
torch writes since 2023 as steps of their own (each step appears twice, and its kernels are
matched to neither) and then pushes the steps' starts: on such traces (this script says which)
its numbers are not the step's; TraceLens's reports of its own published traces are the
reference there (tests/test_traces.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from gpuprof.traces.job import read_job

VIEWER = """
import json, sys
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.overall_parser import ProfileRole
prof = RunProfileData.parse("worker", "span", sys.argv[1], "/tmp")
roles = [r.name for r in ProfileRole]
print(json.dumps([
    {"step": name, **{r: c.costs[i] for i, r in enumerate(roles)}}
    for name, c in zip(prof.steps_names, prof.steps_costs)
]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewer-python", required=True, help="a Python with torch-tb-profiler")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    for path in args.files:
        done = subprocess.run(
            [args.viewer_python, "-c", VIEWER, str(path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        theirs = json.loads(done.stdout)
        names = [s["step"] for s in theirs]
        twice = len(set(names)) < len(names)
        steps = read_job(path, jobs=1).steps
        note = " (the viewer also takes the GPU-side step annotations for steps: compare with care)"
        print(f"{path}{note if twice else ''}")
        seen = set()
        for s in theirs:
            if s["step"] in seen or s["Total"] <= 0:
                continue
            seen.add(s["step"])
            mine = steps[steps["step"] == int(s["step"])] if "step" in steps else steps.iloc[:0]
            if mine.empty:
                print(f"  step {s['step']}: not among gpuprof's steps")
                continue
            r, total = mine.iloc[0], s["Total"]
            kernel = 100 * (r["compute_us"] + r["exposed_comm_us"]) / r["span_us"]
            loader = 100 * r["input_us"] / r["span_us"]
            print(
                f"  step {s['step']}: {r['span_us']:.0f} us vs {total:.0f} "
                f"({100 * (r['span_us'] / total - 1):+.1f}%), kernel {kernel:.1f} vs "
                f"{100 * s['Kernel'] / total:.1f}%, data loader {loader:.1f} vs "
                f"{100 * s['DataLoader'] / total:.1f}%"
            )


if __name__ == "__main__":
    main()
