"""`gpuprof trace`: read a real job's torch.profiler traces (no torch: pandas and plotly,
imported inside the command)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpuprof import __version__
from gpuprof.cli.options import out_option
from gpuprof.errors import UsageError
from gpuprof.traces.flight import text as flight_text


@click.command("trace")
@click.argument("directory", metavar="DIR", required=False, type=click.Path(path_type=Path))
@click.option(
    "--flight-recorder",
    "flight",
    metavar="DUMPS",
    type=click.Path(path_type=Path),
    help="instead: read PyTorch flight-recorder dumps (one per rank) and say why the job hung",
)
@click.option(
    "--run",
    "run_spec",
    metavar="RUN",
    help="a sweep of the same machine: compare the "
    "collectives' bus bandwidth with what it measured",
)
@click.option(
    "--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"])
)
@click.option(
    "-o", "report_path", type=click.Path(path_type=Path), help="write the HTML report to this file"
)
@click.option(
    "--save",
    type=click.Path(path_type=Path),
    metavar="FOLDER",
    help="write the tables (parquet), trace.json and report.html into this new folder",
)
@click.option("--jobs", type=click.IntRange(min=1), help="processes reading traces [the cores]")
@out_option
def trace(
    directory: Path | None,
    flight: Path | None,
    run_spec: str | None,
    fmt: str,
    report_path: Path | None,
    save: Path | None,
    jobs: int | None,
    out: str,
) -> None:
    """Read a job's per-rank profiler traces (torch.profiler's Chrome/Kineto JSON, .json or
    .json.gz): per rank and step, compute, communication, their overlap, exposed
    communication, input and idle; the top ops; every collective's wait and transfer across
    ranks; the rank that holds the others back; advice.

    With --flight-recorder DUMPS: which rank did not enter which collective (process group,
    sequence number, op, size), where ranks disagree on op, size or dtype, and the last
    collective every rank completed.

    Examples: gpuprof trace ./traces --run latest -o trace.html;
    gpuprof trace --flight-recorder /tmp/fr
    """
    if flight is not None:
        if directory is not None or run_spec or report_path or save:
            raise UsageError("--flight-recorder reads dumps alone: give no DIR, --run, -o, --save")
        _flight(flight, fmt)
        return
    if directory is None:
        raise UsageError("give the traces' DIR (or --flight-recorder DUMPS)")
    # deferred: loads pandas and plotly
    from gpuprof.advice.traces import findings, with_ceiling, with_compute_ceiling
    from gpuprof.reports.trace import render, text
    from gpuprof.traces.job import read_job

    if save is not None and save.exists() and any(save.iterdir()):
        raise UsageError(f"--save {save}: the folder exists and is not empty", "give a new folder")
    measured = None
    if run_spec is not None:
        measured = _measured(run_spec, out)  # before reading: a bad RUN fails fast
    tables = read_job(directory, jobs)
    if measured is not None:
        if measured[0] is not None:
            tables.collectives = with_ceiling(tables.collectives, measured[0])
        tables.ranks = with_compute_ceiling(tables.ranks, measured[1])
    found = findings(tables)
    argv = " ".join(["gpuprof", *sys.argv[1:]])
    html = None
    if report_path is not None or save is not None:
        html = render(tables, found, argv, __version__)
    if report_path is not None:
        _write(report_path, html or "")
    if save is not None:
        _save(save, tables, found, html or "")
    if fmt == "json":
        payload = {
            "info": tables.info,
            "findings": found,
            **{
                name: json.loads(frame.to_json(orient="records"))
                for name, frame in tables.named().items()
                if name != "trace_collectives" or not frame.empty
            },
        }
        payload["trace_collectives"] = json.loads(
            tables.collectives.to_json(orient="records") if not tables.collectives.empty else "[]"
        )
        click.echo(json.dumps(payload, default=str))
    else:
        click.echo(text(tables, found), nl=False)


def _flight(folder: Path, fmt: str) -> None:
    printed, payload = flight_text(folder)
    click.echo(json.dumps(payload, default=str) if fmt == "json" else printed, nl=fmt == "json")


def _measured(run_spec: str, out: str) -> tuple[Any, Any]:
    """The run's collectives summary (op, size, world size, busbw) and matmul ceilings; a
    UsageError when it measured neither."""
    # deferred: loads pandas
    from gpuprof.analysis.bandwidth import measured_busbw
    from gpuprof.analysis.ceilings import matmul_ceilings
    from gpuprof.runs.store import open_run

    run = open_run(run_spec, out)
    compute = matmul_ceilings(run)
    try:
        return measured_busbw(run), compute
    except UsageError:  # no collectives: the matmul ceilings alone, if it has them
        if compute.empty:
            raise
        return None, compute


def _write(path: Path, html: str) -> None:
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def _save(folder: Path, tables: Any, found: list[str], html: str) -> None:
    """The tables as parquet, the info and findings as trace.json, and the report."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {folder}: {exc.strerror}") from None
    for name, frame in tables.named().items():
        frame = frame.copy()
        if "key" in frame:
            frame["key"] = frame["key"].astype(str)
        frame.to_parquet(folder / f"{name}.parquet", index=False)
    info = {**tables.info, "findings": found}
    (folder / "trace.json").write_text(json.dumps(info, indent=1, default=str), encoding="utf-8")
    _write(folder / "report.html", html)
