"""The regression gate: statistics on synthetic sets with known noise, the baseline file, the
outputs (JUnit through an XML parser), and `gpuprof check` on real gloo runs."""

from __future__ import annotations

import json
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuprof.analysis.measured import (
    SAMPLE_COLUMNS,
    SAMPLE_SLOTS,
    VALUE_COLUMNS,
    Measured,
    case_key,
    sample_slots,
)
from gpuprof.errors import UsageError
from gpuprof.gate import verdicts
from gpuprof.gate.baseline import baseline_json, read_baseline
from gpuprof.gate.check import run_check
from gpuprof.gate.sides import Side
from gpuprof.gate.stats import compare
from tests.conftest import Gp

FP = {
    "device": "cpu",
    "device_model": "AMD EPYC",
    "backend": "gloo",
    "num_nodes": 1,
    "gpus_per_node": 2,
    "world_size": 2,
    "suite": "ci",
    "versions": {"gpuprof": "0.1.0", "torch": "2.13.0", "cuda": None},
}


def synthetic(
    cases: dict[str, tuple[float, float, str]],
    runs: int,
    seed: int,
    scale: dict[str, float] | None = None,
    iters: int = 30,
    within: float = 0.01,
) -> Measured:
    """name -> (center, between-run spread, better): per-run medians drawn log-normally around
    the center (times `scale[name]`), and `iters` iteration samples per run around each."""
    rng = np.random.default_rng(seed)
    values, samples = [], []
    for name, (center, spread, better) in cases.items():
        key = case_key({"case": name})
        for run in range(runs):
            median = center * (scale or {}).get(name, 1.0) * np.exp(rng.normal(0, spread))
            values.append(
                {
                    "probe": "compute",
                    "metric": "tflops" if better == "higher" else "time_us",
                    "better": better,
                    "key": key,
                    "case": name,
                    "run": run,
                    "value": median,
                    "throttled": False,
                    "nwrong": 0.0,
                }
            )
            for x in median * np.exp(rng.normal(0, within, iters)):
                samples.append(
                    {
                        "probe": "compute",
                        "metric": "tflops" if better == "higher" else "time_us",
                        "key": key,
                        "value": x,
                    }
                )
    return Measured(
        values=pd.DataFrame(values, columns=VALUE_COLUMNS),
        samples=pd.DataFrame(samples, columns=SAMPLE_COLUMNS),
    )


CASES = {
    "quiet-fast": (100.0, 0.01, "higher"),
    "quiet-slow": (50.0, 0.01, "lower"),
    "noisy": (10.0, 0.10, "lower"),
}


def verdict_of(table: pd.DataFrame, case: str) -> str:
    return str(table.loc[table["case"] == case, "verdict"].iloc[0])


def test_unchanged_sets_pass_and_known_slowdowns_are_named() -> None:
    base = synthetic(CASES, runs=5, seed=1)
    same = compare(base, synthetic(CASES, runs=1, seed=2))
    assert not same["verdict"].isin(["regression", "improvement"]).any(), same
    # 20% slower: the quiet cases regress in their own direction; the noisy one (10% between
    # runs) cannot be told from its noise and is inconclusive, not a regression
    slow = {"quiet-fast": 1 / 1.2, "quiet-slow": 1.2, "noisy": 1.2}
    table = compare(base, synthetic(CASES, runs=1, seed=3, scale=slow))
    assert verdict_of(table, "quiet-fast") == "regression"
    assert verdict_of(table, "quiet-slow") == "regression"
    assert verdict_of(table, "noisy") == "inconclusive"
    noisy = table[table["case"] == "noisy"].iloc[0]
    assert noisy["threshold_pct"] > 20 > noisy["min_effect_pct"]
    # faster is an improvement, never a regression
    fast = {"quiet-fast": 1.3, "quiet-slow": 1 / 1.3}
    table = compare(base, synthetic(CASES, runs=1, seed=4, scale=fast))
    assert verdict_of(table, "quiet-fast") == "improvement"
    assert verdict_of(table, "quiet-slow") == "improvement"
    # failures first
    assert next(iter(table["verdict"])) in ("improvement", "inconclusive", "same")


def test_threshold_never_below_min_effect_and_grows_with_spread() -> None:
    base = synthetic(CASES, runs=5, seed=5)
    table = compare(base, synthetic(CASES, runs=1, seed=6), min_effect=0.05)
    assert (table["threshold_pct"] >= 100 * (1 - 1 / 1.05) - 1e-9).all()  # 5%, or -4.76% for a drop
    by_case = table.set_index("case")["threshold_pct"]
    assert by_case["noisy"] > by_case["quiet-fast"]
    # 4% slower on a quiet case is below the minimum effect: same, whatever the test says
    table = compare(base, synthetic(CASES, runs=1, seed=7, scale={"quiet-slow": 1.04}))
    assert verdict_of(table, "quiet-slow") == "same"


