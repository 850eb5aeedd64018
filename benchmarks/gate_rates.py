"""False-alarm and detection rates of `gpuprof check`, both modes, measured on this machine.

    python benchmarks/gate_rates.py --out /tmp/gate [--checks 60] [--device cpu]
        [--scenarios stored-same,stored-probe,stored-uniform,ab-same,ab-real]
        [--baseline-runs 10] [--report-only]

Stored baseline (`gpuprof check --baseline`, the machine-wide factor removed):
1. a baseline from `--baseline-runs` separate runs of the ci suite;
2. `stored-same`: checks of unchanged code (false alarms: exit 1);
3. `stored-probe`: every check with the test-only fault hook GPUPROF_FAULT_SLOW=1.2:memory/*
   (the memory probe's timed regions 1.20x as long): detection, and the cases named;
4. `stored-uniform`: GPUPROF_FAULT_SLOW=1.2 (every case and canary 1.20x): how often a
   machine shift is reported, and how often cases are named anyway;
5. `stored-memdrift`: GPUPROF_FAULT_SLOW=1.25:*memory/* (the host copies and their canaries
   1.25x: the host's memory got slower, the rest did not): how often the canary's shift is
   reported, and how often a case is named anyway (false alarms).
The hook stretches the host copies' canaries (numpy copies around each) only where its pattern
matches `canary/<probe>/<case_id>`: `memory/*` slows the copies alone, as a slower copy kernel
would.
A/B in the same window (`gpuprof check --reference-python`, this interpreter on both sides):
6. `ab-same`: nothing differs (false alarms);
7. `ab-real`: the candidate runs with ATEN_CPU_CAPABILITY=default, a real environment setting:
   ATen's vectorized CPU kernels fall back to their scalar versions (the host memory copy
   about 1.2x slower, the DDP step's elementwise work 1.1x-2.4x, the matmuls, done by MKL,
   unchanged). Every case's true ratio is taken from all the checks' pairs pooled; a check
   detects when it names both memory cases, and names exactly when it names no case whose
   pooled ratio is under the minimum effect.

Every check's JSON is kept under --out/<scenario>/; a rerun continues where it stopped, and
--report-only prints the figures of what is there. Prints, per scenario, exit codes, the cases
named and how often, and the checks' wall time (median, worst).
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
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

GPUPROF = [sys.executable, "-m", "gpuprof"]
SCENARIOS = (
    "stored-same",
    "stored-probe",
    "stored-uniform",
    "stored-memdrift",
    "ab-same",
    "ab-real",
)
SLOWED_PROBE = "memory"
REAL_ENV = "ATEN_CPU_CAPABILITY=default"


def sh(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False)


def make_baseline(out: Path, runs: int, device: str) -> Path:
    base = out / "base.json"
    if base.exists():
        return base
    args = ["sweep", "--suite", "ci", "--device", device, "--repeats", str(runs)]
    done = sh([*GPUPROF, *args, "--out", str(out / "base"), "--tag", "base", "--no-report"])
    if done.returncode != 0:
        sys.exit(f"baseline sweep failed: {done.stderr[-2000:]}")
    folders = sorted(str(p) for p in (out / "base").iterdir() if p.is_dir())
    made = sh([*GPUPROF, "baseline", *folders, "-o", str(base)])
    if made.returncode != 0:
        sys.exit(f"gpuprof baseline failed: {made.stderr}")
    return base


def command(
    scenario: str, base: Path, folder: Path, device: str
) -> tuple[list[str], dict[str, str]]:
    """The check a scenario runs, and its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROF_FAULT")}
    if scenario.startswith("stored"):
        args = ["check", "--baseline", str(base), "--device", device]
        if scenario == "stored-probe":
            env["GPUPROF_FAULT_SLOW"] = f"1.2:{SLOWED_PROBE}/*"
        elif scenario == "stored-uniform":
            env["GPUPROF_FAULT_SLOW"] = "1.2"
        elif scenario == "stored-memdrift":
            env["GPUPROF_FAULT_SLOW"] = f"1.25:*{SLOWED_PROBE}/*"
    else:
        args = ["check", "--reference-python", sys.executable, "--device", device]
        if scenario == "ab-real":
            args += ["--env", REAL_ENV]
    return [*GPUPROF, *args, "--out", str(folder / "runs"), "--format", "json"], env


def run_checks(scenario: str, base: Path, out: Path, count: int, device: str) -> None:
    folder = out / scenario
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        target = folder / f"check-{i + 1:03d}.json"
        if target.exists():
            continue
        argv, env = command(scenario, base, folder, device)
        started = time.monotonic()
        done = sh(argv, env=env)
        wall = time.monotonic() - started
        try:
            data = json.loads(done.stdout)
        except json.JSONDecodeError:
            data = {"cases": [], "error": done.stderr.strip()[-500:]}
        data.update(exit=done.returncode, wall_s=wall, confirmed="once more" in done.stderr)
        target.write_text(json.dumps(data))
        named = sum(c["verdict"] == "regression" for c in data.get("cases", []))
        print(f"  {scenario} {i + 1}/{count}: exit {done.returncode}, {named} named, {wall:.0f} s",
              flush=True)  # fmt: skip


