"""Telemetry: cases measured while a GPU's clocks were slowed for a reason that means
something is wrong (a hardware or thermal slowdown, a power brake, or a busy clock under half
its applications clock), and, as information, cases that ran at the GPU's power limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.clocks import CLOCK_FLOOR

POWER_CAPPED_PCT = 50.0  # a case at its power limit this much of its time is worth a line


def _why(row: Mapping[Any, Any]) -> str:
    reasons = [r for r in str(row.get("clock_reasons_seen") or "").split(",") if r]
    if row.get("clock_low"):
        reasons.append(f"SM clock under {CLOCK_FLOOR:.0%} of the applications clock")
    return ", ".join(reasons) or "slowed"


def slowed_findings(attributed: pd.DataFrame) -> list[str]:
    """One finding per case that ran while a GPU of its node was slowed (untrusted)."""
    if attributed.empty or "throttled" not in attributed.columns:
        return []
    return [
        f"{r['probe']} case {r['case_id']} ({r['scope']}) ran while a GPU of {r['host']} was "
        f"slowed ({_why(r)}): its numbers understate the hardware; check cooling and power "
        "(nvidia-smi -q -d PERFORMANCE) and rerun."
        for r in attributed[attributed["throttled"].astype(bool)].to_dict("records")
    ]


def power_cap_findings(attributed: pd.DataFrame) -> list[str]:
    """One line for the cases that spent most of their time at the power limit, with the
    clocks they reached: a GPU's normal state under a heavy load, not held against them."""
    if attributed.empty or "power_capped_pct" not in attributed.columns:
        return []
    capped = attributed[attributed["power_capped_pct"].fillna(0) >= POWER_CAPPED_PCT]
    if capped.empty:
        return []
    clocks = capped["sm_clock_mhz"] / capped["app_clock_mhz"]
    reached = f", SM clock at {clocks.median():.0%} of the applications clock (median)"
    probes = ", ".join(sorted(set(capped["probe"])))
    return [
        f"{len(capped)} case(s) ({probes}) ran at the GPU's power limit (SwPowerCap) for at "
        f"least {POWER_CAPPED_PCT:.0f}% of their time{reached if clocks.notna().any() else ''}: "
        "the power limit sets their speed; they are kept as measured (a higher limit, "
        "nvidia-smi -pl, is the only knob)."
    ]


def findings(analyzed: Analyzed) -> list[str]:
    """The telemetry rules over a run."""
    attributed = analyzed.attributed()
    return slowed_findings(attributed) + power_cap_findings(attributed)
