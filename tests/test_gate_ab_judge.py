"""How the A/B check judges a case: on its primary metric, against its canary where the sides'
canaries agree, regressions with Holm's step-down, a pass as "not slower than the margin"; and
what each side measures on CPU by default."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.cli.check import ab_sweep_args
from gpuprof.gate import verdicts
from gpuprof.gate.paired import _holm, final, judge

ALPHA, DELTA = 0.05, 0.05


def _rows(cases: list[dict[str, object]]) -> pd.DataFrame:
    """A paired-log table: each case gives probe, metric, d (worse-is-positive log ratios per
    pair) and optionally c (its canary's, worse-is-positive)."""
    out = []
    for i, case in enumerate(cases):
        d = list(case["d"])  # type: ignore[call-overload]
        out.append(
            {
                "probe": case["probe"],
                "metric": case["metric"],
                "better": "lower",
                "key": json.dumps({"case": i}),
                "case": f"case {i}",
                "a": [1.0] * len(d),
                "b": list(np.exp(d)),
                "d": d,
                "c": list(case.get("c", [math.nan] * len(d))),  # type: ignore[call-overload]
                "wrong": False,
                "slowed_a": False,
                "slowed_b": False,
            }
        )
    return pd.DataFrame(out)


def _judge(cases: list[dict[str, object]], **kw: float) -> pd.DataFrame:
    return judge(_rows(cases), min_effect=DELTA, alpha=ALPHA, max_pairs=8, **kw)  # type: ignore[arg-type]


def test_holm_steps_down_and_stops_at_the_first_it_cannot_reject() -> None:
    assert _holm(np.array([0.001, 0.02, 0.04, 1.0]), 0.05).tolist() == [True, True, True, False]
    assert _holm(np.array([0.02, 0.001]), 0.05).tolist() == [True, True]
    assert _holm(np.array([0.03, 0.03]), 0.05).tolist() == [False, False]  # 0.03 > 0.05 / 2
    # Bonferroni at 0.05 / 3 would reject only the first: Holm's second step is 0.05 / 2
    assert _holm(np.array([0.01, 0.024, 0.3]), 0.05).tolist() == [True, True, False]


def test_a_case_is_judged_on_its_primary_metric_and_its_details_explain_it() -> None:
    """The DDP case passes on samples/s; its forward time, 30% slower, is shown as a detail
    (a metric that explains the case: not a test of its own, in JUnit or the exit code)."""
    quiet = [0.01, -0.01, 0.0, 0.01]
    table = _judge(
        [
            {"probe": "ddp", "metric": "samples_per_s", "d": quiet},
            {"probe": "ddp", "metric": "forward_us", "d": [0.26, 0.27, 0.25, 0.26]},
        ]
    )
    assert table["verdict"].tolist() == ["same", "detail"]
    assert table.loc[1, "ratio"] > 1.25  # still measured and shown
    assert {m.column for m in registry.specs()["ddp"].metrics if m.primary} == {"samples_per_s"}
    out = final(table)
    assert verdicts.undecided_exit(out, 0, "error") == (0, [])
    xml = verdicts.junit(out, "gpuprof check", [])
    assert 'tests="1"' in xml and "forward_us" not in xml


def test_a_pass_means_shown_not_slower_than_the_margin() -> None:
    """4% slower, measured tightly: not a regression (under the 5% minimum effect) and shown
    under the 10% margin, a pass; 8% slower with 3% spread: undecided; the margin can be set."""
    tight = [0.04, 0.045, 0.035, 0.04]
    loose = [0.05, 0.11, 0.06, 0.10]
    table = _judge(
        [
            {"probe": "memory", "metric": "time_us", "d": tight},
            {"probe": "compute", "metric": "time_us", "d": loose},
        ]
    )
    assert table["verdict"].tolist() == ["same", "undecided"]
    assert (table["ratio_worst"] < 1.10).tolist() == [True, False]
    assert table["pass_margin_pct"].eq(10).all()
    wider = _judge([{"probe": "compute", "metric": "time_us", "d": loose}], pass_margin=0.25)
    assert wider["verdict"].tolist() == ["same"]


def test_the_canary_removes_the_processs_own_speed_unless_it_moved() -> None:
    """A case whose launches run 20% apart as the core's speed moves with the process (its
    canary, run beside it, moves alike) is judged against its canary and passes; the same
    case whose canary itself is 15% slower on one side (another numpy, another machine) is
    judged as measured, and says so."""
    speed = np.array([0.2, -0.15, 0.1, -0.2, 0.18, -0.1])
    own = np.array([0.01, -0.01, 0.005, 0.0, -0.005, 0.01])
    table = _judge([{"probe": "compute", "metric": "time_us", "d": speed + own, "c": speed}])
    assert table.loc[0, "against"] == "canary" and table.loc[0, "verdict"] == "same"
    raw = _judge([{"probe": "compute", "metric": "time_us", "d": speed + own}])
    assert raw.loc[0, "against"] == "measured" and raw.loc[0, "verdict"] == "undecided"
    # a canary as noisy as its case, its mean 6% off over these pairs: not apart from 0
    strayed = _judge(
        [{"probe": "compute", "metric": "time_us", "d": speed + own + 0.06, "c": speed + 0.06}]
    )
    assert strayed.loc[0, "against"] == "canary" and strayed.loc[0, "verdict"] == "same"
    moved = speed * 0.1 + 0.15
    table = _judge([{"probe": "compute", "metric": "time_us", "d": speed + own, "c": moved}])
    assert table.loc[0, "against"] == "moved" and table.loc[0, "verdict"] == "undecided"


def test_regressions_are_claimed_beyond_the_minimum_effect_with_holm() -> None:
    """Two cases 20% slower are named; the unchanged one beside them passes."""
    rng = np.random.default_rng(4)
    slow = list(math.log(1.2) + rng.normal(0, 0.02, 4))
    table = _judge(
        [
            {"probe": "memory", "metric": "time_us", "d": slow},
            {"probe": "compute", "metric": "time_us", "d": list(np.array(slow) + 0.01)},
            {"probe": "ddp", "metric": "samples_per_s", "d": list(rng.normal(0, 0.02, 4))},
        ]
    )
    assert table["verdict"].tolist() == ["regression", "regression", "same"]
    assert (table.loc[:1, "ratio_lo"] > 1.05).all()


def test_on_cpu_each_side_measures_what_a_one_gpu_runner_does() -> None:
    """Without --suite or --probes, a CPU A/B check launches one rank of the ci suite's
    probes that one GPU measures (gloo's collectives between ranks on two shared cores are
    too noisy to decide in a CI job's time); what the user names is kept."""
    kw = {"suite": None, "probes": None, "gpus": None, "user_model": None}
    args = ab_sweep_args("cpu", kw)
    probes = args[args.index("--probes") + 1].split(",")
    assert probes == list(registry.suite_probes("ci", "cuda"))
    assert "collectives" not in probes and args[args.index("--gpus") + 1] == "1"
    assert "--no-telemetry" in args
    named = ab_sweep_args("cpu", {**kw, "probes": "collectives", "gpus": 2})
    assert named[named.index("--probes") + 1] == "collectives" and "2" in named
    assert "--probes" not in ab_sweep_args("cuda", kw) and "--gpus" not in ab_sweep_args("cuda", kw)
    assert "--probes" not in ab_sweep_args("cpu", {**kw, "suite": "quick"})
