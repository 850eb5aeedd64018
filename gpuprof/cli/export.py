"""`gpuprof export`: a run's numbers in the formats other tools read (nccl-tests' output layout;
pandas and the summaries are imported inside the commands)."""

from __future__ import annotations

from pathlib import Path

import click

from gpuprof.cli.options import out_option
from gpuprof.errors import UsageError


def nccl_tests_of(run_spec: str, out: str, table: str | None = None) -> str:
    """The run's nccl-tests-shaped tables in nccl-tests' layout (`table`: one probe's only)."""
    # deferred: loads pandas
    from gpuprof.reports.nccl_tests import run_text
    from gpuprof.runs.store import open_run

    return run_text(open_run(run_spec, out), table)


def _write(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    target = Path(output)
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: {target.parent} is not a folder")
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror}") from None
    click.echo(str(target))


@click.group()
def export() -> None:
    """Write a run's numbers in another tool's format."""


@export.command("nccl-tests")
@click.argument("run_spec", metavar="RUN")
@click.option("-o", "output", type=click.Path(), help="file to write [default: stdout]")
@out_option
def export_nccl_tests(run_spec: str, output: str | None, out: str) -> None:
    """The collectives (and MoE dispatches with equal splits, as alltoall) in nccl-tests'
    output layout (one block per op, dtype, scope and world size, like one run of <op>_perf),
    for scripts that parse nccl-tests.

    Example: gpuprof export nccl-tests latest -o all_reduce.txt
    """
    _write(nccl_tests_of(run_spec, out), output)


@export.command("prometheus")
@click.argument("run_spec", metavar="RUN")
@click.option("-o", "output", type=click.Path(), help="file to write [default: stdout]")
@out_option
def export_prometheus(run_spec: str, output: str | None, out: str) -> None:
    """The run in Prometheus' text format (node_exporter's textfile collector): busbw per
    op/size/scope, p2p bandwidth and latency per pair, ceilings, DDP efficiency, pipeline
    bubbles, run status and time, labelled by run, GPU model and where measured.

    Example: gpuprof export prometheus latest -o /var/lib/node_exporter/textfile/gpuprof.prom
    """
    # deferred: loads pandas
    from gpuprof.reports.prometheus import check_textfile_path, write_textfile
    from gpuprof.runs.store import open_run

    run = open_run(run_spec, out)
    if output is None:
        # deferred: loads pandas
        from gpuprof.analysis.summary import Analyzed
        from gpuprof.reports.prometheus import prometheus_text

        click.echo(prometheus_text(Analyzed(run)), nl=False)
        return
    target = Path(output)
    check_textfile_path(target)
    click.echo(str(write_textfile(run.path, target)))


EXPORT_COMMANDS = (export,)
