"""p2p: one finding per pair flagged slow against its link class."""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed


def p2p_findings(summary: pd.DataFrame) -> list[str]:
    """One finding per pair flagged slow against its link class."""
    return [
        f"Pair {r['rank_a']}-{r['rank_b']} ({r['host_a']} to {r['host_b']}, {r['link_class']}, "
        f"{r['mode']}) moves {r['bw_gbps']:.3g} GB/s, {r['pct_of_class']:.0f}% of the median "
        f"{r['class_median_gbps']:.3g} GB/s of its class: check that link (cable, NIC, NVLink "
        "state) and rerun `gpuprof run p2p`."
        for r in summary[summary["flagged"]].to_dict("records")
    ]


def findings(analyzed: Analyzed) -> list[str]:
    """The p2p rules over a run."""
    return p2p_findings(analyzed.summary("p2p")) if analyzed.has("p2p") else []
