"""`gpuprof check`: the regression gate, in two modes.

- against a stored baseline (`--baseline FILE|RUN`): a run given with `--run`, or measured now
  with the baseline's plan; the machine-wide factor is removed from both sides first;
- A/B in the same window (`--reference-python PY`): the reference and the candidate measured
  in alternating fresh launches until every case is decided.

Verdicts, formats and exit codes are the same: 0 pass, 1 regression or a failing case, 2 usage
or environment mismatch, 3 could not measure, 4 could not decide some case (and nothing failed;
`--on-inconclusive pass` makes that a pass, said in the output). pandas and scipy load inside
the command.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import registry
from gpuprof.cli.gate import gate_options, writable
from gpuprof.cli.options import out_option
from gpuprof.errors import MeasurementError, UsageError
from gpuprof.machine.node import plan_device
from gpuprof.params import csv
from gpuprof.runs.plan import DEVICES, SUITES

AB_BUDGET_S = 180.0  # A/B: pairs are added while the next fits in this many seconds
AB_PAIRS = 20  # A/B pairs at most


@click.command()
@click.option("--baseline", "baseline_spec", metavar="FILE|RUN", help="a stored baseline")
@click.option(
    "--reference-python",
    metavar="PY",
    help="A/B: the reference's Python (with gpuprof installed; may be this one)",
)
@click.option(
    "--reference-env", multiple=True, metavar="K=V", help="A/B: a variable the reference sets"
)
@click.option("--env", "cand_env", multiple=True, metavar="K=V", help="A/B: one the candidate sets")
@click.option(
    "--run",
    "run_specs",
    multiple=True,
    metavar="RUN",
    help="compare RUN (repeatable); "
    "default: measure now with the baseline's suite, probes and shape",
)
@click.option("--suite", type=click.Choice(SUITES), help="[default: the baseline's; A/B: ci]")
@click.option("--probes", help="probes to measure [default: the baseline's, or the suite's]")
@click.option(
    "--model",
    "user_model",
    metavar="PACKAGE.MODULE:FACTORY",
    help="your model in the training probes [default: the baseline's]",
)
@click.option("--device", type=click.Choice(DEVICES), help="[default: the baseline's, or auto]")
@click.option("--gpus", type=click.IntRange(1, 4096), help="ranks [default: the baseline's]")
@click.option(
    "--repeats",
    default=2,
    show_default=True,
    type=click.IntRange(1, 100),
    help="runs to measure, each its own launch (the median of their medians is judged)",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    show_default=True,
    help="when measuring, confirm regressions with as many runs again before failing",
)
@click.option("--min-pairs", default=3, show_default=True, type=click.IntRange(2, 100), help="A/B")
@click.option(
    "--max-pairs",
    type=click.IntRange(2, 100),
    default=AB_PAIRS,
    show_default=True,
    help="A/B: pairs of launches at most (on one CPU rank of a 2-core machine: 20-25 s a pair)",
)
@click.option(
    "--time-budget",
    default=AB_BUDGET_S,
    show_default=True,
    type=click.FloatRange(min=1, min_open=False),
    metavar="SECONDS",
    help="A/B: add pairs while the next one fits in this many seconds from the start (past"
    " --min-pairs, only the probes with undecided cases are launched again)",
)
@click.option(
    "--pass-margin",
    default=100 * registry.PASS_MARGIN,
    show_default=True,
    type=click.FloatRange(0, 1000, min_open=True),
    metavar="PCT",
    help="A/B: a case passes once shown not slower than this (one-sided, at 1 - alpha)",
)
@click.option("--seed", type=int, help="A/B: the order of the sides in each pair")
@click.option(
    "--machine-factor/--no-machine-factor",
    default=True,
    show_default=True,
    help="remove the runner's machine-wide factor before judging cases (stored baseline)",
)
@click.option(
    "--fail-on-machine-shift",
    is_flag=True,
    help="exit 1 when the runner itself is slower or faster than its baseline",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=float,
    help="seconds one case may take before its rank counts as hung",
)
@gate_options
@click.option(
    "--fail",
    "fail_rules",
    multiple=True,
    metavar="METRIC:PCT",
    help="a metric's own minimum effect, e.g. busbw_gbps:10",
)
@click.option(
    "--allow-env-mismatch",
    is_flag=True,
    help="compare although the device, its model, the job shape or the suite differ",
)
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@click.option(
    "--on-inconclusive",
    type=click.Choice(["error", "pass"]),
    default="error",
    show_default=True,
    help="a case the check could not decide: exit 4 and a JUnit error, or pass (skipped)",
)
@click.option("--junit", "junit_file", type=click.Path(), help="write JUnit XML here")
@click.option("--markdown", "markdown_file", type=click.Path(), help="write Markdown here")
@out_option
def check(baseline_spec: str | None, run_specs: tuple[str, ...], **kw: Any) -> int:
    """Check for regressions: against a stored baseline, or A/B against a reference measured in
    the same window. Exit 0 pass, 1 regression or wrong results, 2 usage or environment
    mismatch, 3 could not measure, 4 could not decide some case (nothing failed).

    Examples: gpuprof check --baseline baseline.json --junit check.xml;
    gpuprof check --reference-python ../main/.venv/bin/python --suite ci
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate.check import parse_effects

    outputs = writable(kw.pop("junit_file")), writable(kw.pop("markdown_file"))
    effects = parse_effects(kw.pop("fail_rules"))
    if kw["reference_python"]:
        if baseline_spec or run_specs:
            raise UsageError(
                "--reference-python (A/B) takes no --baseline or --run",
                "use one mode: A/B, or a stored baseline",
            )
        return _ab(kw, effects, outputs)
    if not baseline_spec:
        raise UsageError(
            "gpuprof check needs --baseline FILE|RUN or --reference-python PY",
            "see gpuprof check --help",
        )
    for flag in ("reference_env", "cand_env"):
        if kw[flag]:
            raise UsageError(f"--{flag.replace('_', '-')} is for A/B checks (--reference-python)")
    return _stored(baseline_spec, run_specs, kw, effects, outputs)


