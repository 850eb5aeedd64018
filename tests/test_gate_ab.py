"""The A/B check (same-window pairs, sequential decisions) and the stored check's machine
factor: simulated on synthetic data with known effects, and end to end on gloo ranks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuprof.analysis.measured import SAMPLE_COLUMNS, VALUE_COLUMNS, Measured
from gpuprof.gate.machine import machine_factor
from gpuprof.gate.paired import balanced_order, finished, judge
from gpuprof.gate.stats import compare
from tests.conftest import Gp

ALPHA, DELTA = 0.05, 0.05
# the noise of this machine's ci suite, per pair of launches (log scale): collectives' gloo
# cases 10-20%, the rest 2-6% (tests/test_gate_ab.py's figures, measured with gpuprof check)
NOISE = {"collectives": (9, 0.14), "memory": (2, 0.035), "compute": (2, 0.02), "ddp": (8, 0.04)}


def _table(d: np.ndarray, probes: list[str]) -> pd.DataFrame:
    """A paired-log table of lower-is-better cases with pair log ratios `d` (cases x pairs)."""
    return pd.DataFrame(
        {
            "probe": probes,
            "metric": "time_us",
            "better": "lower",
            "key": [json.dumps({"case": i}) for i in range(len(probes))],
            "case": [f"case {i}" for i in range(len(probes))],
            "a": [list(np.ones(d.shape[1])) for _ in probes],
            "b": [list(np.exp(row)) for row in d],
            "d": [list(row) for row in d],
            "wrong": False,
            "slowed_a": False,
            "slowed_b": False,
        }
    )


SHARED = 0.8  # share of a case's noise variance its probe's other cases have in the same launch


def simulate(
    effects: np.ndarray, rng: np.random.Generator, max_pairs: int = 4, min_pairs: int = 3
) -> pd.DataFrame:
    """One sequential check on synthetic pairs: noise per probe as measured here, most of it
    shared by the probe's cases within a launch (a launch moves all its cases together),
    `effects` the true log slowdown of each case; pairs added until the check may stop."""
    probes = [p for p, (count, _) in NOISE.items() for _ in range(count)]
    sd = np.array([NOISE[p][1] for p in probes])
    index = {p: i for i, p in enumerate(NOISE)}
    d = np.empty((len(probes), 0))
    for n in range(1, max_pairs + 1):
        shared = rng.normal(size=len(NOISE))[[index[p] for p in probes]]
        own = rng.normal(size=len(probes))
        noise = math.sqrt(SHARED) * shared + math.sqrt(1 - SHARED) * own
        d = np.column_stack([d, effects + sd * noise])
        table = judge(_table(d, probes), min_effect=DELTA, alpha=ALPHA, max_pairs=max_pairs)
        if finished(table, n, min_pairs, max_pairs):
            return table
    raise AssertionError("unreachable")


# the A/B check's default on CPU: one rank; memory, compute and DDP samples/s, each judged
# on its primary metric; d per pair spread as measured on this machine with one thread a rank
# (benchmarks/results/gate_history.md, 2026-11-28), with heavier tails than normal (a launch
# now and then 1.5x slower): Student's t with 4 degrees of freedom, scaled to the spread
ONE_RANK = {"memory": 0.06, "compute": 0.03, "ddp": 0.08}
BUDGET_PAIRS = 8  # about 180 s of pairs of 10-11 s launches


def simulate_one_rank(effects: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """One sequential check of the CPU default, stopping as the check does."""
    probes = list(ONE_RANK)
    sd = np.array(list(ONE_RANK.values())) / math.sqrt(2)  # t(4) has variance 2
    d = np.empty((len(probes), 0))
    for n in range(1, BUDGET_PAIRS + 1):
        d = np.column_stack([d, effects + sd * rng.standard_t(4, size=len(probes))])
        table = judge(_table(d, probes), min_effect=DELTA, alpha=ALPHA, max_pairs=BUDGET_PAIRS)
        if finished(table, n, 3, BUDGET_PAIRS):
            return table
    raise AssertionError("unreachable")


@pytest.mark.slow  # about 60 s of simulated checks on 2 cores: with the slow tests, in CI
def test_sequential_false_alarms_stay_under_alpha_and_the_power_at_1_2x() -> None:
    """1000 unchanged checks, stopping as the check does: a false alarm (any regression) in
    at most alpha of them, and most pass. Compute 1.20x slower: named, alone, in nearly all;
    at exactly the 10% pass margin, the rate at which the check passes it (its looks after
    every pair could make it more than alpha; at compute's spread it is less)."""
    rng = np.random.default_rng(2026)
    same = [simulate_one_rank(np.zeros(3), rng)["verdict"] for _ in range(1000)]
    alarms = sum((v == "regression").any() for v in same)
    assert alarms / 1000 <= ALPHA / 5, alarms  # what the simulation gives: none
    passed = sum((v == "same").all() for v in same)
    assert passed / 1000 >= 0.9, passed  # what the simulation gives: 937
    slowed = np.array([0.0, math.log(1.2), 0.0])
    named = [simulate_one_rank(slowed, rng)["verdict"].tolist() for _ in range(300)]
    exact = sum(v[1] == "regression" and "regression" not in (v[0], v[2]) for v in named)
    assert exact / 300 >= 0.95, exact  # what the simulation gives: 297
    margin = np.array([0.0, math.log(1.1), 0.0])
    at_margin = [simulate_one_rank(margin, rng)["verdict"].iloc[1] for _ in range(300)]
    assert sum(v == "same" for v in at_margin) / 300 <= 0.1  # the simulation gives: 7 (2%)
    assert sum(v == "regression" for v in at_margin) / 300 >= 0.8  # it gives: 279


@pytest.mark.slow  # 59 s of simulated checks on 2 cores: with the slow tests, still in CI
def test_two_pairs_do_not_buy_the_pools_degrees_of_freedom() -> None:
    """Stopped at 2 pairs, a case's pool shares its launches, so it may not count for more
    than the case's one degree of freedom: unchanged checks stay quiet (with the pool at full
    weight, 3% of them named a regression)."""
    rng = np.random.default_rng(11)
    size = sum(count for count, _ in NOISE.values())
    checks = [simulate(np.zeros(size), rng, max_pairs=2, min_pairs=2) for _ in range(1000)]
    alarms = sum((t["verdict"] == "regression").any() for t in checks)
    assert alarms / 1000 <= 0.01, alarms
    assert all(t["pairs"].max() == 2 for t in checks)


def test_a_clear_change_stops_early_and_noise_stays_undecided() -> None:
    d = np.array([[0.40, 0.41, 0.42], [0.30, -0.30, 0.25]])  # 1.5x; a case spread over 30%
    table = judge(_table(d, ["ddp", "memory"]), min_effect=DELTA, alpha=ALPHA, max_pairs=4)
    assert table["verdict"].tolist() == ["regression", "undecided"]
    assert table["settled"].tolist() == [True, True]  # the noisy one cannot be decided by 4
    assert table.loc[0, "ratio_lo"] > 1.05
    assert pd.isna(table.loc[1, "pairs_needed"])  # mean 8% +- 33%: not within 200 pairs


def test_the_order_is_balanced_in_blocks_of_two() -> None:
    order = balanced_order(8, seed=3)
    assert all(order[i] == order[i + 1][::-1] for i in range(0, 8, 2))
    assert {order[i] for i in range(0, 8, 2)} == {("A", "B"), ("B", "A")} or len(order) == 8


def _measured(values: dict[tuple[str, int], list[float]]) -> Measured:
    """A measured set of lower-is-better cases: (probe, case) -> one value per run."""
    rows = [
        {"probe": probe, "metric": "time_us", "better": "lower", "key": json.dumps({"c": case}),
         "case": f"{probe} {case}", "run": run, "value": value, "throttled": False,
         "nwrong": 0.0}
        for (probe, case), runs in values.items()
        for run, value in enumerate(runs)
    ]  # fmt: skip
    return Measured(
        values=pd.DataFrame(rows, columns=VALUE_COLUMNS),
        samples=pd.DataFrame(columns=SAMPLE_COLUMNS),
    )


def test_machine_factor_is_removed_and_a_case_regression_stays_visible() -> None:
    """Baseline: 5 runs of 4 probes x 4 cases with 1% noise and a per-run machine drift of up
    to 6%; the candidate runs on a machine 15% slower, and one case is 25% slower on top: the
    factor is found, reported as a shift, and only that case regresses."""
    rng = np.random.default_rng(11)
    cases = [(probe, c) for probe in ("a", "b", "c", "d") for c in range(4)]
    drift = rng.uniform(-0.06, 0.06, 5)
    base = _measured({k: list(100 * np.exp(drift + rng.normal(0, 0.01, 5))) for k in cases})
    cand_values = {k: [100 * 1.15 * math.exp(rng.normal(0, 0.01))] for k in cases}
    cand_values[("c", 2)] = [cand_values[("c", 2)][0] * 1.25]
    cand = _measured(cand_values)
    factor, base_adj, cand_adj = machine_factor(base, cand, min_effect=DELTA, alpha=ALPHA)
    # measured from the baseline's level, which its runs' drift (-6%..+6%) moves a little
    assert 12 < factor.pct < 22 and factor.verdict == "slower"
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    regressed = table.loc[table["verdict"] == "regression", "case"].tolist()
    assert regressed == ["c 2"]
    raw = compare(base, cand, min_effect=DELTA, alpha=ALPHA)  # without removing the factor
    assert (raw["verdict"] == "regression").sum() > 8


def test_a_uniform_slowdown_is_a_machine_shift_not_regressions() -> None:
    rng = np.random.default_rng(5)
    cases = [(probe, c) for probe in ("a", "b", "c") for c in range(3)]
    base = _measured({k: list(100 * np.exp(rng.normal(0, 0.02, 4))) for k in cases})
    cand = _measured({k: [120 * math.exp(rng.normal(0, 0.02))] for k in cases})
    factor, base_adj, cand_adj = machine_factor(base, cand, min_effect=DELTA, alpha=ALPHA)
    assert factor.verdict == "slower" and abs(factor.pct - 20) < 3
    assert "machine shift" in factor.line()
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    assert not (table["verdict"] == "regression").any()


def _with_memory(
    measured: Measured, memory: list[float], canary: list[float] | None, ranks: int = 2
) -> Measured:
    """`measured` plus the host copy cases of `ranks` ranks (GB/s per run) and their canaries
    (None: no canary recorded)."""
    rows = [
        {"probe": "memory", "metric": "bandwidth_gbps", "better": "higher",
         "key": json.dumps({"rank": r}), "case": f"memory rank={r}", "run": run,
         "value": value * (1 + 0.01 * r), "throttled": False, "nwrong": 0.0,
         "canary": math.nan if canary is None else canary[run] * (1 + 0.01 * r)}
        for r in range(ranks)
        for run, value in enumerate(memory)
    ]  # fmt: skip
    values = pd.concat([measured.values, pd.DataFrame(rows, columns=VALUE_COLUMNS)])
    return Measured(values=values.reset_index(drop=True), samples=measured.samples)


def test_a_case_with_a_canary_is_judged_against_it_not_the_machine() -> None:
    """The drift this VM showed: within an hour the host's memory bandwidth fell by a quarter
    while the other cases slowed 10%. The host copies, judged against their canary (a numpy
    copy before each), are unchanged; the canary's shift is its own line; a host copy 1.2x
    slower than its canary is named, alone. Without canaries the drift is "regressions"."""
    rng = np.random.default_rng(21)
    cases = [(probe, c) for probe in ("a", "b", "c") for c in range(3)]
    k = 8
    drift = rng.uniform(-0.04, 0.04, k)  # the baseline's own runs: the host memory moves
    host = 20 * np.exp(drift)
    others = _measured({c: list(100 * np.exp(rng.normal(0, 0.02, k))) for c in cases})
    base = _with_memory(
        others,
        list(host * np.exp(rng.normal(0, 0.02, k))),
        list(host * np.exp(rng.normal(0, 0.02, k))),
    )
    slower = _measured({c: [110 * math.exp(rng.normal(0, 0.02))] for c in cases})
    drifted = _with_memory(slower, [15.0 * math.exp(rng.normal(0, 0.02))], [15.0])
    factor, base_adj, cand_adj = machine_factor(base, drifted, min_effect=DELTA, alpha=ALPHA)
    assert factor.verdict == "slower" and 6 < factor.pct < 14  # from the other cases
    (shift,) = factor.canaries
    assert shift.verdict == "slower" and 25 < shift.pct < 40 and shift.cases == 2
    assert "host memory bandwidth" in shift.line() and "judged against it" in shift.line()
    assert factor.shifted
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    assert not table["verdict"].isin(["regression", "improvement"]).any()

    regressed = _with_memory(slower, [15.0 / 1.2], [15.0])
    factor, base_adj, cand_adj = machine_factor(base, regressed, min_effect=DELTA, alpha=ALPHA)
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    named = sorted(table.loc[table["verdict"] == "regression", "case"])
    assert named == ["memory rank=0", "memory rank=1"]

    blind = _with_memory(slower, [15.0 * math.exp(rng.normal(0, 0.02))], None)
    factor, base_adj, cand_adj = machine_factor(base, blind, min_effect=DELTA, alpha=ALPHA)
    assert factor.canaries == ()  # a side without canaries: the machine-wide factor
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    assert sorted(table.loc[table["verdict"] == "regression", "case"]) == named


def test_a_canary_that_drifts_apart_from_its_case_names_nothing() -> None:
    """What this VM showed for an hour: the numpy copy (the canary) 11-20% faster than in its
    baseline beside a torch copy whose bandwidth held. Against its canary the copy looks 15%
    slower; as measured it did not move: the check calls it inconclusive, says why, and passes.
    A copy slower both as measured and against its canary is still named; a host whose memory
    got slower (copy and canary alike) names nothing."""
    from gpuprof.gate.check import run_check
    from gpuprof.gate.sides import Side

    rng = np.random.default_rng(3)
    cases = [(probe, c) for probe in ("a", "b", "c") for c in range(3)]
    k = 8
    base = _with_memory(
        _measured({c: list(100 * np.exp(rng.normal(0, 0.02, k))) for c in cases}),
        list(20 * np.exp(rng.normal(0, 0.02, k))),
        list(22 * np.exp(rng.normal(0, 0.02, k))),
    )
    others = _measured({c: [100 * math.exp(rng.normal(0, 0.02))] for c in cases})
    fingerprint = {"device": "cpu", "versions": {"gpuprof": "x"}}

    def check(memory: float, canary: float) -> tuple[list[str], list[str], list[str]]:
        cand = _with_memory(others, [memory], [canary])
        result = run_check(
            Side(label="base", measured=base, fingerprint=fingerprint),
            Side(label="cand", measured=cand, fingerprint=fingerprint, runs=[]),
            allow_mismatch=True,
        )
        table = result.table
        named = sorted(table.loc[table["verdict"] == "regression", "case"])
        doubted = sorted(table.loc[table["verdict"] == "inconclusive", "case"])
        return named, doubted, result.notes

    memory = ["memory rank=0", "memory rank=1"]
    named, doubted, notes = check(20.0, 22 * 1.18)  # the canary drifted, the copy did not
    assert named == [] and doubted == memory
    assert sum("against its canary" in n and "as measured" in n for n in notes) == 2
    cand = _with_memory(others, [20.0], [22 * 1.18])  # without asking both: two regressions
    _, base_adj, cand_adj = machine_factor(base, cand, min_effect=DELTA, alpha=ALPHA)
    table = compare(base_adj, cand_adj, min_effect=DELTA, alpha=ALPHA)
    assert sorted(table.loc[table["verdict"] == "regression", "case"]) == memory
    assert check(20 / 1.2, 22.0)[0] == memory  # a slower copy kernel: named
    assert check(15.0, 22 * 0.75)[:2] == ([], [])  # a slower host memory: nothing


def _mkl_slows_matmul() -> bool:
    """Whether MKL's most compatible code path (SSE2) slows a matmul here more than 1.5x."""
    code = (
        "import time, torch; torch.set_num_threads(1); a = torch.randn(512, 512); a @ a; "
        "t = time.perf_counter(); [a @ a for _ in range(20)]; print(time.perf_counter() - t)"
    )
    times = []
    for env in ({}, {"MKL_CBWR": "COMPATIBLE"}):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**__import__("os").environ, **env}, check=True)  # fmt: skip
        times.append(float(done.stdout))
    return times[1] > 1.5 * times[0]


