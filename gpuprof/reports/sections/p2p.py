"""The p2p section: a rank x rank heatmap per mode, slow pairs marked."""

from __future__ import annotations

from typing import Any

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import pair_heatmap
from gpuprof.reports.sections import Figures, Note, Section, embed
from gpuprof.specs.p2p import P2P_MODES

METHOD = (
    "p2p: every pair of ranks, disjoint pairs at once in rounds; uni = one direction, bidir "
    "= both at once (rate per direction), latency = ping-pong round trip / 2; a pair's time "
    "is its slower rank's."
)


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Heatmaps of every measured mode."""
    if not analyzed.has("p2p"):
        return []
    summary = analyzed.summary("p2p")
    figures = [
        embed(pair_heatmap(summary, mode)) for mode in P2P_MODES if (summary["mode"] == mode).any()
    ]
    if not figures:
        return []
    note = Note(
        text="Each cell is one pair, its time the slower of the two ranks (median over "
        "iterations). Pairs under 70% of the median of their link class (nvlink, pcie, local, "
        "network) are marked SLOW."
    )
    return [
        Section(
            title="Point to point: every pair of ranks",
            anchor="p2p",
            blocks=[note, Figures(html=figures)],
            method=[METHOD],
        )
    ]
