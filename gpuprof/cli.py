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
from gpuprof.launch import LAUNCHERS
from gpuprof.options import (
    all_probe_options,
    pop_probe_options,
    probe_options,
    stack,
    suite_params,
)
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
            "--master-port", type=int, help="rendezvous port [default: 29500, local: free]"
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
        click.option("--no-telemetry", is_flag=True, help="do not sample counters"),
        click.option("--no-report", is_flag=True, help="skip the HTML report"),
        click.option("--dry-run", is_flag=True, help="print the launch commands; write nothing"),
    )(func)


def _plan(
    probes: tuple[str, ...],
    coll_opts: dict[str, Any],
    *,
    nodes: int,
    gpus: int | None,
    suite: str,
    device: str,
    timeout: float,
    telemetry_hz: float,
    no_telemetry: bool,
) -> Any:
    from gpuprof.launch import plan_device
    from gpuprof.plan import SweepPlan

    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be at least 1, got {gpus}", "give the ranks per node")
    resolved, visible = plan_device(device)
    if gpus is None:
        gpus = visible if resolved == "cuda" else 2
    if resolved == "cuda" and gpus > visible:
        raise UsageError(
            f"--gpus {gpus} but only {visible} GPU(s) are visible", f"use --gpus {visible} or fewer"
        )
    return SweepPlan(
        num_nodes=nodes,
        gpus_per_node=gpus,
        device=resolved,
        suite=suite,
        probes=probes,
        case_timeout_s=timeout,
        telemetry_hz=0.0 if no_telemetry else telemetry_hz,
        **suite_params(suite, resolved, coll_opts),
    )


