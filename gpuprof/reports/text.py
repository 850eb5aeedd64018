"""Plain-text tables for the terminal, nccl-tests style (sizes binary, bandwidth in GB/s)."""

from __future__ import annotations

import math
from numbers import Real
from pathlib import Path

import pandas as pd

from gpuprof import registry
from gpuprof.analysis.summary import summarize_run
from gpuprof.runs.store import Run
from gpuprof.text import fixed_width
from gpuprof.units import format_size


def _cell(column: str, value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, Real) and math.isnan(value)):
        # missing: not measured or unknown
        return "-"
    if column == "in_place":
        return "in" if value else "out"
    if column == "flagged":
        return "SLOW" if value else ""
    if column.endswith("_bytes"):
        return format_size(float(value))  # type: ignore[arg-type]
    if column.endswith("_gbps"):
        return f"{float(value):.3f}"  # type: ignore[arg-type]
    if column.endswith(("_us", "_p99", "_pct")) or column in ("pct_of_peak", "pct_of_class"):
        return f"{float(value):.1f}"  # type: ignore[arg-type]
    if column == "samples_per_s":
        return f"{float(value):.4g}"  # type: ignore[arg-type]
    if column.endswith("_ratio") or column in ("comm_vs_compute", "speedup"):
        return f"{float(value):.3f}"  # type: ignore[arg-type]
    if column == "efficiency":
        return f"{float(value):.2f}"  # type: ignore[arg-type]
    if column == "tflops":
        return f"{float(value):.4g}"  # type: ignore[arg-type]
    return str(value)


def table_cells(summary: pd.DataFrame, probe: str) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of a probe's summary (shared by terminal and HTML), with
    the columns its registry entry lists."""
    present = [c for c in registry.get(probe).columns if c[0] in summary.columns]
    header = [title for _, title in present]
    rows = [
        [_cell(col, record[col]) for col, _ in present] for record in summary.to_dict("records")
    ]
    return header, rows


def format_table(summary: pd.DataFrame, probe: str) -> str:
    """A fixed-width table of a probe's summary."""
    header, rows = table_cells(summary, probe)
    return fixed_width([header, *rows])


def run_tables(run_dir: Path) -> list[str]:
    """The summary table of every probe a run measured (what `gpuprof run` prints)."""
    run = Run(run_dir)
    have = run.tables()
    return [
        format_table(summarize_run(run, name), name)
        for name, spec in registry.specs().items()
        if all(t in have for t in spec.table_names)
    ]
