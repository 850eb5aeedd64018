"""The regression gate's commands: `gpuprof baseline`, `check`, `compare` and `trend` (a thin
click layer over `gpuprof.gate.check`; pandas and scipy are imported inside the commands)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import registry
from gpuprof.cli.options import out_option, stack
from gpuprof.errors import MeasurementError, UsageError
from gpuprof.params import csv
from gpuprof.runs.plan import DEVICES, SUITES
from gpuprof.text import fixed_width


@click.command()
@click.argument("runs", metavar="RUN...", nargs=-1, required=True)
@click.option("-o", "output", required=True, type=click.Path(), help="baseline file to write")
@out_option
def baseline(runs: tuple[str, ...], output: str, out: str) -> None:
    """Write a baseline file (JSON, small enough to commit) from complete runs of one plan.

    Example: gpuprof sweep --suite ci --repeats 5 && gpuprof baseline 0001 0002 0003 0004 0005
    -o baseline.json
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate.check import write_baseline
    from gpuprof.runs.store import open_run

    opened = [open_run(spec, out) for spec in runs]
    data = write_baseline(opened, Path(output))
    click.echo(
        f"{output}: {len(data['cases'])} case-metrics from {len(opened)} run(s)"
        + ("" if len(opened) > 1 else " (one run: thresholds will be --min-effect alone)")
    )


def _writable(path: str | None) -> Path | None:
    """An output file's path, refused before anything is measured if it cannot be written."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise UsageError(f"cannot write {target}", "give a file in an existing folder")
    return target


def _gate_options(func: Any) -> Any:
    return stack(
        click.option(
            "--min-effect",
            default=100 * registry.MIN_EFFECT,
            show_default=True,
            type=click.FloatRange(0, 1000, min_open=True),
            help="smallest change in % that can count",
        ),
        click.option(
            "--alpha",
            default=registry.ALPHA,
            show_default=True,
            type=click.FloatRange(0, 0.5, min_open=True),
            help="false-alarm rate of a whole comparison",
        ),
    )(func)


@click.command()
@click.option("--baseline", "baseline_spec", required=True, metavar="FILE|RUN")
@click.option(
    "--run",
    "run_specs",
    multiple=True,
    metavar="RUN",
    help="compare RUN (repeatable); "
    "default: measure now with the baseline's suite, probes and shape",
)
@click.option(
    "--suite", type=click.Choice(SUITES), help="suite to measure [default: the baseline's]"
)
@click.option("--probes", help="probes to measure [default: the baseline's]")
@click.option("--device", type=click.Choice(DEVICES), help="[default: the baseline's]")
@click.option("--gpus", type=click.IntRange(1, 4096), help="ranks [default: the baseline's]")
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(1, 100),
    help="runs to measure (their medians pooled)",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    show_default=True,
    help="when measuring, confirm regressions with a second measurement before failing",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=float,
    help="seconds one case may take before its rank counts as hung",
)
@_gate_options
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
    help="compare although the device, its model or the job shape differ",
)
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@click.option("--junit", "junit_file", type=click.Path(), help="write JUnit XML here")
@click.option("--markdown", "markdown_file", type=click.Path(), help="write Markdown here")
@out_option
def check(baseline_spec: str, run_specs: tuple[str, ...], **kw: Any) -> int:
    """Compare a run (or measure one now) with a baseline: exit 0 no regression, 1 regression
    or wrong results, 2 usage or environment mismatch, 3 could not measure.

    Example: gpuprof check --baseline baseline.json --junit check.xml
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate import check as gate
    from gpuprof.gate import verdicts

    junit_file, markdown_file = _writable(kw.pop("junit_file")), _writable(kw.pop("markdown_file"))
    effects = gate.parse_effects(kw.pop("fail_rules"))
    base = gate.open_side(baseline_spec, kw["out"])
    settings = {
        "min_effect": kw["min_effect"] / 100,
        "alpha": kw["alpha"],
        "effects": effects,
        "allow_mismatch": kw["allow_env_mismatch"],
    }
    if run_specs:
        # deferred: loads pandas
        from gpuprof.runs.store import open_run

        cand = gate.side_of_runs([open_run(spec, kw["out"]) for spec in run_specs])
        result = gate.run_check(base, cand, **settings)
    else:
        runs = _measure_for_check(base, kw, kw["repeats"])
        cand = gate.side_of_runs(runs)
        result = gate.run_check(base, cand, **settings)
        regressions = (
            int((result.table["verdict"] == "regression").sum()) if len(result.table) else 0
        )
        if regressions and kw["confirm"] and result.exit_code != 3:
            click.echo(
                f"gpuprof: {regressions} regression(s) in the first run: measuring once more "
                "to confirm them (--no-confirm: judge one run)",
                err=True,
            )
            cand = gate.side_of_runs(runs + _measure_for_check(base, kw, kw["repeats"]))
            result = gate.run_check(base, cand, **settings)
    title = f"gpuprof check: {cand.label} against {base.label}"
    if kw["fmt"] == "json":
        meta = {
            "baseline": base.label,
            "candidate": cand.label,
            "exit_code": result.exit_code,
            "summary": result.summary,
            "notes": result.notes,
        }
        click.echo(verdicts.as_json(result.table, meta))
    else:
        click.echo(verdicts.terminal(result.table, title, result.notes, result.summary))
    if junit_file is not None:
        junit_file.write_text(verdicts.junit(result.table, "gpuprof check", result.notes))
    text = verdicts.markdown(result.table, title, result.notes, result.summary)
    if markdown_file is not None:
        markdown_file.write_text(text)
    summary_file = gate.step_summary_path()
    if summary_file is not None:
        with summary_file.open("a", encoding="utf-8") as handle:
            handle.write(text)
    return result.exit_code


