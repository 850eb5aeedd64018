"""Tensor parallelism: where the activation traffic outruns the compute it splits.

A split layer all-reduces its activations in forward and backward; they can only hide behind
compute of about the same length. Where the all_reduces alone take longer than the layer's
compute on each rank, the group's link cannot carry tensor parallelism for this layer: the
finding names the case, its numbers, and whether the group spans nodes (keep the group inside
a node) or the layer is small (split wider layers only, or fewer ways).
"""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed

LIMIT = 1.0  # the all_reduces alone may take as long as the compute, not longer


def tp_findings(summary: pd.DataFrame) -> list[str]:
    """One finding per layer kind whose activation traffic outruns its compute somewhere."""
    findings = []
    over = summary[summary["comm_vs_compute"] > LIMIT]
    for kind, rows in over.groupby("case_id", sort=False):
        worst = rows.sort_values("comm_vs_compute", ascending=False).iloc[0]
        spans = worst["num_nodes"] > 1
        fix = (
            "the group spans nodes: keep tensor parallelism inside a node and split across "
            "nodes by data or pipeline parallelism"
            if spans
            else f"the layer is too small for {worst['world_size']} ways: split only layers "
            "wider than this, or fewer ways"
        )
        where = f"{worst['scope']} n={worst['world_size']}"
        where += f" over {worst['num_nodes']} nodes" if spans else ""
        findings.append(
            f"Tensor parallel {kind} (hidden {worst['hidden']}, {worst['tokens']} tokens), "
            f"{where}: the activation all_reduces alone take {worst['comm_only_us'] / 1e3:.3g} "
            f"ms against {worst['compute_us'] / 1e3:.3g} ms of compute per rank "
            f"({worst['comm_vs_compute']:.1f}x; {worst['sent_bytes'] / 1e6:.3g} MB sent per "
            f"rank per layer), so the link cannot hide them (speedup {worst['speedup']:.2f}x "
            f"on {worst['world_size']} ranks); {fix}."
        )
    return findings


def findings(analyzed: Analyzed) -> list[str]:
    """The tensor-parallel rules over a run."""
    table = "tp"
    return tp_findings(analyzed.summary(table)) if analyzed.has(table) else []
