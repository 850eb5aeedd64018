"""The tensor-parallel section: per layer kind and world size, the compute each rank keeps and
the communication the split adds, the all_reduces alone, and bytes against theory."""

from __future__ import annotations

from typing import Any

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import stacked_figure
from gpuprof.reports.sections import Figures, Note, Section, embed, summary_table

METHOD = (
    "tp: each layer split with parallelize_module (first linear column-wise, second "
    "row-wise) over the scope's group, the same tokens on every rank. Per round: the split "
    "layer's forward and backward, timed; the same on a twin holding this rank's shard as "
    "plain layers (compute only); the layer's all_reduces replayed alone. Exposed = split - "
    "twin; speedup = one rank's layer / the split layer; bytes = the functional collectives "
    "of one forward and backward, counted by a dispatch mode as a ring sends them (theory "
    "4 (n-1)/n x tokens x hidden x 4 bytes per layer)."
)


PARTS = (
    ("compute_us", "compute per rank (twin)", "#4c78a8"),
    ("exposed_comm_us", "exposed communication + overhead", "#e45756"),
)
ALONE = {"symbol": "diamond", "size": 10, "color": "#f58518"}


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The tensor-parallel section, or nothing if no case was measured."""
    table = "tp"
    summary = analyzed.measured(table)
    if summary is None:
        return []
    figure = stacked_figure(
        summary,
        PARTS,
        ("comm_only_us", "all_reduces alone", ALONE),
        "Tensor-parallel layer (forward + backward): compute and communication",
        unit="ms per layer",
    )
    first = summary.iloc[0]
    note = (
        f"Hidden {first['hidden']}, {first['batch']} x {first['seq']} tokens. Where the "
        "all_reduces alone (diamonds) are longer than the compute per rank, the link cannot "
        "hide the activations this layer moves."
    )
    return [
        Section(
            title="Tensor parallel: what splitting a layer costs",
            anchor="tp",
            blocks=[
                Note(text=note),
                Figures(html=[embed(figure)]),
                summary_table(
                    summary,
                    table,
                    title="Tensor-parallel summary",
                    id="tp-summary",
                    left=(1, 2, 3, 4),
                ),
            ],
            method=[METHOD],
        )
    ]
