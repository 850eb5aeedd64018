"""False-alarm and detection rates of `gpuprof check`, measured on this machine.

    python benchmarks/gate_rates.py --out /tmp/gate [--baseline-runs 10] [--checks 20]
        [--factors 1.0,1.2,1.1] [--checks-at 1.1=10] [--device cpu]

1. A baseline from `--baseline-runs` separate runs of the ci suite (`gpuprof sweep --suite ci
   --repeats K`, then `gpuprof baseline`).
2. For each factor, `--checks` literal `gpuprof check --baseline base.json` runs, each measuring
   the ci suite anew; a factor above 1 sets the test-only fault hook GPUPROF_FAULT_SLOW, which
   makes every case's timed region take that many times as long.
3. Prints, per factor, how many checks exited 0 / 1 / other, the cases they flagged, the ci
   suite's wall time, and the baseline's between-run spread per case.

Factor 1.0 measures false alarms (goal: at most 1 of 20 exit 1); 1.2 and 1.1 detection (goal
at 1.2: at least 19 of 20 exit 1). Everything each check measured stays under --out, so its
verdicts can be read again (`gpuprof check --run`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

GPUPROF = [sys.executable, "-m", "gpuprof"]


def sh(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False)


def make_baseline(out: Path, runs: int, device: str) -> Path:
    base = out / "base.json"
    if base.exists():
        return base
    started = time.monotonic()
    done = sh(
        [
            *GPUPROF,
            "sweep",
            "--suite",
            "ci",
            "--device",
            device,
            "--repeats",
            str(runs),
            "--out",
            str(out / "base"),
            "--tag",
            "base",
            "--no-report",
        ]
    )
    if done.returncode != 0:
        sys.exit(f"baseline sweep failed: {done.stderr[-2000:]}")
    folders = sorted(str(p) for p in (out / "base").iterdir() if p.is_dir())
    made = sh([*GPUPROF, "baseline", *folders, "-o", str(base)])
    if made.returncode != 0:
        sys.exit(f"gpuprof baseline failed: {made.stderr}")
    print(f"baseline: {runs} runs in {time.monotonic() - started:.0f} s -> {base}", flush=True)
    return base


def spreads(base: Path) -> list[tuple[str, str, float]]:
    """(case, metric, between-run spread in %) from the baseline's per-run medians."""
    data = json.loads(base.read_text())
    out = []
    for case in data["cases"]:
        logs = [math.log(v) for v in case["medians"] if v > 0]
        if len(logs) > 1:
            out.append((case["case"], case["metric"], 100 * statistics.stdev(logs)))
    return out


def run_checks(out: Path, base: Path, factor: float, count: int, device: str) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("GPUPROF_FAULT_SLOW", None)
    if factor != 1.0:
        env["GPUPROF_FAULT_SLOW"] = str(factor)
    folder = out / f"x{factor}"
    codes: Counter[int] = Counter()
    flagged: Counter[str] = Counter()
    walls = []
    for i in range(count):
        started = time.monotonic()
        done = sh(
            [
                *GPUPROF,
                "check",
                "--baseline",
                str(base),
                "--device",
                device,
                "--out",
                str(folder),
                "--format",
                "json",
            ],
            env=env,
        )
        walls.append(time.monotonic() - started)
        codes[done.returncode] += 1
        (folder / f"check-{i + 1:02d}.json").write_text(done.stdout)
        confirmed = "measuring once more" in done.stderr
        try:
            verdicts = json.loads(done.stdout)["cases"]
        except (json.JSONDecodeError, KeyError):
            print(f"  check {i}: exit {done.returncode}: {done.stderr.strip()[-300:]}", flush=True)
            continue
        bad = [f"{c['case']} [{c['metric']}]" for c in verdicts if c["verdict"] == "regression"]
        flagged.update(bad)
        print(
            f"  x{factor} check {i + 1}/{count}: exit {done.returncode}, {len(bad)} regressions"
            f" of {len(verdicts)}{' (after a confirming run)' if confirmed else ''}, "
            f"{walls[-1]:.0f} s",
            flush=True,
        )
    return {"codes": codes, "flagged": flagged, "walls": walls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline-runs", type=int, default=10)
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--factors", default="1.0,1.2,1.1")
    parser.add_argument("--checks-at", default="", help="FACTOR=N,...: other check counts")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = make_baseline(args.out, args.baseline_runs, args.device)
    results = {}
    counts = {float(k): int(v) for k, v in (p.split("=") for p in args.checks_at.split(",") if p)}
    for factor in (float(f) for f in args.factors.split(",")):
        count = counts.get(factor, args.checks)
        results[factor] = run_checks(args.out, base, factor, count, args.device)

    print("\nbetween-run spread of the baseline's medians (std of log, %):")
    for case, metric, spread in sorted(spreads(base), key=lambda t: -t[2]):
        print(f"  {spread:6.2f}%  {case} [{metric}]")
    for factor, res in results.items():
        codes, walls = res["codes"], res["walls"]
        assert isinstance(codes, Counter) and isinstance(walls, list)
        total = sum(codes.values())
        print(
            f"\nfactor {factor}: {codes.get(1, 0)} of {total} checks exit 1 "
            f"(exit codes {dict(sorted(codes.items()))}); check wall time median "
            f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f})"
        )
        flagged = res["flagged"]
        assert isinstance(flagged, Counter)
        for name, times in flagged.most_common(12):
            print(f"  flagged {times:2d}/{total}: {name}")


if __name__ == "__main__":
    main()
