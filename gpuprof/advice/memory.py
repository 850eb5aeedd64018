"""Cases skipped because they would not fit in memory: what they needed, what was free, and
what would have fit instead (other sharding strategies, a smaller batch, activation
checkpointing), with the bytes each needs. The numbers are the probe's own estimates, written
into the skip when the case was refused (run.json `skipped`)."""

from __future__ import annotations

from typing import Any

from gpuprof.units import format_size


def memory_skips(info: dict[str, Any], probe: str) -> list[dict[str, Any]]:
    """The probe's memory skips in run.json, one per case and world size (the group's ranks
    agreed, so every rank recorded the same)."""
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for skip in info.get("skipped") or []:
        if skip.get("probe") == probe and skip.get("need_bytes") is not None:
            found.setdefault((skip.get("case_id"), skip.get("world_size")), skip)
    return list(found.values())


def memory_findings(info: dict[str, Any], probe: str, label: str) -> list[str]:
    """One finding per case that did not fit: its need, the free memory, and what fits."""
    lines = []
    for skip in memory_skips(info, probe):
        instead = skip.get("fits_instead") or []
        named = "; ".join(f"{what} (about {format_size(need)})" for what, need in instead)
        action = (
            f"What would fit: {named}."
            if named
            else "Nothing smaller fits on one rank: shard over more ranks or use larger devices."
        )
        lines.append(
            f"{label} {skip['case_id']} n={skip.get('world_size')} did not fit and was not "
            f"measured: it needs about {format_size(skip['need_bytes'])} a rank and "
            f"{format_size(skip['free_bytes'])} was free on the tightest rank (of "
            f"{format_size(skip['total_bytes'])}). {action}"
        )
    return lines
