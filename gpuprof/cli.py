"""The `gpuprof` command: a thin click layer that parses, calls one library function, and maps
errors to exit codes (0 ok, 1 failure, 2 usage, 3 could not measure). Heavy modules (torch,
plotly) are imported inside the commands that need them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpuprof.errors import GpuprofError, MeasurementError, UsageError
from gpuprof.options import collectives_options, collectives_params, pop_collectives, stack
from gpuprof.plan import DEVICES, PROBES, SUITES

OUT_HELP = "folder that holds the runs"


def _out_option(func: Any) -> Any:
    return click.option(
        "--out", default="reports", show_default=True, type=click.Path(), help=OUT_HELP
    )(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuprof")
@click.option("--debug", is_flag=True, help="show tracebacks on errors")
def cli(debug: bool) -> None:
    """GPU cluster profiler: collectives, links, ceilings and training micro-benchmarks."""


def _launch_options(func: Any) -> Any:
    return stack(
        click.option("--nodes", default=1, show_default=True, type=int, help="nodes"),
        click.option("--gpus", type=int, help="ranks per node [default: GPUs, or 2 on CPU]"),
        click.option("--suite", default="quick", show_default=True, type=click.Choice(SUITES)),
        click.option("--device", default="auto", show_default=True, type=click.Choice(DEVICES)),
        _out_option,
        click.option(
            "--timeout",
            default=300.0,
            show_default=True,
            type=float,
            help="seconds one case may take before its rank counts as hung",
        ),
        click.option(
            "--launcher", default="auto", show_default=True, type=click.Choice(["auto", "local"])
        ),
        click.option("--no-report", is_flag=True, help="skip the HTML report"),
        click.option("--dry-run", is_flag=True, help="print the launch commands; write nothing"),
    )(func)


def _sweep(
    probes: tuple[str, ...],
    tag: str,
    coll_opts: dict[str, Any],
    *,
    nodes: int,
    gpus: int | None,
    suite: str,
    device: str,
    out: str,
    timeout: float,
    launcher: str,
    no_report: bool,
    dry_run: bool,
    print_table: bool = False,
) -> None:
    from gpuprof.launch import launch_commands, plan_device, run_sweep
    from gpuprof.plan import SweepPlan, suite_collectives
    from gpuprof.store import check_out_dir, check_tag

    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be at least 1, got {gpus}", "give the ranks per node")
    check_tag(tag)
    resolved, visible = plan_device(device)
    if gpus is None:
        gpus = visible if resolved == "cuda" else 2
    if resolved == "cuda" and gpus > visible:
        raise UsageError(
            f"--gpus {gpus} but only {visible} GPU(s) are visible", f"use --gpus {visible} or fewer"
        )
    if nodes != 1:
        raise UsageError(
            f"--nodes {nodes} needs a multi-node launcher", "this build runs one node (--nodes 1)"
        )
    params = collectives_params(suite_collectives(suite, resolved), coll_opts)
    plan = SweepPlan(
        num_nodes=nodes,
        gpus_per_node=gpus,
        device=resolved,
        suite=suite,
        probes=probes,
        collectives=params,
        case_timeout_s=timeout,
    )
    check_out_dir(Path(out))
    if dry_run:
        for launch in launch_commands(plan, Path(out) / f"NNNN_{tag}"):
            click.echo(launch.shell())
        return
    argv = (click.get_current_context().obj or {}).get("argv", sys.argv)
    result = run_sweep(plan, Path(out), tag, argv, report=not no_report)
    if print_table:
        from gpuprof.analysis.bandwidth import summarize_collectives
        from gpuprof.reports.text import format_table
        from gpuprof.store import Run

        run = Run(result.run_dir)
        if "collectives" in run.tables():
            click.echo(format_table(summarize_collectives(run.table("collectives"))))
    click.echo(str(result.report or result.run_dir))
    if result.status != "complete":
        first = result.failures[0] if result.failures else {}
        raise MeasurementError(
            f"run {result.status}: rank {first.get('rank')} on {first.get('host')}, "
            f"{first.get('probe')} case {first.get('case_id')}: {first.get('error')}",
            f"completed cases are kept in {result.run_dir}",
        )


@cli.command()
@_launch_options
@click.option("--probes", default=",".join(PROBES), show_default=True, help="probes to run")
@click.option("--tag", default="sweep", show_default=True, help="name part of the run folder")
@collectives_options
def sweep(probes: str, tag: str, **kwargs: Any) -> None:
    """Run every probe across all ranks and write a run folder and an HTML report.

    Example: gpuprof sweep --nodes 1 --gpus 2 --suite quick
    """
    coll = pop_collectives(kwargs)
    names = tuple(p.strip() for p in probes.split(",") if p.strip())
    _sweep(names, tag, coll, **kwargs)


@cli.group()
def run() -> None:
    """Run one probe, like one nccl-tests binary, and print its table."""


@run.command("collectives")
@_launch_options
@click.option("--tag", default="collectives", show_default=True)
@collectives_options
def run_collectives(tag: str, **kwargs: Any) -> None:
    """Collectives with nccl-tests semantics.

    Example: gpuprof run collectives --gpus 2 -o all_reduce -b 1K -e 64M -f 4
    """
    coll = pop_collectives(kwargs)
    _sweep(("collectives",), tag, coll, print_table=True, **kwargs)


@cli.command()
@click.argument("run_spec", metavar="RUN")
@click.option("--table", default="collectives", show_default=True)
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "json", "csv"]),
)
@_out_option
def show(run_spec: str, table: str, fmt: str, out: str) -> None:
    """Print one summary row per case of a run's table.

    Example: gpuprof show latest --table collectives --format json
    """
    from gpuprof.analysis.bandwidth import summarize_collectives
    from gpuprof.reports.text import format_table
    from gpuprof.store import open_run

    run_obj = open_run(run_spec, out)
    if table != "collectives":
        raise UsageError(f"no summary for table {table!r}", "tables: collectives")
    summary = summarize_collectives(run_obj.table(table))
    if fmt == "json":
        click.echo(summary.to_json(orient="records", indent=1))
    elif fmt == "csv":
        click.echo(summary.to_csv(index=False), nl=False)
    else:
        click.echo(format_table(summary))


@cli.command()
@click.argument("run_spec", metavar="RUN")
@click.option("-o", "output", type=click.Path(), help="where to write [default: RUN/report.html]")
@_out_option
def report(run_spec: str, output: str | None, out: str) -> None:
    """Write the self-contained HTML report of a run (consolidating a run that died).

    Example: gpuprof report latest -o /tmp/report.html
    """
    from gpuprof.reports.html import write_report
    from gpuprof.store import open_run

    run_obj = open_run(run_spec, out)
    target = Path(output) if output else None
    if target is not None and not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: {target.parent} is not a folder")
    click.echo(str(write_report(run_obj, target)))


@cli.command("env")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
def env_command(fmt: str) -> None:
    """Versions, devices and NICs of this machine.

    Example: gpuprof env --format json
    """
    from gpuprof import env as gpuenv

    info = gpuenv.describe()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(gpuenv.format_description(info))


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one-line errors, exit codes per DESIGN.md section 1."""
    args = sys.argv[1:] if argv is None else argv
    try:
        result = cli.main(
            args=args, prog_name="gpuprof", standalone_mode=False, obj={"argv": ["gpuprof", *args]}
        )
    except GpuprofError as exc:
        if "--debug" in args:
            raise
        click.echo(f"gpuprof: error: {exc.one_line()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("gpuprof: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"gpuprof: error: {exc.format_message()}", err=True)
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
