"""Plain text that every stage prints: rows of cells as aligned columns (terminal tables,
the gate's verdicts, the predictor's tables)."""

from __future__ import annotations


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
