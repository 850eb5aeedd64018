"""The regression gate's reading commands: `gpuprof baseline`, `compare` and `trend` (a thin
click layer over `gpuprof.gate`; pandas and scipy are imported inside the commands).
`gpuprof check` is `gpuprof.cli.check`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from gpuprof import registry
from gpuprof.cli.options import out_option, stack
from gpuprof.errors import UsageError
from gpuprof.text import fixed_width


@click.command()
@click.argument("runs", metavar="RUN...", nargs=-1, required=True)
@click.option("-o", "output", required=True, type=click.Path(), help="baseline file to write")
@click.option(
    "--extend",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="a baseline file whose runs the new baseline holds too (-o may be the same file)",
)
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@out_option
def baseline(runs: tuple[str, ...], output: str, extend: str | None, fmt: str, out: str) -> None:
    """Write a baseline file (JSON, small enough to commit) from complete runs of one plan.

    A health baseline is best gathered over several windows (hours, days): runs of one window
    know its run-to-run noise, not how far a case drifts on its own from hour to hour.

    Examples: gpuprof sweep --suite ci --repeats 5 && gpuprof baseline 0001 0002 0003 0004 0005
    -o baseline.json; the next night: gpuprof baseline latest --extend baseline.json
    -o baseline.json
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate.baseline import write_baseline
    from gpuprof.gate.sides import WINDOW_S, span_s
    from gpuprof.runs.store import open_run

    opened = [open_run(spec, out) for spec in runs]
    data = write_baseline(opened, Path(output), Path(extend) if extend else None)
    span = span_s(data["runs"])
    count = len(data["runs"])
    if fmt == "json":  # what was written: file, case-metrics, runs, the time they span
        summary = {
            "baseline": output,
            "case_metrics": len(data["cases"]),
            "runs": count,
            "span_s": None if span is None else round(span, 1),
        }
        click.echo(json.dumps(summary, indent=1))
        return
    line = f"{output}: {len(data['cases'])} case-metrics from {count} run(s)"
    if count == 1:
        line += " (one run: thresholds will be --min-effect alone)"
    elif span is None:  # imported logs: when they ran is not known
        line += " (when they were measured is not known: no window said)"
    else:
        line += (
            f" measured over {span / 3600:.1f} h"
            if span >= 3600
            else f" within {span / 60:.0f} min"
        )
        if span < WINDOW_S:
            line += (
                " (one window: add runs of other hours or days with --extend, or a case's own "
                "drift between them may be named as a regression)"
            )
    click.echo(line)


def writable(path: str | None) -> Path | None:
    """An output file's path, refused before anything is measured if it cannot be written."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise UsageError(f"cannot write {target}", "give a file in an existing folder")
    return target


def gate_options(func: Any) -> Any:
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
@click.argument("side_a", metavar="A")
@click.argument("side_b", metavar="B")
@click.option("-o", "output", type=click.Path(), help="write the HTML page here")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@gate_options
@out_option
def compare(side_a: str, side_b: str, output: str | None, fmt: str, **kw: Any) -> None:
    """Two runs (or a baseline file and a run) side by side: every common case with its change
    and verdict (A is the reference); the cases only one side has are listed.

    Example: gpuprof compare 0003 0007 -o compare.html
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate import verdicts
    from gpuprof.gate.baseline import open_side
    from gpuprof.gate.check import environment_notes
    from gpuprof.gate.stats import compare as compare_sides
    from gpuprof.gate.stats import method_lines, verdict_counts

    target = writable(output)
    a, b = open_side(side_a, kw["out"]), open_side(side_b, kw["out"])
    notes = environment_notes(a, b, "the sides differ", "differs")
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
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@gate_options
@out_option
def trend(
    runs: tuple[str, ...], baseline_spec: str | None, output: str | None, fmt: str, **kw: Any
) -> None:
    """Each case's metrics across runs in order (CI artifacts of successive commits), with the
    runs where a step came in (against --baseline, or else against the runs before each).

    Example: gpuprof trend ci-artifacts/ --baseline baseline.json -o trend.html
    """
    # deferred: loads pandas, scipy
    from gpuprof.gate.baseline import open_side
    from gpuprof.gate.stats import method_lines
    from gpuprof.gate.trend import run_sides, trend_points

    target = writable(output)
    sides = run_sides(runs, kw["out"])
    base = open_side(baseline_spec, kw["out"]) if baseline_spec else None
    points = trend_points(
        sides, base, min_effect=kw["min_effect"] / 100, alpha=kw["alpha"], window=kw["window"]
    )
    found = [
        [p.name, r["verdict"], r["case"], r["metric"], f"{r['change_pct']:+.1f}%"]
        for p in points
        for r in p.steps.to_dict("records")
    ]
    if fmt == "json":  # runs in order; steps: run, verdict, case, metric, change_pct
        steps = [
            {"run": p.name, "verdict": r["verdict"], "case": r["case"], "metric": r["metric"],
             "change_pct": float(r["change_pct"])}
            for p in points
            for r in p.steps.to_dict("records")
        ]  # fmt: skip
        click.echo(json.dumps({"runs": [p.name for p in points], "steps": steps}, indent=1))
    else:
        click.echo(f"gpuprof trend: {len(points)} runs, {len(found)} step(s)")
        if found:
            rows = [["run", "verdict", "case", "metric", "change"], *found]
            click.echo(fixed_width(rows, left=4))
    if target is not None:
        # deferred: loads pandas, plotly, scipy
        from gpuprof.gate.compare import render_trend, write_page

        baseline_values = base.measured.values if base is not None else None
        html = render_trend(points, baseline_values, [], method_lines())
        click.echo(str(write_page(html, target)))


GATE_COMMANDS = (baseline, compare, trend)