def test_false_alarms_of_unchanged_synthetic_checks_stay_below_alpha() -> None:
    """200 comparisons of unchanged synthetic data (the model's own assumptions hold), with a
    minimum effect too small to matter: the share with any regression stays below alpha
    (Bonferroni over 30 cases and Student's t for the estimated spread: conservative)."""
    many = {f"case{i}": (100.0, 0.02, "lower") for i in range(30)}
    alarms = 0
    for seed in range(200):
        base = synthetic(many, runs=5, seed=1000 + seed, iters=10)
        cand = synthetic(many, runs=1, seed=5000 + seed, iters=10)
        table = compare(base, cand, alpha=0.05, min_effect=0.001)
        alarms += bool((table["verdict"] == "regression").any())
    assert alarms <= 10, alarms  # alpha 0.05: at most 10 of 200; 3 with these seeds


def test_wrong_throttled_missing_and_new_cases() -> None:
    base = synthetic(CASES, runs=3, seed=8)
    cand = synthetic(CASES, runs=1, seed=9)
    values = cand.values.copy()
    values.loc[values["case"] == "quiet-fast", "nwrong"] = 3.0
    values.loc[values["case"] == "quiet-slow", "throttled"] = True
    values = values[values["case"] != "noisy"]
    extra = values.iloc[[0]].assign(key=case_key({"case": "added"}), case="added", nwrong=0.0)
    table = compare(base, Measured(pd.concat([values, extra]), cand.samples))
    assert verdict_of(table, "quiet-fast") == "wrong"
    assert verdict_of(table, "quiet-slow") == "untrusted"
    assert verdict_of(table, "noisy") == "missing"
    assert verdict_of(table, "added") == "new"
    side = lambda m: Side(label="x", measured=m, fingerprint=FP, runs=[{"status": "complete"}])  # noqa: E731
    result = run_check(side(base), side(Measured(pd.concat([values, extra]), cand.samples)))
    assert result.exit_code == 1
    # a throttled baseline makes a throttled candidate comparable again
    throttled_base = base.values.assign(throttled=True)
    table = compare(Measured(throttled_base, base.samples), Measured(values, cand.samples))
    assert verdict_of(table, "quiet-slow") != "untrusted"


def test_environment_mismatch_and_partial_candidate() -> None:
    base = synthetic(CASES, runs=3, seed=10)
    cand = synthetic(CASES, runs=1, seed=11)

    def side(fp: dict[str, object], status: str = "complete") -> Side:
        return Side(label="x", measured=cand, fingerprint=fp, runs=[{"status": status}])

    baseline = Side(label="b", measured=base, fingerprint=FP, runs=[])
    with pytest.raises(UsageError, match=r"gpus_per_node 2 != 1"):
        run_check(baseline, side({**FP, "gpus_per_node": 1, "world_size": 1}))
    with pytest.raises(UsageError, match="device cpu != cuda"):
        run_check(baseline, side({**FP, "device": "cuda"}))
    allowed = run_check(baseline, side({**FP, "device": "cuda"}), allow_mismatch=True)
    assert any("device" in n for n in allowed.notes)
    newer = run_check(baseline, side({**FP, "versions": {**FP["versions"], "torch": "2.14"}}))
    assert any("torch 2.13.0 != 2.14" in n for n in newer.notes)
    assert run_check(baseline, side(FP, status="partial")).exit_code == 3
    # another suite is another plan: its budgets make its numbers incomparable (exit 2)
    with pytest.raises(UsageError, match="suite ci != quick"):
        run_check(baseline, side({**FP, "suite": "quick"}))


def test_small_baseline_mistakes_say_what_is_wrong(tmp_path: Path, gp: Gp) -> None:
    """A missing baseline file is named as one; the same run twice is refused; `-o` into a
    folder that does not exist yet creates it."""
    missing = gp("check", "--baseline", str(tmp_path / "nope.json"), "--run", "latest")
    assert missing.code == 2 and "no baseline file" in missing.err and "no run" not in missing.err
    run = tmp_path / "runs" / "0001_x"
    shutil.copytree(Path(__file__).parent / "data" / "p2p-mesh-slow-link", run)
    twice = gp("baseline", str(run), str(run), "-o", str(tmp_path / "b.json"))
    assert twice.code == 2 and "given twice" in twice.err
    assert not (tmp_path / "b.json").exists()
    made = gp("baseline", str(run), "-o", str(tmp_path / "perf" / "x.json"))
    assert made.code == 0, made.err
    assert (tmp_path / "perf" / "x.json").is_file()


def test_baseline_file_round_trip(tmp_path: Path) -> None:
    base = synthetic(CASES, runs=3, seed=12, iters=40)
    side = Side(label="b", measured=base, fingerprint=FP, runs=[{"status": "complete"}])
    data = baseline_json(side)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))
    back = read_baseline(path)
    assert back.fingerprint == FP
    assert back.measured.num_runs == 3
    merged = back.measured.values.merge(base.values, on=["key", "run"], suffixes=("", "_0"))
    assert np.allclose(merged["value"], merged["value_0"], rtol=1e-5)
    assert len(back.measured.samples) == 3 * 60  # capped per case and metric
    table = compare(back.measured, synthetic(CASES, runs=1, seed=13))
    assert not table["verdict"].isin(["regression"]).any()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=2), "format version 2"),
        (lambda d: d.update(format="other"), "not a gpuprof baseline"),
        (lambda d: d["cases"][0].pop("medians"), "damaged"),
    ],
)
def test_bad_baseline_files_exit_2_with_one_line(
    tmp_path: Path, gp: Gp, change: object, message: str
) -> None:
    side = Side(
        label="b",
        measured=synthetic(CASES, runs=2, seed=14),
        fingerprint=FP,
        runs=[{"status": "complete"}],
    )
    data = baseline_json(side)
    change(data)  # type: ignore[operator]
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))
    result = gp("check", "--baseline", str(path), "--run", str(tmp_path))
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1
    (tmp_path / "garbage.json").write_text("{not json")
    assert gp("check", "--baseline", str(tmp_path / "garbage.json"), "--run", "x").code == 2


