"""The p2p section: a rank x rank heatmap per mode, slow pairs marked."""

from __future__ import annotations

from typing import Any

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures import node_pairs_figure, pair_heatmap
from gpuprof.reports.sections import Figures, Note, Section, embed
from gpuprof.specs.p2p import P2P_MODES

METHOD = (
    "p2p: every pair of ranks, disjoint pairs at once in rounds; uni = one direction, bidir "
    "= both at once (rate per direction), latency = ping-pong round trip / 2; a pair's time "
    "is its slower rank's."
)


# a rank x rank matrix up to this many ranks; beyond, each node's pairs (the matrix of 1,024
# ranks would be a million cells, most of them pairs not measured)
MAX_HEATMAP_RANKS = 64


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Heatmaps of every measured mode."""
    if not analyzed.has("p2p"):
        return []
    summary = analyzed.summary("p2p")
    ranks = len(set(summary["rank_a"]) | set(summary["rank_b"]))
    many = ranks > MAX_HEATMAP_RANKS and "node_a" in summary.columns
    figures = [
        embed(node_pairs_figure(summary, mode) if many else pair_heatmap(summary, mode))
        for mode in P2P_MODES
        if (summary["mode"] == mode).any() and not (many and mode == "latency")
    ]
    if not figures:
        return []
    note = Note(
        text=(
            f"{ranks} ranks: per node, the median and the slowest of its pairs with other "
            "nodes and inside it (a pair's time the slower of its two ranks, median over "
            "iterations). "
            if many
            else "Each cell is one pair, its time the slower of the two ranks (median over "
            "iterations). "
        )
        + "Pairs under 70% of the median of their link class (nvlink, pcie, local, network) "
        "are marked SLOW and named in the findings."
    )
    return [
        Section(
            title="Point to point: every pair of ranks",
            anchor="p2p",
            blocks=[note, Figures(html=figures)],
            method=[METHOD],
        )
    ]