@pytest.mark.slow
def test_ab_end_to_end_names_the_case_a_candidate_environment_slows(tmp_path: Path, gp: Gp) -> None:
    """Two real A/B checks on gloo with the memory and compute probes: the same interpreter
    and environment on both sides passes; a candidate with MKL_CBWR=COMPATIBLE (a real
    environment setting: MKL's conditional numerical reproducibility takes its SSE2 code path,
    on Intel and AMD CPUs alike, so every matmul does its work with narrower instructions) is
    named on the compute cases, and only those. The minimum effect is 15%: a busy CI
    machine's launches drift a few percent, the SSE2 matmuls run at about half speed."""
    if not _mkl_slows_matmul():
        pytest.skip("MKL_CBWR=COMPATIBLE does not slow matmuls on this CPU")
    common = ["check", "--reference-python", sys.executable, "--device", "cpu",
              "--probes", "compute,memory", "--seed", "1", "--min-effect", "15",
              "--format", "json"]  # fmt: skip
    # two pairs leave Student's t one degree of freedom (t = 12.7): an interval that wide
    # names nothing unchanged; the slowed side gets three (t = 4.3), as two pairs that
    # disagree by a third on a busy machine leave even a 2x slowdown undecided
    # (two pairs rarely decide "same" within 15% either: such cases end inconclusive, exit 4)
    same = gp(*common, "--min-pairs", "2", "--max-pairs", "2", "--out", tmp_path / "same")
    data = json.loads(same.out)
    undecided = [c["case"] for c in data["cases"] if c["verdict"] == "inconclusive"]
    assert same.code == (4 if undecided else 0), same.err
    assert data["mode"] == "ab" and data["pairs"] == 2
    assert not any(c["verdict"] == "regression" for c in data["cases"])
    assert data["versions"]["reference"] == data["versions"]["candidate"]
    pairs = ["--min-pairs", "3", "--max-pairs", "3"]
    slow = gp(*common, *pairs, "--env", "MKL_CBWR=COMPATIBLE", "--out", tmp_path / "slow")
    data = json.loads(slow.out)
    verdicts = [(c["case"], c["ratio"], c["ratio_hi"], c["verdict"]) for c in data["cases"]]
    assert slow.code == 1, (slow.err, verdicts)
    regressed = {c["probe"] for c in data["cases"] if c["verdict"] == "regression"}
    assert regressed == {"compute"}, verdicts
    assert "candidate sets MKL_CBWR=COMPATIBLE" in data["notes"]
    compute = [c for c in data["cases"] if c["probe"] == "compute"]
    summary = [(c["ratio"], c["ratio_hi"], c["pairs"], c["verdict"]) for c in compute]
    # a regression: the whole interval below 1/1.15 of the reference's throughput
    assert all(c["ratio_hi"] < 1 / 1.15 and c["pairs"] == 3 for c in compute), summary


