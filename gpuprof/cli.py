"""The `gpuprof` command: a thin click layer that parses, calls one library function, and maps
errors to exit codes (0 ok, 1 failure, 2 usage, 3 could not measure). Heavy modules (torch,
plotly) are imported inside the commands that need them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import export_cli, registry
from gpuprof.errors import GpuprofError, MeasurementError, UsageError
from gpuprof.export_cli import EXPORT_COMMANDS
from gpuprof.gate_cli import GATE_COMMANDS
from gpuprof.launch import LAUNCHERS
from gpuprof.options import (
    all_probe_options,
    out_option,
    pop_probe_options,
    probe_options,
    stack,
)
from gpuprof.params import csv
from gpuprof.plan import DEVICES, SUITES
from gpuprof.predict_cli import PREDICT_COMMANDS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuprof")
@click.option("--debug", is_flag=True, help="show tracebacks on errors (any command)")
def cli(debug: bool) -> None:
    """GPU cluster profiler: collectives, links, ceilings and training micro-benchmarks."""


def _launch_options(func: Any) -> Any:
    return stack(
        click.option(
            "--nodes", default=1, show_default=True, type=click.IntRange(1, 4096), help="nodes"
        ),
        click.option("--gpus", type=int, help="ranks per node [default: GPUs, or 2 on CPU]"),
        click.option("--suite", default="quick", show_default=True, type=click.Choice(SUITES)),
        click.option("--device", default="auto", show_default=True, type=click.Choice(DEVICES)),
        out_option,
        click.option(
            "--timeout",
            default=300.0,
            show_default=True,
            type=float,
            help="seconds one case may take before its rank counts as hung",
        ),
        click.option(
            "--launcher",
            default="auto",
            show_default=True,
            type=click.Choice(LAUNCHERS),
            help="auto: torchrun environment, else Slurm allocation, else local",
        ),
        click.option(
            "--node-rank",
            default=0,
            show_default=True,
            type=int,
            help="manual launcher: this node's rank (0 holds the run)",
        ),
        click.option("--master-addr", help="manual launcher: node 0's address"),
        click.option(
            "--master-port",
            type=click.IntRange(1, 65535),
            help="rendezvous port [default: 29500, local: free]",
        ),
        click.option(
            "--force",
            is_flag=True,
            help="allow more CPU ranks per node than 4 per core",
        ),
        click.option(
            "--resume",
            "resume",
            metavar="RUN",
            help="measure only the cases RUN is missing, with RUN's own plan",
        ),
        click.option(
            "--telemetry-hz",
            default=10.0,
            show_default=True,
            type=float,
            help="samples per second of each node's NVML and host counters",
        ),
        click.option(
            "--link-gbps",
            type=click.FloatRange(0, min_open=True),
            help="each node's network rate in Gbit/s for the time estimate, where the NIC's "
            "line rate is not what the path gives (shaped or shared links) [default: the NIC's]",
        ),
        click.option(
            "--prom-textfile",
            type=click.Path(dir_okay=False),
            help="when the run ends, write its Prometheus textfile here (node_exporter)",
        ),
        click.option("--no-telemetry", is_flag=True, help="do not sample counters"),
        click.option("--no-report", is_flag=True, help="skip the HTML report"),
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            help="no live progress line and no line per case (the end result still prints)",
        ),
        click.option("--dry-run", is_flag=True, help="print the launch commands; write nothing"),
        click.option(
            "--repeats",
            default=1,
            show_default=True,
            type=click.IntRange(1, 100),
            help="runs of the plan, each its own launch and run folder (a baseline needs the "
            "spread between runs)",
        ),
    )(func)


def _request(probes: tuple[str, ...], tag: str, opts: dict[str, Any], kw: dict[str, Any]) -> Any:
    """The sweep request from a command's parsed options."""
    from gpuprof.runner import SweepRequest

    telemetry_hz = kw.pop("telemetry_hz")
    if kw.pop("no_telemetry"):
        telemetry_hz = 0.0
    argv = (click.get_current_context().obj or {}).get("argv", sys.argv)
    return SweepRequest(
        probes=probes,
        opts=opts,
        tag=tag,
        argv=argv,
        out=Path(kw.pop("out")),
        report=not kw.pop("no_report"),
        telemetry_hz=telemetry_hz,
        **kw,
    )


