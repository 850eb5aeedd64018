"""The measuring commands: `gpuprof sweep` (every probe) and `gpuprof run PROBE` (one probe,
like one nccl-tests binary). Each parses its options into a sweep request and hands it to
`gpuprof.launch.runner`; torch is imported only there, when a launch starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import registry
from gpuprof.cli.options import (
    all_probe_options,
    headline,
    launch_options,
    pop_probe_options,
    probe_options,
)
from gpuprof.errors import GpuprofError, MeasurementError, UsageError
from gpuprof.params import csv


def _request(probes: tuple[str, ...], tag: str, opts: dict[str, Any], kw: dict[str, Any]) -> Any:
    """The sweep request from a command's parsed options."""
    # deferred: loads pandas
    from gpuprof.launch.runner import SweepRequest

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
    # deferred: loads pandas
    from gpuprof.launch import runner

    dry, repeats, fmt = kw.pop("dry_run"), kw.pop("repeats"), kw.pop("fmt")
    request = _request(probes, tag, opts, kw)
    if repeats > 1 and request.resume is not None:
        raise UsageError("--repeats cannot be combined with --resume", "resume one run at a time")
    if dry:
        lines = runner.dry_run(request)
        if repeats > 1:  # each repeat is its own launch of the same plan
            total = next((ln for ln in lines if ln.startswith("# in all about ")), None)
            if total is not None:
                seconds = float(total.split()[4])
                lines.insert(
                    lines.index(total) + 1,
                    f"# --repeats {repeats}: {repeats} launches, about {repeats * seconds:.0f} s",
                )
        click.echo("\n".join(lines))
        return []
    made = []
    for _ in range(repeats):
        result = runner.sweep(request)
        _say(request, result, tables and fmt == "table", fmt)
        if result.run_dir is not None and result.home:
            made.append(result.run_dir)
    return made


def _say(request: Any, result: Any, tables: bool, fmt: str = "table") -> None:
    """How one sweep ended: its tables or report on the home node (json: one object with the
    run, its status, the report, its verdict and findings, and the failures); an error if
    incomplete."""
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
            # deferred: loads pandas
            from gpuprof.reports.text import run_tables

            for text in run_tables(result.run_dir):
                click.echo(text)
        if fmt == "json":
            summary = {
                "run": str(result.run_dir),
                "status": result.status,
                "report": str(result.report) if result.report else None,
                "verdict": result.verdict,
                "findings": list(result.findings),
                "failures": result.failures,
                "took_s": result.took_s,
                "estimated_s": result.estimated_s,
            }
            click.echo(json.dumps(summary, default=str))
        else:
            if result.verdict and not request.quiet:  # the verdict before the path (stderr)
                click.echo("\n".join(headline(result.verdict, result.findings)), err=True)
            if result.took_s is not None and result.estimated_s and not request.quiet:
                click.echo(_timing(result.took_s, result.estimated_s), err=True)
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


def _timing(took_s: float, estimated_s: float) -> str:
    """How long the sweep took against the dry run's estimate."""
    return (
        f"measured in {took_s:.0f} s; the dry run estimated {estimated_s:.0f} s "
        f"({took_s / estimated_s:.2f}x)"
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


@click.command()
@launch_options
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


@click.group()
def run() -> None:
    """Run one probe, like one nccl-tests binary, and print its table."""


def _run_probe_command(probe: str) -> None:
    """`gpuprof run PROBE`: the sweep machinery for one probe, printing its table."""

    @run.command(probe, help=registry.get(probe).help)
    @launch_options
    @click.option("--tag", default=probe, show_default=True)
    @probe_options(probe)
    def command(tag: str, **kwargs: Any) -> None:
        opts = pop_probe_options(kwargs)
        _sweep((probe,), tag, opts, kwargs, tables=True)


for _name in registry.names():
    _run_probe_command(_name)
