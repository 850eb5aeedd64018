"""Sharded data parallelism: which strategy to train with at this world size, by measurement.

The rule: among the strategies measured at the job's size (the global scope), the fastest
whose memory per rank fits the device (on GPU its peak allocated memory against the GPU's
memory; on CPU the state it holds against the host's memory shared by its ranks), and what
each other strategy saves in memory and costs in time against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuprof.advice.memory import memory_findings
from gpuprof.analysis.sharded import largest
from gpuprof.analysis.summary import Analyzed

HEADROOM = 0.9  # a strategy fits when it needs at most 90% of the memory a rank has


def capacity_per_rank(info: dict[str, Any]) -> tuple[float | None, str]:
    """(bytes a rank may use, what that is) from run.json: the smallest GPU's memory, or on
    CPU the smallest host's memory over its ranks; None when run.json does not say."""
    nodes = info.get("nodes") or []
    gpus = [g["memory_bytes"] for n in nodes for g in n.get("gpus") or [] if g.get("memory_bytes")]
    if info.get("device") == "cuda":
        return (float(min(gpus)), "GPU memory") if gpus else (None, "")
    hosts = [n["memory_bytes"] for n in nodes if n.get("memory_bytes")]
    per_node = max(1, int(info.get("gpus_per_node") or 1))
    return (float(min(hosts)) / per_node, "host memory / ranks per node") if hosts else (None, "")


def need_bytes(row: Mapping[Any, Any]) -> float:
    """What a rank needs: the peak allocated on GPU, else the state held between steps."""
    peak = row.get("peak_bytes")
    return float(peak) if peak is not None and pd.notna(peak) else float(row["memory_bytes"])


def sharded_findings(summary: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    """The strategy to use at the job's size, with the others' memory and time against it."""
    rows = largest(summary).to_dict("records")
    if len(rows) < 2:
        return []
    capacity, what = capacity_per_rank(info)
    fits = [r for r in rows if capacity is None or need_bytes(r) <= HEADROOM * capacity]
    n = rows[0]["world_size"]
    if not fits and capacity is not None:
        smallest = min(rows, key=need_bytes)
        return [
            f"Sharded n={n}: no measured strategy fits in {what} ({capacity / 2**30:.1f} GiB "
            f"a rank; the smallest, {smallest['case_id']}, needs "
            f"{need_bytes(smallest) / 2**30:.2f} GiB): shard over more ranks, or use "
            "activation checkpointing or a smaller batch."
        ]
    best = fits[0] if fits else rows[0]
    others = []
    for row in rows:
        if row is best:
            continue
        saved = 1 - need_bytes(row) / need_bytes(best)
        slower = best["samples_per_s"] / row["samples_per_s"] - 1
        fit = "" if row in fits else f", does not fit ({need_bytes(row) / 2**30:.2f} GiB)"
        others.append(
            f"{row['case_id']} {_pct(saved, 'less memory', 'more memory')}, "
            f"{_pct(slower, 'slower', 'faster')} "
            f"({row['samples_per_s']:.4g} samples/s, exposed communication "
            f"{row['exposed_pct']:.0f}% of its step{fit})"
        )
    room = f" of {capacity / 2**30:.1f} GiB ({what})" if capacity is not None else ""
    return [
        f"Sharded n={n}: {best['case_id']} is the fastest strategy that fits: "
        f"{best['samples_per_s']:.4g} samples/s, {need_bytes(best) / 2**20:.1f} MiB a rank"
        f"{room}. Against it: {'; '.join(others)}."
    ]


def _pct(share: float, plus: str, minus: str) -> str:
    """'48% less memory', '12% slower': the size of a share and its direction."""
    return f"{abs(share):.0%} {plus if share >= 0 else minus}"


def findings(analyzed: Analyzed) -> list[str]:
    """The sharded rules over a run: the strategy to use, and the cases that did not fit."""
    table = "sharded"
    found = sharded_findings(analyzed.summary(table), analyzed.info) if analyzed.has(table) else []
    return found + memory_findings(analyzed.info, table, "Sharded")