def _sweep(
    probes: tuple[str, ...], tag: str, opts: dict[str, Any], kw: dict[str, Any], tables: bool
) -> list[Path]:
    """Measure `--repeats` times, each run its own launch and folder (or print the launch
    commands), and say how each ended; the run folders made, in order."""
    from gpuprof import runner

    dry, repeats = kw.pop("dry_run"), kw.pop("repeats")
    request = _request(probes, tag, opts, kw)
    if repeats > 1 and request.resume is not None:
        raise UsageError("--repeats cannot be combined with --resume", "resume one run at a time")
    if dry:
        click.echo("\n".join(runner.dry_run(request)))
        return []
    made = []
    for _ in range(repeats):
        result = runner.sweep(request)
        _say(request, result, tables)
        if result.run_dir is not None and result.home:
            made.append(result.run_dir)
    return made


def _say(request: Any, result: Any, tables: bool) -> None:
    """How one sweep ended: its tables or report on the home node; an error if incomplete."""
    if result.note:
        click.echo(f"gpuprof: {result.note}", err=True)
        return
    if result.silent:
        return
    if result.overrun:
        click.echo(f"gpuprof: note: {result.overrun}", err=True)
    if not result.home:
        click.echo(
            f"node {request.node_rank}: {result.status}; this node's shards are in "
            f"{result.run_dir}; node 0 holds the run"
        )
    else:
        if tables and result.run_dir is not None:
            from gpuprof.reports.text import run_tables

            for text in run_tables(result.run_dir):
                click.echo(text)
        click.echo(str(result.report or result.run_dir))
    if result.status != "complete":
        first = result.failures[0] if result.failures else {}
        if first.get("probe") == "preflight":
            raise GpuprofError(
                f"preflight failed: {first.get('error')}", "make the nodes match, then run again"
            )
        raise MeasurementError(
            f"run {result.status}: {_who(first)}{first.get('error') or 'unknown error'}",
            f"completed cases are kept in {result.run_dir}",
        )


def _who(failure: dict[str, Any]) -> str:
    """'rank 1 on host, ddp case default: ' with only the parts that are known."""
    parts = []
    if failure.get("rank") is not None:
        host = f" on {failure['host']}" if failure.get("host") else ""
        parts.append(f"rank {failure['rank']}{host}")
    if failure.get("probe"):
        case = f" case {failure['case_id']}" if failure.get("case_id") else ""
        parts.append(f"{failure['probe']}{case}")
    return ", ".join(parts) + ": " if parts else ""


@cli.command()
@_launch_options
@click.option(
    "--probes",
    help=f"probes to run [default: {','.join(registry.suite_probes('quick', 'cpu'))}; the "
    f"standard and full suites add {','.join(registry.beyond_quick())}; the ci suite: "
    f"{','.join(registry.suite_probes('ci', 'cpu'))} on CPU, "
    f"{','.join(registry.suite_probes('ci', 'cuda'))} on GPU]",
)
@click.option("--tag", default="sweep", show_default=True, help="name part of the run folder")
@all_probe_options
def sweep(probes: str | None, tag: str, **kwargs: Any) -> None:
    """Run every probe across all ranks and write a run folder and an HTML report.

    Example: gpuprof sweep --nodes 1 --gpus 2 --suite quick
    """
    opts = pop_probe_options(kwargs)
    try:
        names = () if probes is None else csv(probes)
    except ValueError:
        raise UsageError(f"invalid --probes {probes!r}", "e.g. --probes collectives,p2p") from None
    _sweep(names, tag, opts, kwargs, tables=False)


@cli.group()
def run() -> None:
    """Run one probe, like one nccl-tests binary, and print its table."""


