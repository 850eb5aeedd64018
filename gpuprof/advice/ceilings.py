"""memory: host copies that slow down when every device of a node copies at once.

Each host copy kind runs alone (one device per node at a time) and together (every device of
the node at once). Together, each device gets its share of whatever the node's devices share
on the way to host memory: a PCIe switch, the CPU socket's link, host memory bandwidth. A node
whose devices get much less together than alone has such a shared link, and so does every
job that copies to all its GPUs at once (data loading, activation offload, checkpoints)."""

from __future__ import annotations

import pandas as pd

from gpuprof.analysis.summary import Analyzed

# together below this share of alone (the median device of a node) is worth saying: a node
# whose devices each have their own PCIe link and root complex stays within noise of alone
SHARED_BELOW = 0.8


def shared_links(summary: pd.DataFrame) -> pd.DataFrame:
    """Per node and copy kind measured both ways: each device's together/alone ratio's median,
    the median device's GB/s alone and together, and the node's total together."""
    if "concurrency" not in summary.columns or len(summary) == 0:
        return pd.DataFrame()
    ways = summary.pivot_table(
        index=["host", "rank", "kind"],
        columns="concurrency",
        values="bandwidth_gbps",
        aggfunc="median",
    )
    if not {"alone", "together"} <= set(ways.columns):
        return pd.DataFrame()
    ways = ways.dropna(subset=["alone", "together"]).reset_index()
    ways["ratio"] = ways["together"] / ways["alone"]
    per_node = ways.groupby(["host", "kind"], sort=True).agg(
        devices=("rank", "size"),
        ratio=("ratio", "median"),
        alone_gbps=("alone", "median"),
        together_gbps=("together", "median"),
        node_together_gbps=("together", "sum"),
    )
    return per_node.reset_index()


def copy_findings(summary: pd.DataFrame) -> list[str]:
    """One finding per node and host copy kind whose devices get less than SHARED_BELOW of
    their alone rate when they all copy at once."""
    out = []
    for r in shared_links(summary).to_dict("records"):
        if r["devices"] < 2 or r["ratio"] >= SHARED_BELOW:
            continue
        out.append(
            f"On {r['host']}, {r['kind']} copies of {r['devices']} devices at once get "
            f"{100 * r['ratio']:.0f}% of their rate alone ({r['alone_gbps']:.3g} -> "
            f"{r['together_gbps']:.3g} GB/s per device, {r['node_together_gbps']:.3g} GB/s for "
            "the node): they share a link to host memory (a PCIe switch, the socket's link or "
            "the host's memory bandwidth). A job that copies to every device at once (data "
            "loading, offload, checkpoints) gets the together rate: keep each rank's loader "
            "and pinned buffers on its own NUMA node (numactl, DataLoader pin_memory), and "
            "stagger large copies."
        )
    return out


def findings(analyzed: Analyzed) -> list[str]:
    """The memory rules over a run."""
    return copy_findings(analyzed.summary("memory")) if analyzed.has("memory") else []
