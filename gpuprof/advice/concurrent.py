"""Collectives at the same time: what the contention costs and what to change.

- an op 15% or more slower beside the other: how much, against the fair share of one shared
  bottleneck (near it: they share a link; give the latency-critical one priority or its own
  channels, or schedule them apart), and whether running them together still saves time over
  one after the other;
- an op slower than the fair share by 25% or more: one starves the other (a finding of its
  own: fewer channels or SMs for the bulk transfer, or a separate stream priority).
"""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.units import format_size

SLOWER = 1.15  # an op this much slower beside the other is worth a finding
STARVED = 1.25  # measured over the fair share by this much: one starves the other


def concurrent_findings(summary: pd.DataFrame) -> list[str]:
    """Findings from a concurrent-collectives summary."""
    found = []
    for row in summary.to_dict("records"):
        size = format_size(row["size_bytes"])
        for me, you in (("a", "b"), ("b", "a")):
            op, other = row[f"op_{me}"], row[f"op_{you}"]
            slow, fair = row[f"{me}_slowdown"], row[f"{me}_fair_share"]
            alone = row[f"{me}_alone_us"]
            if slow < SLOWER:
                continue
            text = (
                f"The {op} ({size}) is {100 * (slow - 1):.0f}% slower beside the {other} "
                f"({alone / 1e3:.3g} ms alone): a fair share of one bottleneck predicts "
                f"{100 * (fair - 1):.0f}%."
            )
            if slow >= STARVED * fair:
                text += (
                    f" It gets less than a fair share: the {other} starves it; give the "
                    f"{op} its own channels or a higher stream priority, or fewer channels to "
                    f"the {other}."
                )
            else:
                text += (
                    f" They share a link: schedule the {op} apart from the {other} where it "
                    "is on the critical path (it overlaps compute better alone), or give it "
                    "its own channels/stream."
                )
            text += f" Together they take {100 - row['saving_pct']:.0f}% of one after the other."
            found.append(text)
    return found


def findings(analyzed: Analyzed) -> list[str]:
    """The concurrent-collectives findings of a run."""
    summary = analyzed.measured("concurrent")
    return [] if summary is None else concurrent_findings(summary)
