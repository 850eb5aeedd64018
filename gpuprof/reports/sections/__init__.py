"""Report sections as data: each probe's section builder (named in its registry entry) turns
an analyzed run into `Section`s of figures, tables and notes; the page template loops over
them. Builders hold no rules: findings come from the advice layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprof.reports.text import table_cells


@dataclass(frozen=True, kw_only=True)
class Figures:
    """Plotly figures as HTML fragments; `grid`: two per row on a wide page."""

    html: list[str]
    grid: bool = True
    kind: str = "figures"


@dataclass(frozen=True, kw_only=True)
class Note:
    """A muted paragraph."""

    text: str
    kind: str = "note"


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table of formatted cells. `left`: 1-based columns aligned left; `wrong_last`: mark
    the last column's cells that are not 0 or '-' (wrong elements)."""

    header: list[str]
    rows: list[list[str]]
    title: str | None = None  # an h3 above it
    intro: str | None = None  # a muted paragraph above it
    id: str | None = None
    css: str | None = None
    left: tuple[int, ...] = ()
    scroll: bool = True
    wrong_last: bool = False
    row_classes: tuple[str, ...] = ()  # a css class per row (e.g. a verdict), or none
    shown: tuple[int, ...] | None = None  # the rows shown at first (the rest one click away)
    kind: str = "table"

    def visible(self) -> list[tuple[int, list[str]]]:
        """(index, row) of the rows shown at first: all, or those `shown` names."""
        keep = range(len(self.rows)) if self.shown is None else sorted(set(self.shown))
        return [(i, self.rows[i]) for i in keep]

    def cell_class(self, column: int, cell: str, last: bool) -> str:
        """The css class of one cell ('' for none)."""
        classes = ["l"] if column in self.left else []
        if last and self.wrong_last and cell not in ("0", "-"):
            classes.append("wrong")
        return " ".join(classes)


Block = Figures | Note | Table


@dataclass(frozen=True, kw_only=True)
class Section:
    """One h2 of the report: its blocks in order, the method lines that explain its numbers,
    and (for the probe that can judge the whole run) a verdict (text, bad)."""

    title: str
    anchor: str
    blocks: list[Block] = field(default_factory=list)
    method: list[str] = field(default_factory=list)
    verdict: tuple[str, bool] | None = None


def embed(fig: Any) -> str:
    """A figure as an HTML fragment that uses the page's one copy of plotly.js. Its mode bar
    stands upright in the right margin, where it cannot cover the title."""
    right = fig.layout.margin.r if fig.layout.margin.r is not None else 80
    fig.update_layout(modebar={"orientation": "v"}, margin={"r": max(right, 50)})
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            config={"displaylogo": False, "responsive": True},
        )
    )


def summary_table(summary: Any, probe: str, **kw: Any) -> Table:
    """A probe's summary as a table with the registry's columns."""
    header, rows = table_cells(summary, probe)
    return Table(header=header, rows=rows, **kw)