def _measure_for_check(base: Any, kw: dict[str, Any], repeats: int) -> list[Any]:
    """Measure `repeats` runs now with the baseline's suite, probes and shape unless told
    otherwise; the runs (stopping at one that did not complete)."""
    # deferred: loads pandas
    from gpuprof.launch import runner

    fp = base.fingerprint
    probes = csv(kw["probes"]) if kw["probes"] else tuple(base.measured.values["probe"].unique())
    request = runner.SweepRequest(
        probes=probes,
        out=Path(kw["out"]),
        tag="check",
        argv=(click.get_current_context().obj or {}).get("argv", sys.argv),
        gpus=kw["gpus"] or fp.get("gpus_per_node"),
        suite=kw["suite"] or fp.get("suite") or "ci",
        device=kw["device"] or fp.get("device") or "auto",
        timeout=kw["timeout"],
        report=False,
    )
    # deferred: loads pandas
    from gpuprof.runs.store import open_run

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


@click.command()
@click.argument("side_a", metavar="A")
@click.argument("side_b", metavar="B")
@click.option("-o", "output", type=click.Path(), help="write the HTML page here")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@_gate_options
@out_option
def compare(side_a: str, side_b: str, output: str | None, fmt: str, **kw: Any) -> None:
    """Two runs (or a baseline file and a run) side by side: every common case with its change
    and verdict (A is the reference); the cases only one side has are listed.

    Example: gpuprof compare 0003 0007 -o compare.html
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate import check as gate
    from gpuprof.gate import verdicts
    from gpuprof.gate.stats import compare as compare_sides
    from gpuprof.gate.stats import method_lines, verdict_counts

    target = _writable(output)
    a, b = gate.open_side(side_a, kw["out"]), gate.open_side(side_b, kw["out"])
    notes = gate.environment_notes(a, b, "the sides differ", "differs")
    table = compare_sides(
        a.measured, b.measured, min_effect=kw["min_effect"] / 100, alpha=kw["alpha"]
    )
    summary = verdict_counts(table)
    if fmt == "json":
        click.echo(verdicts.as_json(table, {"a": a.label, "b": b.label, "notes": notes}))
    else:
        click.echo(
            verdicts.terminal(table, f"gpuprof compare: {a.label} -> {b.label}", notes, summary)
        )
    if target is not None:
        # deferred: loads pandas, plotly, scipy
        from gpuprof.gate.compare import render_compare, write_page

        html = render_compare(table, (a.label, b.label), notes, method_lines())
        click.echo(str(write_page(html, target)))


@click.command()
@click.argument("runs", metavar="RUN...|DIR", nargs=-1, required=True)
@click.option(
    "--baseline",
    "baseline_spec",
    metavar="FILE|RUN",
    help="judge every run against it (else: against the runs before it); its runs' band",
)
@click.option("-o", "output", type=click.Path(), help="write the HTML page here")
@click.option(
    "--window",
    default=5,
    show_default=True,
    type=click.IntRange(2, 100),
    help="without --baseline: the most runs before a run it is compared with",
)
@_gate_options
@out_option
def trend(runs: tuple[str, ...], baseline_spec: str | None, output: str | None, **kw: Any) -> None:
    """Each case's metrics across runs in order (CI artifacts of successive commits), with the
    runs where a step came in (against --baseline, or else against the runs before each).

    Example: gpuprof trend ci-artifacts/ --baseline baseline.json -o trend.html
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate import check as gate
    from gpuprof.gate.stats import method_lines

    target = _writable(output)
    sides = gate.run_sides(runs, kw["out"])
    base = gate.open_side(baseline_spec, kw["out"]) if baseline_spec else None
    points = gate.trend_points(
        sides, base, min_effect=kw["min_effect"] / 100, alpha=kw["alpha"], window=kw["window"]
    )
    found = [
        [p.name, r["verdict"], r["case"], r["metric"], f"{r['change_pct']:+.1f}%"]
        for p in points
        for r in p.steps.to_dict("records")
    ]
    click.echo(f"gpuprof trend: {len(points)} runs, {len(found)} step(s)")
    if found:
        click.echo(fixed_width([["run", "verdict", "case", "metric", "change"], *found], left=4))
    if target is not None:
        # deferred: loads pandas, plotly, scipy
        from gpuprof.gate.compare import render_trend, write_page

        baseline_values = base.measured.values if base is not None else None
        html = render_trend(points, baseline_values, [], method_lines())
        click.echo(str(write_page(html, target)))


GATE_COMMANDS = (baseline, check, compare, trend)