def _sweep(
    probes: tuple[str, ...],
    tag: str,
    coll_opts: dict[str, Any],
    *,
    launcher: str,
    node_rank: int,
    master_addr: str | None,
    master_port: int | None,
    out: str,
    no_report: bool,
    dry_run: bool,
    resume: str | None,
    print_table: bool = False,
    **plan_opts: Any,
) -> None:
    from gpuprof.launch import LaunchConfig, check_launch, dry_run_commands, resolve_launcher
    from gpuprof.store import check_out_dir, check_tag

    check_tag(tag)
    kind = resolve_launcher(launcher)
    if kind == "torchrun":  # started by torchrun on every rank: measure in this process
        from gpuprof.env import torchrun_sizes

        world, local = torchrun_sizes()
        plan_opts.update(nodes=max(1, world // local), gpus=local)
    resume_dir = None
    if resume is not None:
        from gpuprof.store import open_run, resume_plan

        run = open_run(resume, out)
        if run.status == "complete":
            click.echo(f"gpuprof: {run.path} is complete; nothing to resume", err=True)
            return
        resume_dir, plan = run.path, resume_plan(run.path)
    else:
        plan = _plan(probes, coll_opts, **plan_opts)
    check_out_dir(Path(out))
    argv = (click.get_current_context().obj or {}).get("argv", sys.argv)
    if kind == "torchrun":
        from gpuprof.probes.sweep import run_inline

        run_inline(plan, Path(out), tag, argv, print_table=print_table, report=not no_report)
        return
    cfg = check_launch(
        plan,
        LaunchConfig(
            launcher=kind, node_rank=node_rank, master_addr=master_addr, master_port=master_port
        ),
    )
    if dry_run:
        click.echo("\n".join(dry_run_commands(plan, cfg, Path(out))))
        return
    _finish(
        plan,
        cfg,
        Path(out),
        tag,
        argv,
        report=not no_report,
        print_table=print_table,
        resume=resume_dir,
    )


def _finish(
    plan: Any,
    cfg: Any,
    out: Path,
    tag: str,
    argv: list[str],
    *,
    report: bool,
    print_table: bool,
    resume: Path | None = None,
) -> None:
    from gpuprof.launch import run_sweep

    result = run_sweep(plan, cfg, out, tag, argv, report=report, resume=resume)
    if not result.home:
        click.echo(
            f"node {cfg.node_rank}: {result.status}; this node's shards are in "
            f"{result.run_dir}; node 0 holds the run"
        )
    elif print_table and result.run_dir is not None:
        from gpuprof.launch import print_tables

        print_tables(result.run_dir)
    if result.home:
        click.echo(str(result.report or result.run_dir))
    if result.status != "complete":
        first = result.failures[0] if result.failures else {}
        if first.get("probe") == "preflight":
            raise GpuprofError(
                f"preflight failed: {first.get('error')}", "make the nodes match, then run again"
            )
        raise MeasurementError(
            f"run {result.status}: rank {first.get('rank')} on {first.get('host')}, "
            f"{first.get('probe')} case {first.get('case_id')}: {first.get('error')}",
            f"completed cases are kept in {result.run_dir}",
        )


@cli.command()
@_launch_options
@click.option("--probes", default=",".join(PROBES), show_default=True, help="probes to run")
@click.option("--tag", default="sweep", show_default=True, help="name part of the run folder")
@all_probe_options
def sweep(probes: str, tag: str, **kwargs: Any) -> None:
    """Run every probe across all ranks and write a run folder and an HTML report.

    Example: gpuprof sweep --nodes 1 --gpus 2 --suite quick
    """
    coll = pop_probe_options(kwargs)
    names = tuple(p.strip() for p in probes.split(",") if p.strip())
    _sweep(names, tag, coll, **kwargs)


@cli.group()
def run() -> None:
    """Run one probe, like one nccl-tests binary, and print its table."""


def _run_probe_command(probe: str, doc: str) -> None:
    """`gpuprof run PROBE`: the sweep machinery for one probe, printing its table."""

    @run.command(probe, help=doc)
    @_launch_options
    @click.option("--tag", default=probe, show_default=True)
    @probe_options(probe)
    def command(tag: str, **kwargs: Any) -> None:
        opts = pop_probe_options(kwargs)
        _sweep((probe,), tag, opts, print_table=True, **kwargs)


_run_probe_command(
    "collectives",
    "Collectives with nccl-tests semantics.\n\n"
    "Example: gpuprof run collectives --gpus 2 -o all_reduce -b 1K -e 64M -f 4",
)
_run_probe_command(
    "p2p",
    "Bandwidth (uni- and bidirectional) and latency of every pair of ranks, classified by link."
    "\n\nExample: gpuprof run p2p --gpus 8 --p2p-bytes 256M",
)
_run_probe_command(
    "memory",
    "Copy bandwidth of each device alone: H2D/D2H pinned and pageable, D2D; host copy on CPU."
    "\n\nExample: gpuprof run memory --gpus 8 --copy-bytes 1G",
)
_run_probe_command(
    "compute",
    "Matmul throughput of each device alone per dtype (TFLOP/s, % of peak)."
    "\n\nExample: gpuprof run compute --gpus 8 --matmul-n 8192 --matmul-dtypes bfloat16,float8",
)
_run_probe_command(
    "ddp",
    "A DDP training step broken down (forward, backward, exposed communication, optimizer) by "
    "DDP's logging data and by A/B runs, per variant, with weak scaling over world sizes."
    "\n\nExample: gpuprof run ddp --gpus 8 --model-params 350M --ddp-variants "
    "default,bucket=100,hook=bf16,accum=4",
)
_run_probe_command(
    "pipeline",
    "Pipeline schedules (GPipe, 1F1B, interleaved, zero-bubble): per-micro-batch timeline, "
    "measured bubble against theory over a micro-batch sweep, stage imbalance."
    "\n\nExample: gpuprof run pipeline --gpus 4 --schedules GPipe,1F1B --micro-batches 4,8,16",
)


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
    from gpuprof.analysis.summary import SUMMARIZED, summarize_run
    from gpuprof.reports.text import format_table
    from gpuprof.store import open_run

    run_obj = open_run(run_spec, out)
    if table not in SUMMARIZED:
        raise UsageError(f"no summary for table {table!r}", f"tables: {', '.join(SUMMARIZED)}")
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
