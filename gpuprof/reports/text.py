"""Plain-text tables for the terminal, nccl-tests style (sizes binary, bandwidth in GB/s)."""

from __future__ import annotations

import pandas as pd

from gpuprof.units import format_size

_COLUMNS = [
    ("scope", "scope", "{}"),
    ("world_size", "n", "{}"),
    ("group", "group", "{}"),
    ("op", "op", "{}"),
    ("size_bytes", "size", None),
    ("dtype", "type", "{}"),
    ("redop", "redop", "{}"),
    ("in_place", "place", None),
    ("time_us", "time_us", "{:.1f}"),
    ("time_us_p99", "p99_us", "{:.1f}"),
    ("algbw_gbps", "algbw_GB/s", "{:.3f}"),
    ("busbw_gbps", "busbw_GB/s", "{:.3f}"),
    ("nwrong", "#wrong", "{}"),
]


def _cell(column: str, fmt: str | None, value: object) -> str:
    if column == "size_bytes":
        return format_size(float(value))  # type: ignore[arg-type]
    if column == "in_place":
        return "in" if value else "out"
    if value is None or value is pd.NA or value != value:  # missing: not measured
        return "-"
    assert fmt is not None
    return fmt.format(value)


def table_cells(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of a collectives summary (shared by terminal and HTML)."""
    present = [c for c in _COLUMNS if c[0] in summary.columns]
    header = [title for _, title, _ in present]
    rows = [[_cell(col, fmt, record[col]) for col, _, fmt in present]
            for record in summary.to_dict("records")]
    return header, rows


def format_table(summary: pd.DataFrame) -> str:
    """A fixed-width table of a collectives summary, one row per case and group."""
    header, rows = table_cells(summary)
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    return "\n".join(lines)