def test_a_check_of_one_or_two_probes_keeps_its_raw_ratios() -> None:
    """A probe's cases share their causes: with the link 40% slower and collectives the only
    probe, its crossing cases are the regression, not the machine (a check like this removed
    them as a "machine shift" once). From three probes up the factor is estimated."""
    from gpuprof.gate.check import run_check
    from gpuprof.gate.sides import Side

    rng = np.random.default_rng(8)
    link = [("collectives", c) for c in range(6)]
    base = _measured({k: list(100 * np.exp(rng.normal(0, 0.01, 5))) for k in link})
    slowed = {k: [(140.0 if k[1] < 4 else 100.0) * math.exp(rng.normal(0, 0.01))] for k in link}
    fingerprint = {"device": "cpu", "versions": {"gpuprof": "x"}}
    result = run_check(
        Side(label="base", measured=base, fingerprint=fingerprint),
        Side(label="cand", measured=_measured(slowed), fingerprint=fingerprint),
        allow_mismatch=True,
    )
    assert result.machine is None and any("machine: not estimated" in n for n in result.notes)
    assert (result.table["verdict"] == "regression").sum() == 4 and result.exit_code == 1
    three = [(p, c) for p in ("a", "b", "c") for c in range(3)]
    base3 = _measured({k: list(100 * np.exp(rng.normal(0, 0.01, 5))) for k in three})
    cand3 = _measured({k: [115 * math.exp(rng.normal(0, 0.01))] for k in three})
    shifted = run_check(
        Side(label="base", measured=base3, fingerprint=fingerprint),
        Side(label="cand", measured=cand3, fingerprint=fingerprint),
        allow_mismatch=True,
    )
    assert shifted.machine is not None and shifted.machine.verdict == "slower"
    assert not (shifted.table["verdict"] == "regression").any()


