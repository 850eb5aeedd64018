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


def method(plan: dict[str, Any], imported: bool = False) -> list[str]:
    """How the collectives numbers were measured; of an imported run (gpuprof measured
    nothing: the general method says what its times are) only the formulas."""
    params = plan.get("collectives", {})
    formulas = [
        "algbw = size / time; busbw = algbw x factor: all_reduce 2(n-1)/n; all_gather, "
        "reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, sendrecv 1 (nccl-tests "
        "semantics). Sizes are binary (KiB, MiB), bandwidth decimal (1 GB/s = 1e9 B/s).",
        "size is the whole buffer for all_reduce, broadcast, reduce and sendrecv, the total "
        "output for all_gather, the total input for reduce_scatter, and the per-rank send "
        "buffer for all_to_all.",
    ]
    if imported:
        return formulas
    return [
        f"Each collective case: {params.get('warmup_iters', '?')} warmup iteration(s), one "
        "correctness iteration with exactly predictable inputs (#wrong counts elements that "
        f"differ), then timed iterations filling a {1e3 * float(params.get('budget_s', 0)):g} "
        f"ms budget (between {params.get('min_iters', '?')} and {params.get('max_iters', '?')}),"
        " the count agreed across the group from the slowest rank's warmup.",
        "time_us is the median over iterations of the slowest rank's time (a collective ends "
        "when its last rank does); p99_us likewise.",
        *formulas,
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
            f"correctness ({_unchecked_why(info)}). {peak}"
        ), False
    return f"{len(summary)} cases measured on {where}; every result was correct. {peak}", False


def _unchecked_why(info: dict[str, Any]) -> str:
    """Why results went unchecked: the run's own option, or what the imported log printed."""
    if info.get("source") == "nccl-tests":
        return "the log has no count of wrong values: N/A with -c 0, or an older error column"
    return "--no-check"


def interesting_rows(summary: pd.DataFrame) -> tuple[int, ...]:
    """Row positions worth seeing first: the largest size of every curve (scope, world size,
    group, op, dtype, place) and every case with wrong elements."""
    keys = ["scope", "world_size", "group", "op", "dtype", "in_place"]
    ordered = summary.reset_index(drop=True)
    largest = ordered.groupby(keys, sort=False)["size_bytes"].idxmax()
    wrong = ordered.index[ordered["nwrong"].fillna(0) > 0]
    return tuple(sorted({int(i) for i in largest} | {int(i) for i in wrong}))


# a scope with more groups at once than this (intra on every node, rails on many nodes) is
# shown per case as its median group and its slowest one; cases with wrong elements in full
MAX_GROUPS = 8


def at_scale(summary: pd.DataFrame, name_slowest: bool) -> pd.DataFrame:
    """The summary for the report on many nodes: a scope of more than MAX_GROUPS groups as,
    per case, the median over its groups (group `median of N`) and the slowest group (named,
    or `slowest of N` for a figure's one line), plus every row with wrong elements."""
    case = [c for c in ("op", "dtype", "redop", "in_place", "size_bytes") if c in summary]
    parts = []
    for _, part in summary.groupby(["scope", "world_size"], sort=False):
        groups = part["group"].nunique()
        if groups <= MAX_GROUPS:
            parts.append(part)
            continue
        by_case = part.groupby(case, sort=False, dropna=False)
        median = by_case.median(numeric_only=True).reset_index()
        median = median.assign(
            scope=part["scope"].iloc[0],
            group=f"median of {groups}",
            world_size=part["world_size"].iloc[0],  # a float as a median: "n=128.0"
        )
        median["nwrong"] = by_case["nwrong"].max().to_numpy()
        slowest = part.loc[by_case["busbw_gbps"].idxmin()].copy()
        slowest["group"] = (
            slowest["group"].astype(str) + f" (slowest of {groups})"
            if name_slowest
            else f"slowest of {groups}"
        )
        wrong = part[part["nwrong"].fillna(0) > 0]
        parts += [median[[c for c in part.columns if c in median]], slowest, wrong]
    return pd.concat(parts, ignore_index=True).drop_duplicates()


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
    shown = at_scale(summary, name_slowest=True)
    many = len(shown) < len(summary)
    table = summary_table(
        shown,
        "collectives",
        id="summary",
        left=(1, 2, 3, 4),
        wrong_last=True,
        shown=interesting_rows(shown),
        intro="Shown: each curve's largest size and every case with wrong elements; all rows "
        "one click below."
        + (
            f" Scopes of more than {MAX_GROUPS} groups at once show per case the median group "
            "and the slowest one (every group: gpuprof show RUN)."
            if many
            else ""
        ),
    )
    return [
        Section(
            title="Collectives: bus bandwidth against size",
            anchor="collectives",
            blocks=[Figures(html=_figures(at_scale(summary, name_slowest=False)))],
            method=method(plan, analyzed.info.get("launcher") == "import"),
            verdict=verdict(analyzed.info, summary),
        ),
        Section(title="Collectives: summary", anchor="collectives-summary", blocks=[table]),
    ]