def _stored(
    baseline_spec: str,
    run_specs: tuple[str, ...],
    kw: dict[str, Any],
    effects: dict[str, float],
    outputs: tuple[Path | None, Path | None],
) -> int:
    """The check against a stored baseline."""
    # deferred: loads pandas, scipy
    from gpuprof.gate.baseline import open_side
    from gpuprof.gate.check import run_check
    from gpuprof.gate.sides import side_of_runs
    from gpuprof.runs.store import open_run

    base = open_side(baseline_spec, kw["out"])
    settings = {
        "min_effect": kw["min_effect"] / 100,
        "alpha": kw["alpha"],
        "effects": effects,
        "allow_mismatch": kw["allow_env_mismatch"],
        "machine": kw["machine_factor"],
        "fail_on_machine_shift": kw["fail_on_machine_shift"],
    }
    if run_specs:
        cand = side_of_runs([open_run(spec, kw["out"]) for spec in run_specs])
        result = run_check(base, cand, **settings)
    else:
        runs = _measure_for_check(base, kw, kw["repeats"])
        cand = side_of_runs(runs)
        result = run_check(base, cand, **settings)
        regressions = (
            int((result.table["verdict"] == "regression").sum()) if len(result.table) else 0
        )
        if regressions and kw["confirm"] and result.exit_code != 3:
            click.echo(
                f"gpuprof: {regressions} regression(s) in {len(runs)} run(s): measuring "
                f"{kw['repeats']} more to confirm them, judging all together (--no-confirm: "
                "judge the first ones alone)",
                err=True,
            )
            cand = side_of_runs(runs + _measure_for_check(base, kw, kw["repeats"]))
            result = run_check(base, cand, **settings)
    machine = None
    if result.machine is not None:
        m = result.machine
        machine = {
            "factor_pct": m.pct,
            "threshold_pct": 100 * math.expm1(m.threshold),
            "verdict": m.verdict,
            "case_metrics": m.cases,
            "estimated": m.estimated,
            "canaries": [
                {
                    "canary": c.what,
                    "probe": c.probe,
                    "metric": c.metric,
                    "factor_pct": c.pct,
                    "threshold_pct": 100 * math.expm1(c.threshold),
                    "verdict": c.verdict,
                    "cases": c.cases,
                }
                for c in m.canaries
            ],
        }
    meta = {
        "mode": "baseline",
        "baseline": base.label,
        "candidate": cand.label,
        "runs": [str(r.get("path")) for r in cand.runs],
        "machine": machine,
    }
    title = f"gpuprof check: {cand.label} against {base.label}"
    return _say(result.table, title, result.notes, result.summary, result.exit_code, meta, kw,
                outputs)  # fmt: skip


def _ab(
    kw: dict[str, Any], effects: dict[str, float], outputs: tuple[Path | None, Path | None]
) -> int:
    """The A/B check in the same window."""
    # deferred: loads pandas, scipy
    from gpuprof.gate.ab import Plan, Side, check_python, parse_env, run_ab

    max_pairs = kw["max_pairs"]
    if kw["min_pairs"] > max_pairs:
        raise UsageError(f"--min-pairs {kw['min_pairs']} exceeds --max-pairs {max_pairs}")
    reference = Side(
        python=kw["reference_python"], env=parse_env(kw["reference_env"], "--reference-env")
    )
    candidate = Side(python=sys.executable, env=parse_env(kw["cand_env"], "--env"))
    check_python(reference.python)
    device, _ = plan_device(kw["device"] or "auto")  # torch, once: both sides use this device
    args = ab_sweep_args(device, kw)
    # one thread a CPU rank, unless the user chose: on a 2-core runner a second thread
    # competes with the launcher's, and a launch's matmul moved 6-8% (one thread: 1%)
    shared = (
        {"OMP_NUM_THREADS": "1"} if device == "cpu" and "OMP_NUM_THREADS" not in os.environ else {}
    )
    plan = Plan(
        sweep_args=(*args, "--timeout", f"{kw['timeout']:g}"),
        out=Path(kw["out"]),
        min_pairs=kw["min_pairs"],
        max_pairs=max_pairs,
        time_budget_s=kw["time_budget"],
        min_effect=kw["min_effect"] / 100,
        pass_margin=kw["pass_margin"] / 100,
        alpha=kw["alpha"],
        effects=effects,
        seed=kw["seed"],
        env=shared,
    )
    result = run_ab(reference, candidate, plan, lambda line: click.echo(line, err=True))
    meta = {
        "mode": "ab",
        "reference": {"python": reference.python, "env": dict(reference.env)},
        "candidate": {"python": candidate.python, "env": dict(candidate.env)},
        "versions": result.versions,
        "pairs": len(result.runs["A"]),
        "seconds": round(result.seconds, 1),
        "runs": {side: [str(r.path) for r in runs] for side, runs in result.runs.items()},
    }
    title = f"gpuprof check (A/B): candidate against reference, {meta['pairs']} pair(s)"
    return _say(result.table, title, result.notes, result.summary, result.exit_code, meta, kw,
                outputs)  # fmt: skip


