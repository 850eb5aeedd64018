"""False-alarm and detection rates of `gpuprof check`, both modes, measured on this machine.

    python benchmarks/gate_rates.py --out /tmp/gate [--checks 60] [--device cpu]
        [--scenarios stored-same,stored-probe,stored-uniform,stored-memdrift,ab-same,ab-real,
                     ab-matmul,ab-matmul-1.1]
        [--baseline-runs 10] [--records FILE] [--report-only]
        [--check-args "--no-confirm"] [--pool C] [--since ISO] [--across-baselines]
        [--window-baseline ISO]

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
The hook stretches a case's canary (the numpy copies or matmuls between its iterations) only
where its pattern matches `canary/<probe>/<case_id>`: `memory/*` slows the copies alone, as a
slower copy kernel would.
A/B in the same window (`gpuprof check --reference-python`, this interpreter on both sides):
6. `ab-same`: nothing differs (false alarms);
7. `ab-real`: the candidate runs with ATEN_CPU_CAPABILITY=default, a real environment setting:
   ATen's vectorized CPU kernels fall back to their scalar versions. What that slows depends
   on the CPU (on one Intel VM the host copy 1.5-1.7x and the DDP step's elementwise work
   1.1-2.6x; on an AMD EPYC VM elementwise adds 1.6x and copies not at all); the matmuls, done
   by MKL, are unchanged. Every case's true ratio is taken from all the checks' pairs pooled; a
   check detects when it names a case that is 1.15x or more slower, and names exactly when it
   names no case under 1.05x; per band of true slowdown, how often its cases are named.
8. `ab-matmul`: the candidate's torch.matmul does 17% of its work again (a real, confined
   slowdown: benchmarks/slow_matmul/sitecustomize.py on the candidate's PYTHONPATH), so the
   compute probe's matmul is about 1.2x as long and nothing else is: how often a check exits 1
   naming the compute cases and no other case. `ab-matmul-1.1`: 8% again, about 1.1x.

--window-baseline ISO: a second baseline from the first baseline's runs and every run of the
stored-same checks (unchanged code) made against it before ISO: runs gathered over a longer
window, as a nightly health job gathers them, so that its spread holds the machine's drift from
hour to hour, not only from run to run. Then every stored check made against the first
baseline at or after ISO is judged again against it, on the runs it measured, as it judged
them: its first runs; all of them where those name a regression and it had measured more to
confirm (where it had not, its alarm stands unconfirmed: counted as an alarm). Its records
carry "rejudged" (when the check was made) and the original check's wall time.

Each check's result is appended as one line to --records (default
benchmarks/results/gate_rates.jsonl, kept in the repository): its verdict per case (ratio,
interval, pairs), the machine factor, exit code, wall time, when, on which CPU, at which commit,
against which baseline. The runs themselves go under --out. A rerun continues where the records
stop: an A/B scenario counts every record of this CPU model (an A/B check needs no baseline, so
its 60 checks may span several sessions on the same kind of machine); a stored scenario counts
the records against this --out's baseline (a baseline is one machine's, one session's).
A record with a "load" (set by hand afterwards: other work that ran on the same cores during
the check) is counted apart from the checks of an otherwise idle machine; so are records of an
earlier way of measuring (`METHOD`: before 2, the DDP probe's rounds were sized by their step
alone and ran to max_iters).
--report-only prints the figures of the records. Prints, per scenario and group, exit codes,
the cases named and how often, and the checks' wall time (median, worst).

--check-args adds arguments to every check (e.g. "--no-confirm": one run each, "--repeats 3");
checks with other arguments are counted apart. --pool C judges the runs a stored scenario's
checks kept under --out again, in order (each a launch of its own, made in sequence), with
`gpuprof check --baseline B --run R1 ... --run RC`, as a check of C runs (`--repeats C`)
judges them: C runs, and where they name a regression, C more judged with them. What such
checks would have said, from runs already made. Its records carry "pooled": C (wall time:
its runs' own, without the checks' starts).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shlex
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
    "ab-matmul",
    "ab-matmul-1.1",
)
RECORDS = Path(__file__).with_name("results") / "gate_rates.jsonl"
SLOWED_PROBE = "memory"
REAL_ENV = "ATEN_CPU_CAPABILITY=default"
# ab-matmul: every torch.matmul of the candidate does this share of its work again
# (benchmarks/slow_matmul/sitecustomize.py); 1.17 makes a 1024^3 float32 matmul 1.20-1.23x
# as long on one thread here, 1.08 1.11-1.12x (the extra product is a smaller one, less
# efficient); each check's slowdown is measured by its pairs and reported
SLOW_MATMUL = {"ab-matmul": "1.17", "ab-matmul-1.1": "1.08"}
MATMUL_PROBE = "compute"
# the A/B design the records were made with: 2 judges each case on its primary metric, against
# its canary, passes it under the 10% margin, one thread a CPU rank (1: every metric, within
# 5% both ways, two CPU ranks with the collectives); 3 keeps a canary whose mean strayed past
# the minimum effect unless it is significantly apart from 0 (2 left it for the raw values);
# 4 starts a one-rank launch without torchrun (2-4 s less a launch) and times a pair by the
# probes it launches, so more pairs of the undecided probes fit in the budget; 5 judges DDP's
# samples/s on CPU against a canary (a numpy matmul and copy after each step) and decides a
# case whose canary moved apart only where as measured and against its canary agree; 6 calls a
# canary moved at 1%, not at alpha (5%: chance alone marked 7 of 149 case-checks in design 5)
AB_DESIGN = 6
AFFECTED, UNAFFECTED = 1.15, 1.05  # pooled slowdowns: what a check must name, and must not


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
    scenario: str, base: Path, folder: Path, device: str, extra: list[str]
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
        if scenario in SLOW_MATMUL:
            shim = Path(__file__).with_name("slow_matmul")
            args += ["--env", f"PYTHONPATH={shim}"]
            args += ["--env", f"GPUPROF_BENCH_SLOW_MATMUL={SLOW_MATMUL[scenario]}"]
    return [*GPUPROF, *args, *extra, "--out", str(folder / "runs"), "--format", "json"], env


def cpu_model() -> str:
    """This machine's CPU as /proc/cpuinfo names it, and its core count."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = next(ln.split(":", 1)[1].strip() for ln in text.splitlines()
                     if ln.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} cores"


