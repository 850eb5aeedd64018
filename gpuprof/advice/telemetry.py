"""Telemetry: cases measured while a GPU's clocks were throttled (power or thermal)."""

from __future__ import annotations

from gpuprof.analysis.summary import Analyzed


def findings(analyzed: Analyzed) -> list[str]:
    """One finding per case that ran while a GPU of its node was throttled."""
    attributed = analyzed.attributed()
    if attributed.empty:
        return []
    return [
        f"{r['probe']} case {r['case_id']} ({r['scope']}) ran while a GPU of {r['host']} was "
        "throttled (power or thermal clock events): its numbers understate the hardware; "
        "check cooling and power limits (nvidia-smi -q -d PERFORMANCE) and rerun."
        for r in attributed[attributed["throttled"]].to_dict("records")
    ]