def test_junit_and_markdown() -> None:
    base = synthetic(CASES, runs=5, seed=15)
    table = compare(base, synthetic(CASES, runs=1, seed=16, scale={"quiet-slow": 1.5}))
    root = ET.fromstring(verdicts.junit(table, "gpuprof check", ["a note"]))
    cases = root.findall("testcase")
    assert len(cases) == len(table) == int(root.get("tests", "0"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["quiet-slow [time_us]"]
    assert int(root.get("failures", "0")) == 1
    failure = failed[0].find("failure")
    assert failure is not None and "time_us" in failure.get("message", "")
    assert f"{table.loc[table['case'] == 'quiet-slow', 'change_pct'].iloc[0]:+.1f}%" in (
        failure.get("message", "")
    )
    props = {p.get("name"): p.get("value") for p in failed[0].iter("property")}
    assert props["verdict"] == "regression" and float(props["change_pct"]) > 40
    text = verdicts.markdown(table, "t", [], "1 regression")
    assert "| REGRESSION | quiet-slow |" in text


def test_sample_slots_spread_evenly() -> None:
    frame = pd.DataFrame(
        {
            "case_id": ["a"] * 100 + ["b"] * 5,
            "iteration": list(range(100)) + list(range(5)),
        }
    )
    slots = frame.assign(_slot=sample_slots(frame, 20))
    a = slots[(slots["case_id"] == "a") & (slots["_slot"] >= 0)]
    assert sorted(a["_slot"]) == list(range(20))
    assert a["iteration"].iloc[0] == 0 and a["iteration"].iloc[-1] == 99
    b = slots[slots["case_id"] == "b"]
    assert list(b["_slot"]) == [0, 1, 2, 3, 4]


def test_fail_rules_and_outputs_are_checked_before_measuring(tmp_path: Path, gp: Gp) -> None:
    for bad in ("tflops", "nosuch:5", "tflops:-1", "tflops:x"):
        result = gp("check", "--baseline", "b.json", "--fail", bad)
        assert result.code == 2 and "invalid --fail" in result.err
    result = gp("check", "--baseline", "b.json", "--junit", str(tmp_path / "no" / "j.xml"))
    assert result.code == 2 and "cannot write" in result.err
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------
# Real runs: two gloo ranks on CPU.

PLAN = ["--probes", "collectives,compute", "--op", "all_reduce", "--sizes", "64K", "--suite", "ci"]


@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Five baseline runs, and candidates: compute slowed 20x by the fault hook, one with a
    rank that corrupts its inputs, and one with one rank. Five, not three: a check's threshold
    is Student's t on the baseline's between-run spread, and with three runs (2 degrees of
    freedom) one run in a slow spell of a busy CI machine (matmul 46.5 ms against 23.5 and
    24.8) made the threshold about 11x, so a 6x slowdown was inconclusive. With five runs, one
    run 4x slow gives a threshold of about 8x; 20x stays beyond it."""
    import os

    from gpuprof.cli import main

    out = tmp_path_factory.mktemp("gate")

    def sweep(folder: str, *extra: str, gpus: int = 2, env: dict[str, str] | None = None) -> Path:
        saved = dict(os.environ)
        os.environ.update(env or {})
        try:
            args = [
                "sweep",
                "--device",
                "cpu",
                "--gpus",
                str(gpus),
                "--out",
                str(out / folder),
                "--no-report",
                "--no-telemetry",
                *PLAN,
                *extra,
            ]
            main(args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return sorted(p for p in (out / folder).iterdir() if p.is_dir())[-1]

    runs = {"base": sweep("base", "--repeats", "5").parent}
    runs["slow"] = sweep("slow", env={"GPUPROF_FAULT_SLOW": "20:compute/*"})
    runs["wrong"] = sweep("wrong", env={"GPUPROF_FAULT_RANK": "1"})
    runs["one"] = sweep("one", gpus=1)
    runs["out"] = out
    return runs


@pytest.mark.slow
def test_check_on_real_runs(gate_runs: dict[str, Path], gp: Gp, tmp_path: Path) -> None:
    base_runs = sorted(p for p in gate_runs["base"].iterdir() if p.is_dir())
    assert len(base_runs) == 5
    base_file = tmp_path / "base.json"
    made = gp("baseline", *map(str, base_runs), "-o", str(base_file), "--format", "json")
    assert made.code == 0, made.err
    assert json.loads(made.out)["runs"] == 5 and json.loads(made.out)["case_metrics"] > 0
    assert base_file.stat().st_size < 100_000
    steps = json.loads(gp("trend", *map(str, base_runs), "--format", "json").out)
    assert steps["runs"] == [p.name for p in base_runs] and isinstance(steps["steps"], list)

    # a run the baseline holds is within its own spread by construction: nothing named (exit
    # 0; 4 where a noisy case moved beyond the minimum effect but within its noise: undecided)
    same = gp("check", "--baseline", str(base_file), "--run", str(base_runs[0]), "--format", "json")
    judged = json.loads(same.out)
    undecided = [c["case"] for c in judged["cases"] if c["verdict"] == "inconclusive"]
    assert same.code == (4 if undecided else 0), same.out
    assert not any(c["verdict"] == "regression" for c in judged["cases"])

    # compute slowed 20x (gate_runs says why so much): exit 1, the compute cases named, nothing else
    # (busbw's own minimum effect of 900% keeps this busy machine's noise out of the unslowed
    # all_reduce, which moved by 4x between two baseline runs here once)
    junit = tmp_path / "check.xml"
    slow = gp(
        "check",
        "--baseline",
        str(base_file),
        "--run",
        str(gate_runs["slow"]),
        "--fail",
        "busbw_gbps:900",
        "--junit",
        str(junit),
        "--format",
        "json",
    )
    assert slow.code == 1, slow.out
    cases = json.loads(slow.out)["cases"]
    flagged = sorted(c["case"] for c in cases if c["verdict"] == "regression")
    assert flagged == ["compute rank=0 alone float32 n=1024", "compute rank=1 alone float32 n=1024"]
    root = ET.parse(junit).getroot()
    failed = sorted(c.get("name") for c in root.iter("testcase") if c.find("failure") is not None)
    assert failed == [f"{c} [tflops]" for c in flagged]

    # wrong elements are a failure whatever the timing says
    wrong = gp(
        "check",
        "--baseline",
        str(base_file),
        "--run",
        str(gate_runs["wrong"]),
        "--min-effect",
        "40",
        "--format",
        "json",
    )
    assert wrong.code == 1
    assert any(c["verdict"] == "wrong" for c in json.loads(wrong.out)["cases"])

    # one rank instead of two: exit 2, naming the difference
    one = gp("check", "--baseline", str(base_file), "--run", str(gate_runs["one"]))
    assert one.code == 2 and "gpus_per_node 2 != 1" in one.err

    # a partial run: exit 3 (its run.json says it did not complete)
    partial = tmp_path / "partial"
    shutil.copytree(base_runs[1], partial)
    info = json.loads((partial / "run.json").read_text())
    (partial / "run.json").write_text(json.dumps({**info, "status": "partial"}))
    assert gp("check", "--baseline", str(base_file), "--run", str(partial)).code == 3

    # compare and trend pages
    page = tmp_path / "compare.html"
    cmp = gp("compare", str(base_file), str(gate_runs["slow"]), "-o", str(page))
    assert cmp.code == 0 and page.stat().st_size > 100_000
    trend_page = tmp_path / "trend.html"
    for i, run in enumerate([*base_runs, gate_runs["slow"]]):
        shutil.copytree(run, tmp_path / "artifacts" / f"commit{i}")
    # judged against the baseline as the check above was: without one, a noise step in the
    # all_reduce case at an earlier run restarts the window, and on a loaded machine the last
    # run was then judged against two runs only (t at 1 degree of freedom)
    tr = gp("trend", str(tmp_path / "artifacts"), "--baseline", str(base_file), "--min-effect",
            "40", "-o", str(trend_page))  # fmt: skip
    assert tr.code == 0, tr.err
    assert "compute rank=0 alone float32 n=1024" in tr.out and trend_page.exists()


@pytest.mark.gloo("memory")
def test_host_copies_are_judged_against_their_canary(
    tmp_path: Path, gp: Gp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real runs of the memory probe on 2 gloo ranks. The fault hook slowing the host copies
    and their canaries alike (the host's memory got slower: "*memory/*") is the machine, told
    as the canary's shift, and no case regresses; slowing the copies alone ("memory/*", as a
    slower copy kernel would) names both. 3x, 21 iterations and a minimum effect of 50%: on
    a busy 2-core machine a run of 5 iterations had 2 of them 4-8x slow (median -53%), against
    a baseline whose 5 runs, measured in a quiet minute, differed by 1%."""
    plan = ["--probes", "memory", "--copy-bytes", "8M", "--budget-ms", "100", "--min-iters", "21",
            "--concurrency", "alone"]  # fmt: skip
    common = ["--device", "cpu", "--gpus", "2", "--no-report", "--no-telemetry", *plan]

    def sweep(folder: str, *extra: str, slow: str | None = None) -> list[Path]:
        with monkeypatch.context() as patch:
            if slow:
                patch.setenv("GPUPROF_FAULT_SLOW", slow)
            done = gp("sweep", *common, "--out", str(tmp_path / folder), *extra)
        assert done.code == 0, done.err
        return sorted(p for p in (tmp_path / folder).iterdir() if p.is_dir())

    base_file = tmp_path / "base.json"
    made = gp("baseline", *map(str, sweep("base", "--repeats", "5")), "-o", str(base_file))
    assert made.code == 0, made.err

    def check(run: Path) -> tuple[int, dict[str, Any]]:
        args = ["--run", str(run), "--min-effect", "50", "--format", "json"]
        done = gp("check", "--baseline", str(base_file), *args)
        assert done.code in (0, 1), done.err
        return done.code, json.loads(done.out)

    code, drift = check(sweep("drift", slow="3:*memory/*")[-1])
    assert code == 0, drift["notes"]
    (shift,) = drift["machine"]["canaries"]
    assert shift["verdict"] == "slower" and shift["factor_pct"] > 100 and shift["cases"] == 2
    assert not drift["machine"]["estimated"]  # one probe: no machine-wide factor
    assert not any(c["verdict"] == "regression" for c in drift["cases"])

    code, slower = check(sweep("copy", slow="3:memory/*")[-1])
    assert code == 1, slower["notes"]
    named = sorted(c["case"] for c in slower["cases"] if c["verdict"] == "regression")
    assert named == ["memory rank=0 alone host_copy 8 MiB", "memory rank=1 alone host_copy 8 MiB"]
    # the canaries were not slowed: no shift like the copies' 3x (+200%). On a busy host they
    # may still move past the 50% minimum effect (a rehearsal on a slow afternoon: +73%,
    # verdict "slower"), which the check reports as the machine's, and names the copies anyway
    canary = slower["machine"]["canaries"][0]
    assert canary["verdict"] == "same" or canary["factor_pct"] < 100, canary


@pytest.mark.slow
def test_check_measures_with_the_baselines_plan(
    gate_runs: dict[str, Path], gp: Gp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_runs = sorted(p for p in gate_runs["base"].iterdir() if p.is_dir())
    base_file = tmp_path / "base.json"
    assert gp("baseline", *map(str, base_runs), "-o", str(base_file)).code == 0
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # a minimum effect of 900%: this test is about what is measured and written, not verdicts
    result = gp(
        "check",
        "--baseline",
        str(base_file),
        "--out",
        str(tmp_path / "runs"),
        "--min-effect",
        "900",
        "--markdown",
        str(tmp_path / "check.md"),
    )
    assert result.code == 0, result.out + result.err
    made = sorted((tmp_path / "runs").iterdir())
    assert len(made) == 2  # two runs by default, each its own launch
    plan = json.loads((made[0] / "plan.json").read_text())
    assert plan["suite"] == "ci" and plan["probes"] == ["collectives", "compute"]
    assert summary.read_text() == (tmp_path / "check.md").read_text()
    assert "gpuprof check" in summary.read_text()


def test_fault_hook_dilates_the_timed_clock_by_its_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes._timing import _time_cpu, slowdown_for, stretched

    def op() -> None:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    # the op busy-waits 2 ms of wall time, which a busy machine can only lengthen (a rank
    # descheduled in the middle): the shortest of interleaved tries is the op itself, on both
    # sides (medians of one block each once came out 4.4x apart on a loaded machine)
    slowed, plain = [], []
    for _ in range(10):
        with stretched(1.5):
            slowed += _time_cpu(op, 1)
        plain += _time_cpu(op, 1)
    assert min(slowed) / min(plain) == pytest.approx(1.5, rel=0.1)
    monkeypatch.setenv("GPUPROF_FAULT_SLOW", "1.2:compute/*")
    assert slowdown_for("compute", "matmul.float32.1024") == 1.2
    assert slowdown_for("memory", "host_copy") == 1.0
    monkeypatch.setenv("GPUPROF_FAULT_SLOW", "0.5")
    with pytest.raises(ValueError, match="factor must be"):
        slowdown_for("compute", "x")


def test_a_canary_runs_between_the_iterations_with_its_own_fault_factor() -> None:
    """`time_interleaved` alternates the case and its canary: the case timed by the dilated
    clock (the case's factor), the canary by the real one times its own factor. Busy-waits
    of 2 and 1 ms; the shortest of each, as a busy machine can only lengthen them."""
    from gpuprof.probes._canary import HostCopyCanary, MatmulCanary
    from gpuprof.probes._timing import stretched, time_interleaved

    order: list[str] = []

    def wait(ms: float, name: str) -> Callable[[], None]:
        def op() -> None:
            order.append(name)
            end = time.perf_counter() + ms / 1e3
            while time.perf_counter() < end:
                pass

        return op

    with stretched(1.5):
        times, canary = time_interleaved(wait(2, "case"), wait(1, "canary"), 8, 3.0)
    assert order == ["case", "canary"] * 8 and len(times) == len(canary) == 8
    assert min(times) == pytest.approx(3000, rel=0.1)  # 2 ms x 1.5, in us
    assert min(canary) == pytest.approx(3000, rel=0.1)  # 1 ms x 3
    # each canary's value counts its work as the case does: 2 n^3 FLOP, read plus written
    assert MatmulCanary(64).value([2.0, 1.0, 3.0]) == pytest.approx(2 * 64**3 / 2.0 / 1e6)
    assert HostCopyCanary(1000).value([1.0, 4.0, 2.0]) == pytest.approx(2 * 1000 / 2.0 / 1e3)
    copy = HostCopyCanary(1 << 20)  # and does it: every byte of its source copied
    copy.dst[...] = 0
    copy.run()
    assert (copy.dst == 7).all() and copy.src.ctypes.data != copy.dst.ctypes.data


def test_a_baseline_too_noisy_to_see_a_20_percent_change_says_so() -> None:
    """A baseline measured on a busy machine (a case whose runs differ by about 12%) cannot
    call a 20% regression of that case: the check says so, naming the case and what it would
    take; a quiet baseline gets no such note."""
    from gpuprof.gate.check import blind_spots

    cases = {**CASES, "noisy": (10.0, 0.12, "lower")}
    noisy = compare(synthetic(cases, runs=8, seed=8), synthetic(cases, runs=1, seed=9))
    assert noisy.set_index("case").loc["noisy", "threshold_pct"] > 20
    notes = blind_spots(noisy)
    assert len(notes) == 1 and notes[0].startswith("blind spots: 1 of 3 case-metrics")
    assert "noisy [time_us] needs" in notes[0] and "quiet runner" in notes[0]
    quiet = {k: v for k, v in CASES.items() if k != "noisy"}
    assert blind_spots(compare(synthetic(quiet, runs=8, seed=8), synthetic(quiet, 1, 9))) == []
    # a minimum effect of its own above the threshold is what the user asked for
    loose = compare(synthetic(cases, runs=8, seed=8), synthetic(cases, 1, 9), min_effect=0.9)
    assert blind_spots(loose) == []


def _ranked(spreads: dict[tuple[int, int], list[float]]) -> Measured:
    """Host copies keyed by (rank, size) with these per-run medians."""
    values = [
        {
            "probe": "memory",
            "metric": "bandwidth_gbps",
            "better": "higher",
            "key": case_key({"kind": "host_copy", "rank": rank, "size_bytes": size}),
            "case": f"memory rank={rank} host_copy {size}",
            "run": run,
            "value": value,
            "throttled": False,
            "nwrong": 0.0,
        }
        for (rank, size), medians in spreads.items()
        for run, value in enumerate(medians)
    ]
    return Measured(
        values=pd.DataFrame(values, columns=VALUE_COLUMNS),
        samples=pd.DataFrame([], columns=SAMPLE_COLUMNS),
    )


def test_ranks_of_one_case_share_their_spread() -> None:
    """Two ranks run the same host copy; in the baseline's 10 runs rank 0's agreed by luck and
    rank 1 had two slow ones: both are judged on their pooled spread (rank 0's own would make
    a threshold at the minimum effect), each against its own median. Copies of two sizes on
    one rank are not replicates: each keeps its own spread."""
    quiet = [20.0, 20.1, 19.9, 20.0, 20.2, 19.8, 20.0, 20.1, 19.9, 20.0]
    slow_twice = [20.0, 20.3, 19.7, 14.5, 20.1, 19.9, 20.2, 15.0, 19.8, 20.0]
    base = _ranked({(0, 1): quiet, (1, 1): [v * 1.1 for v in slow_twice]})
    table = compare(base, _ranked({(0, 1): [18.4], (1, 1): [22.0 * 0.92]})).set_index("case")
    pooled = table.loc["memory rank=0 host_copy 1", "threshold_pct"]
    assert pooled == pytest.approx(table.loc["memory rank=1 host_copy 1", "threshold_pct"])
    assert pooled > 15
    # 8% slower on both: the copy whose own runs agreed by luck is not named, nor its twin
    assert set(table["verdict"]) == {"inconclusive"}
    sizes = _ranked({(0, 1): quiet, (0, 2): slow_twice})
    table = compare(sizes, _ranked({(0, 1): [18.4], (0, 2): [18.4]})).set_index("case")
    assert table.loc["memory rank=0 host_copy 1", "threshold_pct"] == pytest.approx(
        100 * (1 - 1 / 1.05)  # its own 0.5% spread: the minimum effect
    )
    assert table.loc["memory rank=0 host_copy 1", "verdict"] == "regression"
    assert table.loc["memory rank=0 host_copy 2", "threshold_pct"] > 15


def _trend_steps(scales: list[dict[str, float]], seed: int = 7) -> list[set[str]]:
    """The cases that step at each run of a trend of runs made with these scales."""
    from gpuprof.gate.trend import trend_points

    cases = {"quiet-fast": (100.0, 0.01, "higher"), "quiet-slow": (50.0, 0.01, "lower")}
    sides = [
        Side(label=f"r{i}", measured=synthetic(cases, runs=1, seed=seed + i, scale=scale),
             fingerprint=FP, runs=[{"status": "complete"}])
        for i, scale in enumerate(scales)
    ]  # fmt: skip
    return [set(p.steps["case"]) if len(p.steps) else set() for p in trend_points(sides, None)]


def test_a_trend_finds_a_step_right_after_another() -> None:
    """A step (one case 20% faster at run 3: on a noisy runner, noise can do that) hid a 5x
    slowdown at the next run, of that case and of every other: each case kept the level of
    the last step of any case, and one run at a level says nothing about the noise. Now each
    case has its own level, and right after its step it is judged across the step."""
    flat: dict[str, float] = {}
    quicker = {"quiet-fast": 1.2}
    slow = {"quiet-fast": 1 / 5, "quiet-slow": 5.0}
    assert _trend_steps([flat, flat, flat, quicker, slow]) == [
        set(), set(), set(), {"quiet-fast"}, {"quiet-fast", "quiet-slow"}
    ]  # fmt: skip
    # a step is found once: the run after it, at the same new level, is no second step
    assert _trend_steps([flat, flat, flat, quicker, quicker, quicker]) == [
        set(), set(), set(), {"quiet-fast"}, set(), set()
    ]  # fmt: skip


def _runs(count: int, start: str, step_s: float) -> list[dict[str, Any]]:
    """Run entries of a side, measured `step_s` apart from `start`."""
    t0 = pd.Timestamp(start)
    return [
        {
            "run_id": f"{i + 1:04d}_r",
            "path": f"/runs/{start}/{i}",
            "created_utc": (t0 + pd.Timedelta(seconds=i * step_s)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "status": "complete",
        }
        for i in range(count)
    ]


def test_extending_a_baseline_keeps_every_run_and_weighs_them_alike(tmp_path: Path) -> None:
    """A baseline file extended with runs of another window holds all the runs (their medians
    in order); its capped iteration sample is stretched back to its runs' count before the new
    runs' samples join, so 5 old runs weigh 5/7 of the pooled sample, not 60 values against
    2 x 30; it refuses other software and runs it already holds."""
    from gpuprof.gate.baseline import extended

    old_m = synthetic(CASES, runs=5, seed=21, iters=30)
    path = tmp_path / "base.json"
    old = Side(label="b", measured=old_m, fingerprint=FP, runs=_runs(5, "2026-11-20T00:00", 30))
    path.write_text(json.dumps(baseline_json(old)))
    slower = {"quiet-slow": 1.3}  # the new window's runs, apart
    new_m = synthetic(CASES, runs=2, seed=22, scale=slower, iters=30)
    new = Side(label="n", measured=new_m, fingerprint=FP, runs=_runs(2, "2026-11-21T00:00", 30))
    both = extended(read_baseline(path), new)
    assert both.measured.num_runs == 7 and len(both.runs) == 7
    assert both.span_s == pytest.approx(86400 + 30)
    values = both.measured.values
    quiet = values[values["case"] == "quiet-slow"].sort_values("run")["value"].to_numpy()
    assert np.all(quiet[5:] > 1.2 * np.median(quiet[:5]))  # the new runs, as runs 5 and 6
    samples = both.measured.samples
    key = case_key({"case": "quiet-slow"})
    mine = samples[samples["key"] == key]["value"].to_numpy()
    assert len(mine) == 5 * SAMPLE_SLOTS + 2 * 30
    assert np.mean(mine > 1.15 * 50) == pytest.approx(60 / 160, abs=0.02)
    # written and read again: what a check of the next night reads
    again = tmp_path / "again.json"
    again.write_text(json.dumps(baseline_json(both)))
    assert read_baseline(again).measured.num_runs == 7
    newer = {**FP, "versions": {**FP["versions"], "torch": "2.14"}}
    with pytest.raises(UsageError, match=r"torch 2\.13\.0 != 2\.14"):
        extended(read_baseline(path), Side("n", new_m, newer, _runs(2, "2026-11-21T00:00", 30)))
    with pytest.raises(UsageError, match="already in baseline"):
        extended(read_baseline(path), old)


def test_a_regression_named_against_a_one_window_baseline_says_so() -> None:
    """Where a case is named, the check says when the baseline's runs were all measured within
    20 minutes (its thresholds cannot know the hour-to-hour drift); a baseline gathered over a
    day, or a check that names nothing, gets no such note."""
    base = synthetic(CASES, runs=6, seed=31)
    cand = Side("c", synthetic(CASES, runs=2, seed=32, scale={"quiet-slow": 1.3}), FP, [])
    same = Side("c", synthetic(CASES, runs=2, seed=32), FP, [])

    def notes(runs: list[dict[str, Any]], candidate: Side) -> list[str]:
        baseline = Side("b", base, FP, runs)
        result = run_check(baseline, candidate, machine=False)
        return [n for n in result.notes if "measured within" in n]

    window = _runs(6, "2026-11-20T00:00", 30)  # 2.5 minutes
    found = notes(window, cand)
    assert len(found) == 1 and "6 runs were measured within 2 min" in found[0]
    assert "--extend" in found[0] and "--reference-python" in found[0]
    assert notes(_runs(6, "2026-11-20T00:00", 4 * 3600), cand) == []
    assert notes(window, same) == []


def test_baseline_extend_on_the_command_line(tmp_path: Path, gp: Gp) -> None:
    """`gpuprof baseline RUN --extend FILE -o FILE` adds a run of another window and says
    over how long the runs were measured; a run the file holds, or a missing file, exits 2 and
    leaves the file as it was."""
    data = Path(__file__).parent / "data" / "p2p-mesh-slow-link"
    first, later = tmp_path / "runs" / "0001_a", tmp_path / "runs" / "0002_b"
    shutil.copytree(data, first)
    shutil.copytree(data, later)
    info = json.loads((later / "run.json").read_text())
    info.update(run_id="0002_b", created_utc="2026-11-23T06:42:31Z")  # 12 hours later
    (later / "run.json").write_text(json.dumps(info))
    base = tmp_path / "perf" / "base.json"
    made = gp("baseline", str(first), "-o", str(base))
    assert made.code == 0 and "one run" in made.out, made.err
    before = base.read_bytes()
    twice = gp("baseline", str(first), "--extend", str(base), "-o", str(base))
    assert twice.code == 2 and "already in baseline" in twice.err
    missing = gp("baseline", str(later), "--extend", str(tmp_path / "no.json"), "-o", str(base))
    assert missing.code == 2 and "no baseline file" in missing.err
    assert base.read_bytes() == before
    grown = gp("baseline", str(later), "--extend", str(base), "-o", str(base))
    assert grown.code == 0, grown.err
    assert "from 2 run(s) measured over 12.0 h" in grown.out and "one window" not in grown.out
    assert read_baseline(base).measured.num_runs == 2


def test_a_baseline_from_before_concurrency_meets_the_alone_cases(tmp_path: Path) -> None:
    """Memory and compute cases gained a `concurrency` key (alone, together); a baseline made
    before kept keys without it, from cases that ran alone: read back, its cases are the
    new runs' alone cases, not cases of their own."""
    from gpuprof import open_run
    from gpuprof.gate.sides import side_of_runs

    run_dir = tmp_path / "0001_ci"
    shutil.copytree(Path(__file__).parent / "data" / "h100-80gb-hbm3", run_dir)
    side = side_of_runs([open_run(run_dir)])
    data = baseline_json(side)
    ceilings = [c for c in data["cases"] if c["probe"] in ("memory", "compute")]
    assert ceilings and all(c["key"]["concurrency"] == "alone" for c in ceilings)
    for case in ceilings:
        del case["key"]["concurrency"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert set(read_baseline(old).measured.values["key"]) == set(side.measured.values["key"])


def test_undecided_cases_exit_4_unless_passed_knowingly() -> None:
    """Inconclusive is its own outcome: exit 4 where nothing failed, 0 only when asked (and
    said); a failure (1) or a run that could not measure (3) keeps its code."""
    base = synthetic(CASES, runs=5, seed=1)
    table = compare(base, synthetic(CASES, runs=1, seed=3, scale={"noisy": 1.2}))
    assert verdict_of(table, "noisy") == "inconclusive"
    assert not table["verdict"].isin(["regression", "improvement"]).any()
    code, notes = verdicts.undecided_exit(table, 0, "error")
    assert code == verdicts.UNDECIDED_EXIT == 4 and "noisy" in notes[0] and "exit 4" in notes[0]
    code, notes = verdicts.undecided_exit(table, 0, "pass")
    assert code == 0 and "--on-inconclusive pass" in notes[0]
    assert verdicts.undecided_exit(table, 1, "error") == (1, [])
    assert verdicts.undecided_exit(table, 3, "error") == (3, [])
    decided = table[table["verdict"] != "inconclusive"]
    assert verdicts.undecided_exit(decided, 0, "error") == (0, [])

    root = ET.fromstring(verdicts.junit(table, "gpuprof check", []))
    errored = [c.get("name") for c in root.iter("testcase") if c.find("error") is not None]
    assert errored == ["noisy [time_us]"] and root.get("errors") == "1"
    assert root.get("failures") == "0" and root.get("skipped") == "0"
    root = ET.fromstring(verdicts.junit(table, "gpuprof check", [], on_inconclusive="pass"))
    skipped = [c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None]
    assert skipped == ["noisy [time_us]"] and root.get("errors") == "0"
    assert root.get("skipped") == "1"


def test_check_exits_4_on_an_undecided_case(
    tmp_path: Path, gp: Gp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command: a stored check whose only moved case cannot be told from its noise exits
    4 and says so (terminal, JSON and JUnit); --on-inconclusive pass exits 0, saying so."""
    from gpuprof.gate import baseline, sides
    from gpuprof.runs import store

    complete = [{"status": "complete"}]
    base = Side(label="base", measured=synthetic(CASES, 5, 1), fingerprint=FP, runs=complete)
    cand = synthetic(CASES, runs=1, seed=3, scale={"noisy": 1.2})
    monkeypatch.setattr(baseline, "open_side", lambda spec, out: base)
    monkeypatch.setattr(store, "open_run", lambda spec, out: spec)
    monkeypatch.setattr(
        sides,
        "side_of_runs",
        lambda runs: Side(label="cand", measured=cand, fingerprint=FP, runs=complete),
    )
    junit = tmp_path / "check.xml"
    args = ["check", "--baseline", "b.json", "--run", "r", "--junit", str(junit)]
    result = gp(*args)
    assert result.code == 4, result.out
    assert "could not decide (exit 4)" in result.out and "noisy" in result.out
    assert ET.parse(junit).getroot().get("errors") == "1"
    as_json = json.loads(gp(*args, "--format", "json").out)
    assert as_json["exit_code"] == 4 and any("exit 4" in n for n in as_json["notes"])
    passed = gp(*args, "--on-inconclusive", "pass")
    assert passed.code == 0 and "passed, as --on-inconclusive pass asks" in passed.out
    assert ET.parse(junit).getroot().get("skipped") == "1"