# what the probes measure, as far as it changes the gate's figures: 2 since DDP's rounds are
# sized by their wall time (records without it are 1)
METHOD = 2


def commit() -> str:
    done = sh(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"])
    return done.stdout.strip() or "unknown"


def baseline_id(base: Path) -> str | None:
    return hashlib.sha256(base.read_bytes()).hexdigest()[:12] if base.exists() else None


CASE_FIELDS = ("probe", "case", "metric", "better", "verdict", "change_pct", "threshold_pct",
               "ratio", "ratio_lo", "ratio_hi", "ratio_worst", "against", "pairs")  # fmt: skip


def compact(
    data: dict[str, Any], scenario: str, baseline: str | None, extra: list[str], device: str
) -> dict[str, Any]:
    """One check's record: what the figures are computed from, without the per-run values
    (a stored check keeps the paths of its runs, which --pool judges again)."""
    return {
        "scenario": scenario,
        "checked_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": cpu_model(),
        "commit": commit(),
        "method": METHOD,
        "baseline": baseline if scenario.startswith("stored") else None,
        "check_args": shlex.join(extra),
        **({"device": device} if device != "cpu" else {}),
        **({"ab_design": AB_DESIGN} if scenario.startswith("ab") else {}),
        **{
            k: _rounded(data[k])
            for k in ("exit", "wall_s", "confirmed", "pairs", "pooled", "error")
            if k in data
        },
        **({"runs": data["runs"]} if scenario.startswith("stored") and "runs" in data else {}),
        "machine": _rounded(data.get("machine")),
        "cases": [
            {k: _rounded(c[k]) for k in CASE_FIELDS if k in c} for c in data.get("cases", [])
        ],
    }


def _rounded(value: Any) -> Any:
    """Floats to 5 significant digits, inside lists and dicts too (a record's size)."""
    if isinstance(value, float) and math.isfinite(value) and value:
        return round(value, 4 - math.floor(math.log10(abs(value))))
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def load(records: Path, scenario: str) -> list[dict[str, Any]]:
    if not records.exists():
        return []
    rows = (json.loads(line) for line in records.read_text().splitlines() if line.strip())
    return [r for r in rows if r["scenario"] == scenario]


def group(check: dict[str, Any], across_baselines: bool = False) -> str:
    """What a scenario's checks are counted and summarised by: its baseline (stored; with
    `across_baselines`, every baseline's checks together), its kind of machine (A/B), the
    arguments its checks were given, how many runs a pooled judgement took, other work beside
    it and the way of measuring."""
    if not check["scenario"].startswith("stored"):
        name = str(check["host"])
    elif across_baselines:
        name = f"each baseline checked in its own window ({check['host']})"
    else:
        name = f"baseline {check['baseline']} ({check['host']})"
    if check.get("device", "cpu") != "cpu":
        name += f", --device {check['device']}"
    if check.get("check_args"):
        name += f", check {check['check_args']}"
    if check.get("pooled"):
        name += f", {check['pooled']} runs pooled"
    if check.get("rejudged"):
        name += ", checks made earlier judged again"
    if check.get("load"):
        name += f", {check['load']}"
    if check.get("method", 1) != METHOD:
        name += f", method {check.get('method', 1)}"
    if check["scenario"].startswith("ab") and check.get("ab_design", 1) != AB_DESIGN:
        name += f", A/B design {check.get('ab_design', 1)}"
    return name


def parsed(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A check's JSON output with its exit code (an error text when it printed no JSON)."""
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        data = {"cases": [], "error": done.stderr.strip()[-500:]}
    data["exit"] = done.returncode
    return data


def run_checks(
    scenario: str, base: Path, out: Path, records: Path, count: int, device: str, extra: list[str]
) -> None:
    folder = out / scenario
    folder.mkdir(parents=True, exist_ok=True)
    baseline = baseline_id(base)
    mine = {"scenario": scenario, "baseline": baseline, "host": cpu_model(), "method": METHOD,
            "ab_design": AB_DESIGN, "device": device}  # fmt: skip
    here = group({**mine, "check_args": shlex.join(extra)})
    done_before = sum(group(r) == here for r in load(records, scenario))
    for i in range(done_before, count):
        argv, env = command(scenario, base, folder, device, extra)
        started = time.monotonic()
        done = sh(argv, env=env)
        wall = time.monotonic() - started
        data = parsed(done)
        data.update(wall_s=round(wall, 1), confirmed="to confirm them" in done.stderr)
        records.parent.mkdir(parents=True, exist_ok=True)
        with records.open("a") as f:
            f.write(json.dumps(compact(data, scenario, baseline, extra, device)) + "\n")
        named = sum(c["verdict"] == "regression" for c in data.get("cases", []))
        print(f"  {scenario} {i + 1}/{count}: exit {done.returncode}, {named} named, {wall:.0f} s",
              flush=True)  # fmt: skip


def judge(base: Path, chunk: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """`gpuprof check --baseline B --run R1 ...` of kept runs: its JSON, exit code and the
    runs' own wall time."""
    argv = [*GPUPROF, "check", "--baseline", str(base), "--format", "json"]
    argv += [arg for path, _ in chunk for arg in ("--run", str(path))]
    data = parsed(sh(argv))
    data["wall_s"] = round(sum(float(info.get("took_s") or 0) for _, info in chunk), 1)
    return data


def pool(scenario: str, out: Path, base: Path, records: Path, size: int) -> None:
    """Judge the runs the scenario's checks made under `out` again, in order, as a check of
    `size` runs judges them (`--repeats size`): `size` runs, and where they name a regression,
    `size` more and all of them together. Each judgement is a record (its wall time: its runs'
    own, without the checks' starts)."""
    baseline = baseline_id(base)
    folders = sorted(p for p in (out / scenario / "runs").glob("*") if (p / "run.json").is_file())
    infos = [json.loads((p / "run.json").read_text()) for p in folders]
    runs = [(p, i) for p, i in zip(folders, infos, strict=True) if i.get("status") == "complete"]
    kept = load(records, scenario)
    # the runs' way of measuring: that of the checks that made them
    made = {r.get("method", 1) for r in kept if r["baseline"] == baseline}
    if len(made) > 1:
        raise SystemExit(f"{scenario}: runs of several ways of measuring under {out}: {made}")
    method = made.pop() if made else METHOD
    mine_kept = [r.get("device", "cpu") for r in kept if r["baseline"] == baseline]
    earlier_device = mine_kept[0] if mine_kept else "cpu"
    mine = {"scenario": scenario, "baseline": baseline, "host": cpu_model(), "method": method,
            "device": earlier_device}  # fmt: skip
    here = group({**mine, "pooled": size})
    earlier = [r for r in kept if group(r) == here]
    # where the records stop: each earlier judgement used `size` runs, or twice that confirmed
    start = sum(2 * size if r.get("confirmed") else size for r in earlier)
    count = len(earlier)
    while start + size <= len(runs):
        data = judge(base, runs[start : start + size])
        used = size
        if data["exit"] == 1 and start + 2 * size <= len(runs):
            data = judge(base, runs[start : start + 2 * size])
            used = 2 * size
        data.update(pooled=size, confirmed=used > size)
        start, count = start + used, count + 1
        with records.open("a") as f:
            record = {**compact(data, scenario, baseline, [], earlier_device), "method": method}
            f.write(json.dumps(record) + "\n")
        print(f"  {scenario} pooled {count}: {used} runs, exit {data['exit']}", flush=True)


def window_baseline(out: Path, base: Path, records: Path, until: str) -> Path:
    """The baseline of `base`'s runs and the runs of the stored-same checks made against it
    before `until` (made once, then kept)."""
    path = out / f"base-until-{until.replace(':', '')}.json"
    if path.exists():
        return path
    first = baseline_id(base)
    earlier = [
        r for r in load(records, "stored-same")
        if r["baseline"] == first and r["checked_at"] < until and r.get("runs")
        and not r.get("pooled") and not r.get("rejudged")
    ]  # fmt: skip
    folders = [run["path"] for run in json.loads(base.read_text())["runs"]]
    folders += [p for r in earlier for p in r["runs"]]
    made = sh([*GPUPROF, "baseline", *folders, "-o", str(path)])
    if made.returncode != 0:
        sys.exit(f"gpuprof baseline failed: {made.stderr}")
    print(f"  window baseline {baseline_id(path)}: {len(folders)} runs ({len(earlier)} checks' "
          f"runs before {until} and {len(folders) - sum(len(r['runs']) for r in earlier)} of "
          f"the first baseline)", flush=True)  # fmt: skip
    return path


def rejudge(scenario: str, base: Path, window: Path, records: Path, until: str) -> None:
    """Judge again, against `window`, the checks of `scenario` made against `base` at or
    after `until`, each on its own runs as it judged them (see --window-baseline)."""
    first, second = baseline_id(base), baseline_id(window)
    kept = load(records, scenario)
    done = {r["rejudged"] for r in kept if r["baseline"] == second and r.get("rejudged")}
    todo = [
        r for r in kept
        if r["baseline"] == first and r["checked_at"] >= until and r.get("runs")
        and not r.get("pooled") and not r.get("rejudged") and r["checked_at"] not in done
    ]  # fmt: skip
    for r in todo:
        runs = [Path(p) for p in r["runs"]]
        measured = len(runs) // 2 if r.get("confirmed") else len(runs)
        chunk = [(p, json.loads((p / "run.json").read_text())) for p in runs]
        data = judge(window, chunk[:measured])
        used = measured
        if data["exit"] == 1 and measured < len(runs):
            data, used = judge(window, chunk), len(runs)
        data.update(
            wall_s=r["wall_s"],
            confirmed=used > measured,
            rejudged=r["checked_at"],
            unconfirmed=data["exit"] == 1 and measured == len(runs),
        )
        device = r.get("device", "cpu")
        record = {**compact(data, scenario, second, [], device), "method": r.get("method", 1)}
        record.update(rejudged=r["checked_at"], unconfirmed=data["unconfirmed"])
        with records.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"  {scenario} {r['checked_at']} judged again: exit {data['exit']} "
              f"(was {r['exit']}), {used} runs", flush=True)  # fmt: skip


def named(check: dict[str, Any]) -> set[str]:
    return {
        f"{c['case']} [{c['metric']}]"
        for c in check.get("cases", [])
        if c["verdict"] == "regression"
    }


def summary(scenario: str, name: str, checks: list[dict[str, Any]]) -> None:
    codes = Counter(c["exit"] for c in checks)
    walls = [c["wall_s"] for c in checks]
    flagged: Counter[str] = Counter(n for c in checks for n in named(c))
    when = sorted(c["checked_at"] for c in checks)
    print(f"\n{scenario}, {name}, {when[0]} to {when[-1]}, commits "
          f"{', '.join(sorted({c['commit'] for c in checks}))}:")  # fmt: skip
    print(f"  {len(checks)} checks; exit codes {dict(sorted(codes.items()))}; "
          f"wall median {statistics.median(walls):.0f} s, worst {max(walls):.0f} s")  # fmt: skip
    if scenario.startswith("stored"):
        bases = {c["baseline"] for c in checks}
        if len(bases) > 1:
            print(f"  {len(bases)} baselines: {', '.join(sorted(map(str, bases)))}")
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
    affected = {k for k, f in worse.items() if f >= AFFECTED}
    unaffected = {k for k, f in worse.items() if f < UNAFFECTED}
    detected = sum(bool(named(c) & affected) for c in checks)
    exact = sum(not (named(c) & unaffected) for c in checks)
    print(f"  detected (a case {AFFECTED}x or more slower named): {detected}/{len(checks)}; "
          f"no case under {UNAFFECTED}x named: {exact}/{len(checks)}")  # fmt: skip
    for lo, hi in ((1.05, 1.15), (1.15, 1.3), (1.3, 9.0)):
        band = [k for k, f in worse.items() if lo <= f < hi]
        if band:
            hits = sum(sum(k in named(c) for k in band) for c in checks)
            share = hits / (len(band) * len(checks))
            print(f"  cases {lo}-{hi}x ({len(band)}): named in {share:.0%} of checks")


def score_matmul(checks: list[dict[str, Any]]) -> None:
    """ab-matmul: the compute probe's cases slowed, nothing else: how often a check exits 1
    naming them and no other case, and the slowdown its pairs measured."""
    exact = sum(
        c["exit"] == 1
        and bool(named(c))
        and all(x["probe"] == MATMUL_PROBE for x in c["cases"] if x["verdict"] == "regression")
        for c in checks
    )
    ratios = [
        x["ratio"] for c in checks for x in c["cases"]
        if x["probe"] == MATMUL_PROBE and x.get("ratio")
    ]  # fmt: skip
    slow = f"; the matmul's throughput {statistics.median(ratios):.3f}x (median)" if ratios else ""
    print(f"  exit 1 naming the {MATMUL_PROBE} cases and no other: {exact}/{len(checks)}{slow}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where the baseline and the runs go")
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--baseline-runs", type=int, default=10)
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--check-args", default="", help="more arguments for every check")
    parser.add_argument(
        "--pool", type=int, default=0, metavar="C", help="judge the kept runs again, C at a time"
    )
    parser.add_argument(
        "--since", default="", metavar="ISO", help="report the checks made at or after this time"
    )
    parser.add_argument(
        "--across-baselines",
        action="store_true",
        help="report the stored checks of several baselines together (each its own window)",
    )
    parser.add_argument(
        "--window-baseline",
        default="",
        metavar="ISO",
        help="judge the stored checks made from ISO on against a baseline of the runs before it",
    )
    args = parser.parse_args()
    extra = shlex.split(args.check_args)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        sys.exit(f"unknown scenarios {sorted(unknown)}: choose from {', '.join(SCENARIOS)}")
    if not args.report_only:
        if args.out is None:
            sys.exit("--out DIR is needed to run checks (the baseline and the runs go there)")
        args.out.mkdir(parents=True, exist_ok=True)
        base = args.out / "base.json"
        if any(s.startswith("stored") for s in scenarios):
            base = make_baseline(args.out, args.baseline_runs, args.device)
        window = window_baseline(args.out, base, args.records, args.window_baseline) if (
            args.window_baseline) else None  # fmt: skip
        for scenario in scenarios:
            if window is not None:
                if scenario.startswith("stored"):
                    rejudge(scenario, base, window, args.records, args.window_baseline)
            elif args.pool:
                if scenario.startswith("stored"):
                    pool(scenario, args.out, base, args.records, args.pool)
            else:
                run_checks(scenario, base, args.out, args.records, args.checks, args.device,
                           extra)  # fmt: skip
    for scenario in scenarios:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for check in load(args.records, scenario):
            if check["checked_at"] >= args.since:
                groups[group(check, args.across_baselines)].append(check)
        for name, checks in groups.items():
            summary(scenario, name, checks)
            if scenario == "ab-real":
                score_real(checks)
            if scenario in SLOW_MATMUL:
                score_matmul(checks)


if __name__ == "__main__":
    main()