def ab_sweep_args(device: str, kw: dict[str, Any]) -> list[str]:
    """What each side's sweep measures: the ci suite (or --suite / --probes) on `device`;
    on CPU without either, what a one-GPU runner's ci suite measures, on one rank (gloo's
    collectives between ranks sharing two cores vary 23-49% from launch to launch)."""
    args = ["--suite", kw["suite"] or "ci", "--device", device]
    if device == "cpu":  # no GPU clocks to judge a case by: the sampler would only cost time
        args.append("--no-telemetry")
    gpus = kw["gpus"]
    if kw["probes"]:
        args += ["--probes", ",".join(csv(kw["probes"]))]
    elif device == "cpu" and not kw["suite"]:
        one_gpu = registry.suite_probes("ci", "cuda")
        probes = [p for p in registry.suite_probes("ci", "cpu") if p in one_gpu]
        args += ["--probes", ",".join(probes)]
        gpus = gpus or 1
    if gpus:
        args += ["--gpus", str(gpus)]
    if kw["user_model"]:
        args += ["--model", kw["user_model"]]
    return args


def _say(
    table: Any,
    title: str,
    notes: list[str],
    summary: str,
    code: int,
    meta: dict[str, Any],
    kw: dict[str, Any],
    outputs: tuple[Path | None, Path | None],
) -> int:
    """Print the verdicts (terminal or JSON), write JUnit, Markdown and the CI job summary."""
    # deferred: loads pandas, scipy
    from gpuprof.gate import verdicts
    from gpuprof.gate.check import step_summary_path

    code, undecided = verdicts.undecided_exit(table, code, kw["on_inconclusive"])
    notes = notes + undecided
    if code == verdicts.UNDECIDED_EXIT:
        summary = f"{summary}: could not decide (exit {code})"
    if kw["fmt"] == "json":
        click.echo(
            verdicts.as_json(table, {**meta, "exit_code": code, "summary": summary, "notes": notes})
        )
    else:
        click.echo(verdicts.terminal(table, title, notes, summary))
    junit_file, markdown_file = outputs
    if junit_file is not None:
        junit_file.write_text(verdicts.junit(table, "gpuprof check", notes, kw["on_inconclusive"]))
    text = verdicts.markdown(table, title, notes, summary)
    if markdown_file is not None:
        markdown_file.write_text(text)
    summary_file = step_summary_path()
    if summary_file is not None:
        with summary_file.open("a", encoding="utf-8") as handle:
            handle.write(text)
    return code


def _measure_for_check(base: Any, kw: dict[str, Any], repeats: int) -> list[Any]:
    """Measure `repeats` runs now with the baseline's suite, probes and shape unless told
    otherwise; the runs (stopping at one that did not complete)."""
    # deferred: loads pandas
    from gpuprof.launch import runner
    from gpuprof.runs.store import open_run

    fp = base.fingerprint
    probes = csv(kw["probes"]) if kw["probes"] else tuple(base.measured.values["probe"].unique())
    model = kw["user_model"] or fp.get("model")
    request = runner.SweepRequest(
        probes=probes,
        opts={"model": model} if model else {},
        out=Path(kw["out"]),
        tag="check",
        argv=(click.get_current_context().obj or {}).get("argv", sys.argv),
        gpus=kw["gpus"] or fp.get("gpus_per_node"),
        suite=kw["suite"] or fp.get("suite") or "ci",
        device=kw["device"] or fp.get("device") or "auto",
        timeout=kw["timeout"],
        report=False,
    )
    runs = []
    for _ in range(repeats):
        result = runner.sweep(request)
        if result.run_dir is None:
            raise MeasurementError("the check's sweep wrote no run", "see the messages above")
        runs.append(open_run(result.run_dir))
        click.echo(f"{result.run_dir}: {result.status}", err=True)
        if result.status != "complete":
            break
    return runs
