"""The reading commands: `gpuprof show`, `report`, `consolidate` and `runs` (no torch: a run is
read from its tables or shards with pandas, imported inside the commands)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuprof import registry
from gpuprof.cli.export import nccl_tests_of
from gpuprof.cli.options import headline, out_option
from gpuprof.errors import UsageError
from gpuprof.text import fixed_width
from gpuprof.units import format_size


@click.command()
@click.argument("run_spec", metavar="RUN")
@click.option(
    "--table",
    default=None,
    type=click.Choice(registry.names()),
    help="which probe's summary [default: the run's first probe, in a sweep's order]",
)
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "json", "csv", "nccl-tests"]),
    help="nccl-tests: the collectives in nccl-tests' own output layout",
)
@out_option
def show(run_spec: str, table: str | None, fmt: str, out: str) -> None:
    """Print one summary row per case of a run's table.

    Example: gpuprof show latest --table collectives --format json
    """
    if fmt == "nccl-tests":
        click.echo(nccl_tests_of(run_spec, out, table), nl=False)
        return
    # deferred: loads pandas
    from gpuprof.analysis.summary import summarize_run
    from gpuprof.reports.text import format_table
    from gpuprof.runs.store import open_run

    run_obj = open_run(run_spec, out)
    if table is None:  # the run's first probe (a `run moe` has no collectives)
        measured = [
            s.name for s in registry.specs().values() if set(s.table_names) <= set(run_obj.tables())
        ]
        table = measured[0] if measured else registry.names()[0]
    missing = [t for t in registry.get(table).table_names if t not in run_obj.tables()]
    if missing:
        have = ", ".join(run_obj.tables()) or "none"
        raise UsageError(f"run {run_obj.path} has no table {missing[0]!r}", f"tables: {have}")
    summary = summarize_run(run_obj, table)
    if fmt == "json":
        click.echo(summary.to_json(orient="records", indent=1))
    elif fmt == "csv":
        click.echo(summary.to_csv(index=False), nl=False)
    else:
        click.echo(format_table(summary, table))


@click.command()
@click.argument("run_spec", metavar="RUN")
@click.option("-o", "output", type=click.Path(), help="where to write [default: RUN/report.html]")
@out_option
def report(run_spec: str, output: str | None, out: str) -> None:
    """Write the self-contained HTML report of a run (a run still running, or whose launcher
    died, is read from its shards; nothing in the run changes but report.html).

    Example: gpuprof report latest -o /tmp/report.html
    """
    # deferred: loads pandas, plotly
    from gpuprof.reports.html import write_report_headline
    from gpuprof.runs.store import open_run

    run_obj = open_run(run_spec, out)
    target = Path(output) if output else None
    if target is not None and not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: {target.parent} is not a folder")
    path, verdict, found = write_report_headline(run_obj, target)
    click.echo("\n".join(headline(verdict, found)), err=True)  # as a sweep ends: stderr
    click.echo(str(path))


@click.command()
@click.argument("run_spec", metavar="RUN")
@out_option
def consolidate(run_spec: str, out: str) -> None:
    """Write a run's tables (<table>.parquet) from its shards, e.g. after copying shards from
    the nodes; runs are consolidated when they end, so this is rarely needed.

    Example: gpuprof consolidate latest
    """
    # deferred: loads pandas
    from gpuprof.runs.store import open_run
    from gpuprof.runs.tables import consolidate as write_tables

    run_obj = open_run(run_spec, out)
    if run_obj.status == "running":
        raise UsageError(f"run {run_obj.path} is still running", "consolidate it after it ends")
    for path in write_tables(run_obj.path).values():
        click.echo(str(path))


@click.command()
@click.argument("folder", required=False, metavar="[DIR]")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
def runs(folder: str | None, fmt: str) -> None:
    """List the runs in DIR (default: ./reports): id, start time, suite, nodes x ranks,
    device, status and size.

    Example: gpuprof runs reports --format json
    """
    # deferred: loads pandas
    from gpuprof.runs.store import list_runs

    path = Path(folder or "reports")
    if not path.is_dir():
        raise UsageError(
            f"no folder {path}", "give the folder that holds the runs (--out of sweep)"
        )
    found = list_runs(path)
    if fmt == "json":
        click.echo(json.dumps(found, indent=1))
        return
    if not found:
        click.echo(f"no runs in {path}")
        return
    rows = [["run", "started", "suite", "nodes x ranks", "device", "status", "size"]]
    rows += [
        [
            r["run"],
            str(r["started"] or "-"),
            str(r["suite"] or "-"),
            f"{r['nodes'] or '?'} x {r['ranks'] or '?'}",
            str(r["device"] or "-"),
            str(r["status"] or "-"),
            format_size(r["bytes"]),
        ]
        for r in found
    ]
    click.echo(fixed_width(rows))
