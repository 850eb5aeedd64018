"""The one main of every probe module: `torchrun ... -m gpuprof.probes.<probe> [options]`
measures that probe alone in the job torchrun started and prints its table, like one
nccl-tests binary. The probe's options come from its registry entry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import registry
from gpuprof.errors import GpuprofError
from gpuprof.options import pop_probe_options, probe_options
from gpuprof.plan import DEVICES, SUITES


def probe_main(probe: str, argv: list[str] | None = None) -> None:
    """Parse the probe's options, measure it in this torchrun job, print its table."""
    spec = registry.get(probe)

    @click.command(name=f"gpuprof.probes.{probe}", help=spec.help)
    @probe_options(probe)
    @click.option("--out", default="reports", show_default=True)
    @click.option("--tag", default=probe, show_default=True)
    @click.option("--device", default="auto", type=click.Choice(DEVICES))
    @click.option("--suite", default="quick", type=click.Choice(SUITES))
    @click.option("--timeout", default=300.0, show_default=True, help="seconds per case")
    def command(out: str, tag: str, device: str, suite: str, timeout: float, **kw: Any) -> None:
        from gpuprof.reports.text import run_tables
        from gpuprof.runner import SweepRequest, sweep

        request = SweepRequest(
            probes=(probe,),
            opts=pop_probe_options(kw),
            out=Path(out),
            tag=tag,
            argv=sys.argv,
            suite=suite,
            device=device,
            timeout=timeout,
            launcher="torchrun",
        )
        try:
            result = sweep(request)
        except GpuprofError as exc:
            print(f"gpuprof: error: {exc.one_line()}", file=sys.stderr)
            sys.exit(exc.exit_code)
        if result.run_dir is not None and result.home:
            print("\n".join(run_tables(result.run_dir)))
            if result.report is not None:
                print(result.report)

    command.main(args=argv, standalone_mode=True)
