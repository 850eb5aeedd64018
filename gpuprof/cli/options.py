"""Click options shared by the commands: every probe's, made from the registry's declarations
(`gpuprof sweep`, `gpuprof run <probe>`, `gpuprof check`), and the launch options of every
command that measures."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from gpuprof import registry
from gpuprof.launch.launchers import LAUNCHERS
from gpuprof.registry import ITERATION_OPTIONS, Option
from gpuprof.runs.plan import DEVICES, SUITES

F = TypeVar("F", bound=Callable[..., Any])


def stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply decorators in the order written (the first is outermost)."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def click_option(option: Option) -> Callable[[F], F]:
    """One declared option as a click option whose default None means "not given"."""
    flags = [f"{option.flag}/--no-{option.flag[2:]}" if option.boolean else option.flag]
    if option.short:
        flags.append(option.short)
    kind = click.Choice(list(option.type)) if isinstance(option.type, tuple) else option.type
    return click.option(*flags, option.name, type=kind, default=None, help=option.help)


def _decorate(options: Iterable[Option]) -> Callable[[F], F]:
    return stack(*(click_option(o) for o in options))


def probe_options(name: str) -> Callable[[F], F]:
    """The options of one probe, iteration options included."""
    return _decorate((*registry.get(name).options, *ITERATION_OPTIONS))


def all_probe_options(func: F) -> F:
    """Every probe's options (for `gpuprof sweep`)."""
    return _decorate(registry.all_options())(func)


def pop_probe_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove every probe option from a command's kwargs."""
    return {key: kwargs.pop(key) for key in registry.option_names() if key in kwargs}


def out_option(func: F) -> F:
    """--out: the folder that holds the runs."""
    return click.option(
        "--out",
        default="reports",
        show_default=True,
        type=click.Path(),
        help="folder that holds the runs",
    )(func)


def launch_options(func: F) -> F:
    """What every measuring command takes: the job's shape, where runs go, how to launch."""
    return stack(
        click.option(
            "--nodes", default=1, show_default=True, type=click.IntRange(1, 4096), help="nodes"
        ),
        click.option(
            "--gpus",
            "--gpus-per-node",  # as Slurm spells it
            "gpus",
            type=int,
            help="ranks per node [default: GPUs, or 2 on CPU]",
        ),
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
            "--format",
            "fmt",
            default="table",
            show_default=True,
            type=click.Choice(["table", "json"]),
            help="how the end result prints (json: one object per run)",
        ),
        click.option(
            "--repeats",
            default=1,
            show_default=True,
            type=click.IntRange(1, 100),
            help="runs of the plan, each its own launch and run folder (a baseline needs the "
            "spread between runs)",
        ),
    )(func)


HEADLINE_FINDINGS = 3  # findings printed in the terminal after a report is written


def headline(verdict: str, findings: Iterable[str]) -> list[str]:
    """The report's verdict and its first findings, and how many more there are."""
    found = list(findings)
    if found:  # the findings follow whole: the verdict's summary of the first is not repeated
        verdict = verdict.split(" First finding: ")[0]
    lines = [verdict, *(f"- {line}" for line in found[:HEADLINE_FINDINGS])]
    if len(found) > HEADLINE_FINDINGS:
        lines.append(f"({len(found) - HEADLINE_FINDINGS} more finding(s) in the report)")
    return lines
