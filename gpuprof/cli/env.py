"""`gpuprof env`: this machine's versions, devices, NICs and preflight checks."""

from __future__ import annotations

import json

import click

from gpuprof.machine import node


@click.command("env")
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
def env_command(fmt: str) -> int:
    """Versions, devices, NICs and preflight checks of this machine (exit 1 if one fails).

    Example: gpuprof env --format json
    """
    info = node.describe()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(node.format_description(info))
    failed = info["preflight"]
    if failed:
        click.echo(f"gpuprof: {len(failed)} check(s) failed: {'; '.join(failed)}", err=True)
    return 1 if failed else 0
