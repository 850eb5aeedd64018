"""The collectives section: busbw curves per op and dtype, the summary table, and the run's
verdict (correctness first, then the peak bus bandwidth)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.figures_collectives import busbw_figure
from gpuprof.reports.sections import Figures, Section, embed, summary_table
from gpuprof.specs.collectives import OPS
from gpuprof.units import format_size


def method(plan: dict[str, Any]) -> list[str]:
    """How the collectives numbers were measured."""
    params = plan.get("collectives", {})
    return [
        f"Each collective case: {params.get('warmup_iters', '?')} warmup iteration(s), one "
        "correctness iteration with exactly predictable inputs (#wrong counts elements that "
        f"differ), then timed iterations filling a {1e3 * float(params.get('budget_s', 0)):g} "
        f"ms budget (between {params.get('min_iters', '?')} and {params.get('max_iters', '?')}),"
        " the count agreed across the group from the slowest rank's warmup.",
        "time_us is the median over iterations of the slowest rank's time (a collective ends "
        "when its last rank does); p99_us likewise.",
        "algbw = size / time; busbw = algbw x factor: all_reduce 2(n-1)/n; all_gather, "
        "reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, sendrecv 1 (nccl-tests "
        "semantics). Sizes are binary (KiB, MiB), bandwidth decimal (1 GB/s = 1e9 B/s).",
        "size is the whole buffer for all_reduce, broadcast, reduce and sendrecv, the total "
        "output for all_gather, the total input for reduce_scatter, and the per-rank send "
        "buffer for all_to_all.",
        "torch.distributed offers all_reduce, broadcast and reduce only in place, and "
        "all_to_all and send/recv only out of place; those ops are measured in that one mode.",
    ]


def verdict(info: dict[str, Any], summary: pd.DataFrame) -> tuple[str, bool]:
    """One sentence on the whole run: wrong results, a partial run, or the peak busbw."""
    where = f"{info.get('world_size')} rank(s), {info.get('device')}/{info.get('backend')}"
    status = info.get("status")
    wrong = summary[summary["nwrong"].fillna(0) > 0]
    unchecked = int(summary["nwrong"].isna().sum())
    best = summary.iloc[int(summary["busbw_gbps"].to_numpy().argmax())]
    peak = (
        f"Peak bus bandwidth {best['busbw_gbps']:.2f} GB/s ({best['op']} "
        f"{format_size(best['size_bytes'])}, {best['scope']} n={best['world_size']})."
    )
    if len(wrong):
        return (
            f"{len(wrong)} of {len(summary)} cases returned wrong results on {where}: "
            "do not trust this fabric until that is explained. " + peak
        ), True
    if status != "complete":
        return (
            f"Run {status}: {len(summary)} cases measured on {where} before it stopped; "
            "every result checked was correct. " + peak
        ), True
    if unchecked:
        return (
            f"{len(summary)} cases measured on {where}; {unchecked} were not checked for "
            f"correctness (--no-check). {peak}"
        ), False
    return f"{len(summary)} cases measured on {where}; every result was correct. {peak}", False


def interesting_rows(summary: pd.DataFrame) -> tuple[int, ...]:
    """Row positions worth seeing first: the largest size of every curve (scope, world size,
    group, op, dtype, place) and every case with wrong elements."""
    keys = ["scope", "world_size", "group", "op", "dtype", "in_place"]
    ordered = summary.reset_index(drop=True)
    largest = ordered.groupby(keys, sort=False)["size_bytes"].idxmax()
    wrong = ordered.index[ordered["nwrong"].fillna(0) > 0]
    return tuple(sorted({int(i) for i in largest} | {int(i) for i in wrong}))


def _figures(summary: pd.DataFrame) -> list[str]:
    pairs = summary[["op", "dtype"]].drop_duplicates()
    order = sorted(
        zip(pairs["op"], pairs["dtype"], strict=True),
        key=lambda p: (OPS.index(p[0]) if p[0] in OPS else len(OPS), p[1]),
    )
    return [embed(busbw_figure(summary, str(op), str(dtype))) for op, dtype in order]


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Curves and summary of the collectives, or nothing if none was measured."""
    if not analyzed.has("collectives"):
        return []
    summary = analyzed.summary("collectives")
    if summary.empty:
        return []
    table = summary_table(
        summary,
        "collectives",
        id="summary",
        left=(1, 2, 3, 4),
        wrong_last=True,
        shown=interesting_rows(summary),
        intro="Shown: each curve's largest size and every case with wrong elements; all rows "
        "one click below.",
    )
    return [
        Section(
            title="Collectives: bus bandwidth against size",
            anchor="collectives",
            blocks=[Figures(html=_figures(summary))],
            method=method(plan),
            verdict=verdict(analyzed.info, summary),
        ),
        Section(title="Collectives: summary", anchor="collectives-summary", blocks=[table]),
    ]
