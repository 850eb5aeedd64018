"""Pair bandwidth and latency matrix, each pair classified by its link and checked against
the other pairs of its class.

A pair's iteration time is the slower of its two ranks; its time is the median over
iterations. Classes: `nvlink` or `pcie` (GPUs of one host, from the NVML topology in
run.json), `local` (ranks of one host without a GPU link to tell: CPU, or no topology), and
`network` (different hosts). A pair whose bandwidth is below 70% of its class's median (same
mode) is flagged: the typical symptom of a bad cable, a degraded NVLink, a slow NIC.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis import RunTables, grouped, require_columns, slowest_iterations
from gpuprof.machine.topology import normalize_bus_id
from gpuprof.runs.tables import record_starts, rows_of

FLAG_BELOW = 0.70
_PAIR = ["group", "mode", "size_bytes", "rank_a", "rank_b"]


def topology_links(info: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """(host, bus id a, bus id b) -> link label ('NV4', 'PIX', 'SYS', ...) from run.json."""
    links = {}
    for node in info.get("nodes", []):
        topo = node.get("topology") or {}
        buses = topo.get("gpus", [])
        for i, row in enumerate(topo.get("matrix", [])):
            for j, label in enumerate(row):
                a, b = normalize_bus_id(buses[i]), normalize_bus_id(buses[j])
                links[(node["host"], a, b)] = label
    return links


def link_class(a: dict[str, Any], b: dict[str, Any], links: dict[tuple[str, str, str], str]) -> str:
    """The class of the link between two ranks (run.json `ranks` entries)."""
    if a.get("host") != b.get("host") or a.get("node_rank") != b.get("node_rank"):
        return "network"  # node rank too: two nodes may share a host name
    # bus ids in one form: ranks wrote torch's (lower case in older runs), NVML upper case
    buses = (normalize_bus_id(a.get("pci_bus_id", "")), normalize_bus_id(b.get("pci_bus_id", "")))
    label = links.get((a["host"], *buses))
    if label is None:
        return "local"
    return "nvlink" if label.startswith("NV") else "pcie"


def flag_outliers(summary: pd.DataFrame) -> pd.DataFrame:
    """Add the class median (same class and mode), % of it, and the flag (< 70%)."""
    out = summary.copy()
    bandwidth = out["mode"] != "latency"
    medians = out[bandwidth].groupby(["link_class", "mode"])["bw_gbps"].transform("median")
    out["class_median_gbps"] = medians
    out["pct_of_class"] = 100 * out["bw_gbps"] / out["class_median_gbps"]
    out["flagged"] = bandwidth & (out["pct_of_class"] < 100 * FLAG_BELOW)
    return out


def summarize_p2p(frame: pd.DataFrame, info: dict[str, Any]) -> pd.DataFrame:
    """One row per pair and mode: time, bandwidth or latency, link class, outlier flag."""
    require_columns(frame, [*_PAIR, "rank", "host", "iteration", "time_us", "nwrong"], "p2p")
    starts = record_starts(frame)  # a record's own values (nwrong, its host) read once
    pair, summary = grouped(frame, _PAIR, starts=starts)
    slowest = slowest_iterations(frame, pair)
    summary["time_us"] = slowest.median().to_numpy()
    summary["num_iterations"] = slowest.size().to_numpy()
    # each rank's count once (a record's nwrong is on every one of its rows)
    wrong = pd.Series(frame["nwrong"].to_numpy()[starts]).groupby(pair[starts])
    summary["nwrong"] = wrong.sum().to_numpy()
    summary = summary.sort_values(_PAIR).reset_index(drop=True)
    latency = summary["mode"] == "latency"
    summary["bw_gbps"] = (summary["size_bytes"] / summary["time_us"] / 1e3).where(~latency)
    summary["latency_us"] = (summary["time_us"] / 2).where(latency)
    ranks = {int(r["rank"]): r for r in info.get("ranks") or []}
    records = rows_of(frame, starts, [c for c in ("rank", "host", "node_rank") if c in frame])
    hosts = records.groupby("rank")["host"].first().to_dict()
    links = topology_links(info)
    nodes = records.groupby("rank")["node_rank"].first().to_dict() if "node_rank" in frame else {}

    def who(rank: int) -> dict[str, Any]:
        return ranks.get(rank) or {
            "rank": rank,
            "host": hosts.get(rank),
            "node_rank": nodes.get(rank),
        }

    summary["host_a"] = [who(a).get("host") for a in summary["rank_a"]]
    summary["host_b"] = [who(b).get("host") for b in summary["rank_b"]]
    summary["node_a"] = [who(a).get("node_rank") for a in summary["rank_a"]]
    summary["node_b"] = [who(b).get("node_rank") for b in summary["rank_b"]]
    summary["link_class"] = [
        link_class(who(a), who(b), links)
        for a, b in zip(summary["rank_a"], summary["rank_b"], strict=True)
    ]
    return flag_outliers(summary).sort_values(["mode", "rank_a", "rank_b"]).reset_index(drop=True)


def summarize_run(run: RunTables) -> pd.DataFrame:
    """The p2p summary of a run (hosts, bus ids and topology from run.json)."""
    return summarize_p2p(run.table("p2p"), run.info)