def _run_probe_command(probe: str) -> None:
    """`gpuprof run PROBE`: the sweep machinery for one probe, printing its table."""

    @run.command(probe, help=registry.get(probe).help)
    @_launch_options
    @click.option("--tag", default=probe, show_default=True)
    @probe_options(probe)
    def command(tag: str, **kwargs: Any) -> None:
        opts = pop_probe_options(kwargs)
        _sweep((probe,), tag, opts, kwargs, tables=True)


for _name in registry.names():
    _run_probe_command(_name)


@cli.command()
@click.argument("run_spec", metavar="RUN")
@click.option(
    "--table",
    default=registry.names()[0],
    show_default=True,
    type=click.Choice(registry.names()),
    help="which probe's summary",
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
def show(run_spec: str, table: str, fmt: str, out: str) -> None:
    """Print one summary row per case of a run's table.

    Example: gpuprof show latest --table collectives --format json
    """
    if fmt == "nccl-tests":
        click.echo(export_cli.nccl_tests_of(run_spec, out, table), nl=False)
        return
    from gpuprof.analysis.summary import summarize_run
    from gpuprof.reports.text import format_table
    from gpuprof.store import open_run

    run_obj = open_run(run_spec, out)
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


@cli.command()
@click.argument("run_spec", metavar="RUN")
@click.option("-o", "output", type=click.Path(), help="where to write [default: RUN/report.html]")
@out_option
def report(run_spec: str, output: str | None, out: str) -> None:
    """Write the self-contained HTML report of a run (a run still running, or whose launcher
    died, is read from its shards; nothing in the run changes but report.html).

    Example: gpuprof report latest -o /tmp/report.html
    """
    from gpuprof.reports.html import write_report
    from gpuprof.store import open_run

    run_obj = open_run(run_spec, out)
    target = Path(output) if output else None
    if target is not None and not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: {target.parent} is not a folder")
    click.echo(str(write_report(run_obj, target)))


@cli.command()
@click.argument("run_spec", metavar="RUN")
@out_option
def consolidate(run_spec: str, out: str) -> None:
    """Write a run's tables (<table>.parquet) from its shards, e.g. after copying shards from
    the nodes; runs are consolidated when they end, so this is rarely needed.

    Example: gpuprof consolidate latest
    """
    from gpuprof.store import open_run
    from gpuprof.tables import consolidate as write_tables

    run_obj = open_run(run_spec, out)
    if run_obj.status == "running":
        raise UsageError(f"run {run_obj.path} is still running", "consolidate it after it ends")
    for path in write_tables(run_obj.path).values():
        click.echo(str(path))


@cli.command("env")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
def env_command(fmt: str) -> int:
    """Versions, devices, NICs and preflight checks of this machine (exit 1 if one fails).

    Example: gpuprof env --format json
    """
    from gpuprof import env as gpuenv

    info = gpuenv.describe()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(gpuenv.format_description(info))
    failed = info["preflight"]
    if failed:
        click.echo(f"gpuprof: {len(failed)} check(s) failed: {'; '.join(failed)}", err=True)
    return 1 if failed else 0


for _command in (*GATE_COMMANDS, *PREDICT_COMMANDS, *EXPORT_COMMANDS):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one-line errors; exit 0 ok, 1 failure, 2 usage, 3 not measured.
    `--debug` (anywhere on the line) adds the traceback and keeps the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        result = cli.main(
            args=args, prog_name="gpuprof", standalone_mode=False, obj={"argv": ["gpuprof", *args]}
        )
    except GpuprofError as exc:
        return _fail(exc.one_line(), exc.exit_code, debug)
    except click.exceptions.Abort:
        click.echo("gpuprof: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        code = 2 if isinstance(exc, click.UsageError) else exc.exit_code
        return _fail(exc.format_message(), code, debug)
    except Exception as exc:  # a bug: still one line, the traceback with --debug
        detail = f"internal error: {type(exc).__name__}: {exc}"
        hint = "" if debug else " (rerun with --debug for the traceback)"
        return _fail(detail + hint, 1, debug)
    return result if isinstance(result, int) else 0


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    click.echo(f"gpuprof: error: {message}", err=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
