"""`gpuprof predict`'s terminal output: the fits, then each prediction as an aligned table,
every predicted number marked as such."""

from __future__ import annotations

import math

import pandas as pd

from gpuprof.predict.predictions import Prediction
from gpuprof.text import fixed_width
from gpuprof.units import format_size


def _num(value: float, digits: int = 3) -> str:
    """`digits` significant digits; a whole number with separators where it has more (no
    1.02e+03)."""
    if value is None or not math.isfinite(float(value)):
        return "-"
    if abs(float(value)) >= 10**digits:
        return f"{float(value):,.0f}"
    return f"{float(value):.{digits}g}"


def _gain(pct: float, decimals: int) -> str:
    """A gain in percent, signed; no -0.0% for a change under the last digit."""
    if not math.isfinite(pct):
        return "-"
    shown = round(pct, decimals)
    return f"{shown:+.{decimals}f}%" if shown else f"{0:.{decimals}f}%"


def fit_rows(fits: pd.DataFrame) -> list[list[str]]:
    """The alpha-beta table: header, then a row per fit."""
    rows = [
        ["op", "dtype", "scope", "n", "alpha_us", "busbw_GB/s", "hop_us", "half size", "switch",
         "R2", "worst%"],
    ]  # fmt: skip
    for r in fits.to_dict("records"):
        switch = r["switch_bytes"]
        rows.append(
            [
                r["op"],
                r["dtype"],
                r["scope"],
                str(r["world_size"]),
                _num(r["alpha_us"]),
                _num(r["link_gbps"]),
                _num(r["hop_us"]),
                format_size(r["half_bytes"]),
                "-" if switch is None or not math.isfinite(switch) else format_size(switch),
                _num(r["r2"], 4),
                f"{r['worst_rel_pct']:.1f}",
            ]
        )
    return rows


def _short(algorithm: str) -> str:
    """The algorithm column: the fits' long descriptions cut to their first word."""
    return algorithm.split(" (")[0]


def format_prediction(found: Prediction) -> str:
    """Every table of a prediction, titled, with the assumptions and notes last."""
    parts = ["Fits (time = alpha + size / beta; busbw = bus factor x beta, where large sizes tend)"]
    parts.append(fixed_width(fit_rows(found.fits), left=3))
    if not found.collectives.empty:
        rows = [["op", "nodes", "ranks", "size", "time_us", "busbw_GB/s", "band", "algorithm",
                 "from"]]  # fmt: skip
        for r in found.collectives.to_dict("records"):
            rows.append(
                [
                    r["op"],
                    str(r["nodes"]),
                    str(r["world_size"]),
                    format_size(r["size_bytes"]),
                    _num(r["time_us"], 4),
                    _num(r["busbw_gbps"]),
                    f"{_num(r['busbw_low'])}-{_num(r['busbw_high'])}",
                    _short(str(r["algorithm"])),
                    str(r["source"]),
                ]
            )
        parts += [f"\nCollectives, predicted ({found.gpus} ranks per node)", fixed_width(rows, 1)]
    if not found.ddp.empty:
        rows = [
            ["nodes", "ranks", "step_ms", "comm_added_ms", "efficiency", "samples/s", "band_ms"]
        ]
        for r in found.ddp.to_dict("records"):
            rows.append(
                [
                    str(r["nodes"]),
                    str(r["world_size"]),
                    _num(r["step_ms"], 4),
                    _num(r["comm_added_ms"], 3),
                    f"{100 * r['efficiency']:.0f}%",
                    _num(r["samples_per_s"], 4),
                    f"{_num(r['step_low_ms'])}-{_num(r['step_high_ms'])}",
                ]
            )
        parts += ["\nDDP step, predicted (weak scaling)", fixed_width(rows)]
        marks = [
            f"below {int(100 * mark)}% from {nodes} node(s)"
            if nodes
            else f"above {int(100 * mark)}%"
            for mark, nodes in found.crossings.items()
        ]
        predicted = ", ".join(str(n) for n in sorted(set(found.ddp["nodes"])))
        parts.append(f"Efficiency: {'; '.join(marks)} (at the node counts predicted: {predicted})")
    if not found.whatifs.empty:
        at = int(found.whatifs["nodes"].iloc[0])
        rows = [["scenario", "step_ms", "efficiency", "samples/s", "gain"]]
        for r in found.whatifs.to_dict("records"):
            rows.append(
                [
                    r["scenario"],
                    _num(r["step_ms"], 4),
                    f"{100 * r['efficiency']:.0f}%",
                    _num(r["samples_per_s"], 4),
                    _gain(r["gain_pct"], 1),
                ]
            )
        parts += [f"\nWhat-ifs at {at} nodes, predicted", fixed_width(rows, 1)]
    if not found.pipeline.empty:
        rows = [["schedule", "nodes", "p", "m", "v", "step_ms", "bubble%", "vs m=p", "measured_ms"]]
        for r in found.pipeline.to_dict("records"):
            rows.append(
                [
                    r["schedule"],
                    str(r["nodes"]),
                    str(r["p"]),
                    str(r["m"]),
                    str(r["v"]),
                    _num(r["step_ms"], 4),
                    f"{r['bubble_pct']:.1f}",
                    _gain(r["gain_pct"], 0),
                    _num(r["measured_ms"], 4),
                ]
            )
        title = "\nPipeline step, predicted (one stage per GPU; vs m=p: micro-batches/s)"
        parts += [title, fixed_width(rows, 1)]
    if not found.moe.empty:
        rows = [["skew", "cap", "nodes", "ranks", "experts", "imbal", "dispatch_us", "combine_us",
                 "net_GB/s", "from"]]  # fmt: skip
        for r in found.moe.to_dict("records"):
            rows.append(
                [
                    str(r["skew"]),
                    f"{r['capacity_factor']:g}",
                    str(r["nodes"]),
                    str(r["world_size"]),
                    str(r["experts"]),
                    f"{r['imbalance']:.2f}",
                    _num(r["dispatch_us"], 4),
                    _num(r["combine_us"], 4),
                    _num(r["net_gbps"]),
                    str(r["source"]),
                ]
            )
        title = "\nMoE layer, predicted (the busiest rank's dispatch and combine; net: its bytes "
        parts += [title + "from other nodes / dispatch)", fixed_width(rows, 1)]
    parts.append("\nAssumptions")
    parts += [f"- {line}" for line in found.assumptions]
    if found.notes:
        parts.append("Notes")
        parts += [f"- {line}" for line in found.notes]
    return "\n".join(parts)