def test_a_pair_is_timed_by_the_probes_it_launches() -> None:
    """What a pair of launches of some probes will cost: each probe's measuring time in a
    run (the one-H200 ci run: memory from 0.0 to 6.1 s of its cases, compute 6.2 to 8.6,
    DDP's case 8.9 s, as its shard's records say) and the rest of the pair's wall time."""
    from gpuprof.gate import ab
    from gpuprof.runs.store import Run

    spans = ab.probe_seconds(Run(Path(__file__).parent / "data" / "h200"))
    assert spans == pytest.approx({"memory": 6.13, "compute": 2.37, "ddp": 8.93}, abs=0.01)
    costs = ab._Costs()
    costs.add(50.0, [spans, {**spans, "ddp": 9.5}])  # the slower side's DDP counts
    assert costs.overhead_s == pytest.approx(50.0 - 2 * (6.13 + 2.37) - 8.93 - 9.5, abs=0.05)
    assert costs.pair_s(None) == pytest.approx(50.0 + 9.5 - 8.93, abs=0.05)
    assert costs.pair_s(["memory"]) == pytest.approx(costs.overhead_s + 2 * 6.13, abs=0.05)


def test_later_pairs_launch_only_undecided_probes_while_the_budget_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past --min-pairs a pair launches only the probes with undecided cases, each case keeps
    the pairs that measured it, and with a time budget no pair starts that would not fit,
    timed by the probes it launches (on a fake clock a launch costs 2 s and 4 s a probe: a
    budget of 95 s holds 3 pairs of both probes, 60 s, and 2 more of the undecided one, 12 s
    each, not a third; timed as a whole pair, 20 s, only one would have fitted)."""
    from types import SimpleNamespace

    from gpuprof.gate import ab

    clock, launched = [0.0], []
    # ddp about 7% slower and spread wide: neither shown under the 10% pass margin nor
    # beyond the 5% minimum effect by 5 pairs, but a sixth could still decide it
    slower = iter([0.02, 0.12, 0.06, 0.07, 0.065] * 8)

    def launch(side: ab.Side, label: str, plan: ab.Plan, stamp: Path, probes: Any = None) -> Any:
        clock[0] += 2.0 + 4.0 * len(probes or ["memory", "ddp"])
        launched.append((label, probes))
        assert ab._only(plan.sweep_args, probes)[-2:] == (
            ["--probes", ",".join(probes)] if probes else ["--suite", "ci"]
        )
        change = next(slower) if label == "candidate" else 0.0
        return SimpleNamespace(
            status="complete", info={}, path=stamp, probes=probes or ["memory", "ddp"],
            change=change,
        )  # fmt: skip

    def measure(run: Any, slots: int = 0) -> Measured:
        # memory alike on both sides (settles at once), ddp undecided at 3 pairs
        rows = [
            [probe, "time_us", "lower", f"{probe}{case}", f"{probe} {case}", 0,
             100.0 * math.exp(run.change if probe == "ddp" else 0.0), False, np.nan, np.nan]
            for probe in run.probes
            for case in range(2)
        ]  # fmt: skip
        return Measured(pd.DataFrame(rows, columns=VALUE_COLUMNS), pd.DataFrame())

    monkeypatch.setattr(ab, "launch", launch)
    monkeypatch.setattr(ab, "measure_run", measure)
    monkeypatch.setattr(ab, "probe_seconds", lambda run: dict.fromkeys(run.probes, 4.0))
    monkeypatch.setattr(ab, "_same_environment", lambda a, b: None)
    monkeypatch.setattr(ab, "time", SimpleNamespace(monotonic=lambda: clock[0], strftime=str))
    plan = ab.Plan(
        sweep_args=("--probes", "memory,ddp", "--suite", "ci"), out=tmp_path, max_pairs=20,
        time_budget_s=95.0, seed=3,
    )  # fmt: skip
    result = ab.run_ab(ab.Side(python="ref"), ab.Side(python="cand"), plan, say=lambda _: None)
    assert [probes for _, probes in launched] == [None] * 6 + [["ddp"]] * 4
    pairs = result.table.set_index("case")["pairs"]
    assert pairs["memory 0"] == pairs["memory 1"] == 3
    assert pairs["ddp 0"] == pairs["ddp 1"] == 5
    verdicts = result.table.set_index("case")["verdict"]
    assert set(verdicts[["memory 0", "memory 1"]]) == {"same"}
    assert set(verdicts[["ddp 0", "ddp 1"]]) == {"inconclusive"}  # a sixth pair: 96 s
    assert clock[0] == 84.0 and len(result.runs["A"]) == 5
    # without a budget, --max-pairs alone bounds the pairs of the undecided probe
    clock[0], launched[:] = 0.0, []
    plan = ab.Plan(sweep_args=("--suite", "ci"), out=tmp_path, max_pairs=5, seed=3)
    ab.run_ab(ab.Side(python="ref"), ab.Side(python="cand"), plan, say=lambda _: None)
    assert [probes for _, probes in launched][:6] == [None] * 6
    assert set(map(str, [probes for _, probes in launched][6:])) == {"['ddp']"}


def test_a_case_whose_canary_moved_is_decided_only_where_both_ways_agree() -> None:
    """A/B: a case whose canary moved between the sides (its log ratios apart from 0) is
    judged as measured and against its canary; claimed or passed only where both agree. The
    design-4 false alarm on this VM (compute 0.91 after 3 pairs, its canary as slow) is then
    undecided; a case slower than its moved canary as well as measured is still named."""
    rng = np.random.default_rng(7)
    pairs = 6
    canary = 0.09 + rng.normal(0, 0.01, pairs)  # the launches of B 9% slower, case and canary
    d = np.vstack(
        [
            canary + rng.normal(0, 0.01, pairs),  # the case as slow as its canary: drift
            canary + 0.18 + rng.normal(0, 0.01, pairs),  # 1.2x slower than its canary too
            rng.normal(0, 0.01, pairs),  # no canary, unchanged: passes
        ]
    )
    table = _table(d, ["compute", "compute", "memory"]).assign(
        c=[list(canary), list(canary), [math.nan] * pairs]
    )
    out = judge(table, min_effect=DELTA, alpha=ALPHA, max_pairs=20)
    assert list(out["against"]) == ["moved", "moved", "measured"]
    assert list(out["verdict"]) == ["undecided", "regression", "same"]
    # more pairs may yet settle it (its canary back with its case): the check goes on
    assert list(out["settled"]) == [False, True, True]
    # as measured alone, the drift would have been named
    alone = judge(table.drop(columns="c"), min_effect=DELTA, alpha=ALPHA, max_pairs=20)
    assert alone["verdict"].iloc[0] == "regression"
