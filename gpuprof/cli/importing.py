"""`gpuprof import`: other tools' results as runs (nccl-tests' output today)."""

from __future__ import annotations

from pathlib import Path

import click

from gpuprof.cli.options import out_option
from gpuprof.errors import UsageError
from gpuprof.machine.systems import hardware_names
from gpuprof.specs.collectives import SPEC


@click.group("import")
def import_group() -> None:
    """Read another tool's results as a run (then show, report, compare, check and predict
    work on it as on any run)."""


@import_group.command("nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--hardware",
    metavar="PRESET|FILE.toml",
    help=f"the system the logs were measured on ({hardware_names()}, or a .toml): "
    "kept in the run, so predict calibrates it",
)
@click.option(
    "--nodes", type=click.IntRange(1, None), help="nodes, where the log has no rank lines"
)
@click.option("--gpus", type=click.IntRange(1, None), help="GPUs per node, with --nodes")
@out_option
@click.pass_context
def import_nccl_tests(
    ctx: click.Context,
    logs: tuple[Path, ...],
    hardware: str | None,
    nodes: int | None,
    gpus: int | None,
    out: str,
) -> None:
    """nccl-tests output (all_reduce_perf and the others: one or several logs, several tests
    per log, -N cycles, -c 0, NCCL_DEBUG=INFO lines) as a run; prints the run's path (one
    run per job shape the logs hold). A log that breaks off keeps its complete rows and says
    where it stopped.

    Example: gpuprof import nccl-tests all_reduce_2n.log all_gather_2n.log --hardware aws-p5
    """
    # deferred: loads pandas
    from gpuprof.runs.imported import import_logs

    if (nodes is None) != (gpus is None):
        raise UsageError("--nodes and --gpus go together", "e.g. --nodes 2 --gpus 8")
    argv = (ctx.obj or {}).get("argv", [])
    for path in import_logs(list(logs), Path(out), argv, SPEC.name, hardware, nodes, gpus):
        click.echo(str(path))


IMPORT_COMMANDS = (import_group,)