def load(out: Path, scenario: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / scenario).glob("check-*.json"))]


def named(check: dict[str, Any]) -> set[str]:
    return {
        f"{c['case']} [{c['metric']}]"
        for c in check.get("cases", [])
        if c["verdict"] == "regression"
    }


def summary(scenario: str, checks: list[dict[str, Any]]) -> None:
    codes = Counter(c["exit"] for c in checks)
    walls = [c["wall_s"] for c in checks]
    flagged: Counter[str] = Counter(n for c in checks for n in named(c))
    print(f"\n{scenario}: {len(checks)} checks; exit codes {dict(sorted(codes.items()))}; "
          f"wall median {statistics.median(walls):.0f} s, worst {max(walls):.0f} s")  # fmt: skip
    if scenario.startswith("stored"):
        shifts = Counter((c.get("machine") or {}).get("verdict") for c in checks)
        print(f"  machine factor verdicts: {dict(shifts)}")
        canaries = [k for c in checks for k in (c.get("machine") or {}).get("canaries", [])]
        if canaries:
            verdicts = Counter(k["verdict"] for k in canaries)
            pct = statistics.median(k["factor_pct"] for k in canaries)
            print(f"  canary verdicts: {dict(verdicts)}; median shift {pct:+.1f}% (slower > 0)")
    if scenario == "stored-probe":
        hit = sum(any(n.startswith(SLOWED_PROBE) for n in named(c)) for c in checks)
        exact = sum(
            bool(named(c)) and all(n.startswith(SLOWED_PROBE) for n in named(c)) for c in checks
        )
        print(f"  detected (a {SLOWED_PROBE} case named): {hit}/{len(checks)}; "
              f"only {SLOWED_PROBE} cases named: {exact}/{len(checks)}")  # fmt: skip
    if scenario.startswith("ab"):
        pairs = Counter(c.get("pairs") for c in checks)
        print(f"  pairs used: {dict(sorted(pairs.items()))}")
    for name, times in flagged.most_common(15):
        print(f"  named {times:3d}/{len(checks)}: {name}")


def true_ratios(checks: list[dict[str, Any]]) -> dict[str, float]:
    """Every case's candidate/reference ratio over all the checks' pairs (geometric mean of
    the checks' ratios, each weighted by its pairs): the truth the checks are scored on."""
    logs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for check in checks:
        for c in check.get("cases", []):
            if c.get("ratio") and c.get("pairs"):
                logs[f"{c['case']} [{c['metric']}]"].append((math.log(c["ratio"]), c["pairs"]))
    return {
        k: math.exp(sum(v * n for v, n in rows) / sum(n for _, n in rows))
        for k, rows in logs.items()
    }


def score_real(checks: list[dict[str, Any]]) -> None:
    truth = true_ratios(checks)
    worse = {}
    for check in checks[:1]:
        for c in check.get("cases", []):
            key = f"{c['case']} [{c['metric']}]"
            if key in truth:
                worse[key] = truth[key] if c["better"] == "lower" else 1 / truth[key]
    print("\n  pooled slowdown per case (candidate against reference, worse > 1):")
    for key, factor in sorted(worse.items(), key=lambda kv: -kv[1]):
        rate = sum(key in named(c) for c in checks)
        print(f"    {factor:5.2f}x  named {rate:3d}/{len(checks)}  {key}")
    memory = {k for k in worse if k.startswith(SLOWED_PROBE)}
    unaffected = {k for k, f in worse.items() if f < 1.05}
    detected = sum(memory <= named(c) for c in checks)
    exact = sum(not (named(c) & unaffected) for c in checks)
    print(f"  1.2x memory cases both named: {detected}/{len(checks)}; no case under the minimum "
          f"effect named: {exact}/{len(checks)}")  # fmt: skip
    for lo, hi in ((1.05, 1.15), (1.15, 1.3), (1.3, 9.0)):
        band = [k for k, f in worse.items() if lo <= f < hi]
        if band:
            hits = sum(sum(k in named(c) for k in band) for c in checks)
            share = hits / (len(band) * len(checks))
            print(f"  cases {lo}-{hi}x ({len(band)}): named in {share:.0%} of checks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline-runs", type=int, default=10)
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        sys.exit(f"unknown scenarios {sorted(unknown)}: choose from {', '.join(SCENARIOS)}")
    base = args.out / "base.json"
    if not args.report_only:
        if any(s.startswith("stored") for s in scenarios):
            base = make_baseline(args.out, args.baseline_runs, args.device)
        for scenario in scenarios:
            run_checks(scenario, base, args.out, args.checks, args.device)
    for scenario in scenarios:
        checks = load(args.out, scenario)
        if checks:
            summary(scenario, checks)
            if scenario == "ab-real":
                score_real(checks)


if __name__ == "__main__":
    main()
