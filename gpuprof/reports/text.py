"""Plain-text tables for the terminal, nccl-tests style (sizes binary, bandwidth in GB/s)."""

from __future__ import annotations

import math
from numbers import Real
from pathlib import Path

import pandas as pd

from gpuprof import registry
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


def fixed_width(rows: list[list[str]], left: int = 0) -> str:
    """Rows of cells as aligned text: right-aligned, except the first `left` columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


def run_tables(run_dir: Path) -> list[str]:
    """The summary table of every probe a run measured (what `gpuprof run` prints)."""
    from gpuprof.analysis.summary import summarize_run
    from gpuprof.store import Run

    run = Run(run_dir)
    have = run.tables()
    return [
        format_table(summarize_run(run, name), name)
        for name, spec in registry.specs().items()
        if all(t in have for t in spec.table_names)
    ]
