"""p2p: one finding per pair flagged slow against its link class, and the nodes that are slow
with every partner (on many nodes the pairs across nodes are a sample, so a node is known by
the pattern of its pairs, not by one of them)."""

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


# a node is named when it is slow with at least this many partner nodes and this share of them
# (a slow path between two nodes is slow with one partner; a slow NIC, cable or switch port
# with all of them)
SLOW_NODE_PARTNERS = 2
SLOW_NODE_SHARE = 2 / 3


def slow_node_findings(summary: pd.DataFrame) -> list[str]:
    """One finding per node whose network pairs are flagged with most of its partner nodes."""
    if "node_a" not in summary.columns:
        return []
    net = summary[(summary["link_class"] == "network") & (summary["mode"] != "latency")]
    partners: dict[object, set[object]] = {}
    slow: dict[object, set[object]] = {}
    hosts: dict[object, object] = {}
    for r in net.to_dict("records"):
        for me, other, host in (
            (r["node_a"], r["node_b"], r["host_a"]),
            (r["node_b"], r["node_a"], r["host_b"]),
        ):
            hosts[me] = host
            partners.setdefault(me, set()).add(other)
            if r["flagged"]:
                slow.setdefault(me, set()).add(other)
    out = []
    for node in sorted(slow, key=str):
        k, m = len(slow[node]), len(partners[node])
        if k < SLOW_NODE_PARTNERS or k < SLOW_NODE_SHARE * m:
            continue
        named = ", ".join(f"node {p}" for p in sorted(slow[node], key=str))
        also = [p for p in sorted(slow[node], key=str) if slow.get(p, set()) - {node}]
        others = (
            f"; node(s) {', '.join(map(str, also))} are slow with other nodes too: check them next"
            if also
            else ", which are not slow with any other node"
        )
        out.append(
            f"Node {node} ({hosts[node]}) is slow with {k} of its {m} partner nodes ({named})"
            f"{others}. Look at node {node}'s NIC, cable or switch port: drain it and rerun "
            "`gpuprof run p2p` on it with two nodes known to be good."
        )
    return out


def findings(analyzed: Analyzed) -> list[str]:
    """The p2p rules over a run."""
    if not analyzed.has("p2p"):
        return []
    summary = analyzed.summary("p2p")
    return slow_node_findings(summary) + p2p_findings(summary)
