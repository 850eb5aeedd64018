"""The memory and compute sections: each device's two ceilings, as tables."""

from __future__ import annotations

from typing import Any

from gpuprof.analysis.summary import Analyzed
from gpuprof.reports.sections import Note, Section, summary_table

METHOD = (
    "memory and compute: every node at once; each case on one device, either alone in its "
    "node (one device per node at a time) or together (every device of the node at once); "
    "memory GB/s counts bytes "
    "moved (host<->device one direction, device and host copies read plus written); "
    "matmul counts 2n^3 FLOP; % of peak uses datasheet figures (gpuprof/machine/hardware.py), "
    "blank where the hardware is unknown."
)
NOTE = (
    'Every node at the same time. "ran": alone, one device of the node at a time (the '
    "device's own link); together, every device of the node at once (as a training job "
    "loads it: what the devices share shows). Host copies run both ways, device copies and "
    "matmuls together. Memory: GB/s of bytes moved (host<->device: one "
    "direction; device and host copies: read plus written); % of peak against the datasheet "
    '(PCIe x16 per direction, HBM). Matmul: 2n\u00b3 FLOP per product. "-" means the peak of '
    "this hardware is not known: never guessed."
)


def _section(analyzed: Analyzed, probe: str, title: str) -> list[Section]:
    if not analyzed.has(probe):
        return []
    table = summary_table(analyzed.summary(probe), probe, css="ceilings", scroll=False)
    return [Section(title=title, anchor=probe, blocks=[Note(text=NOTE), table], method=[METHOD])]


def memory_section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Copy bandwidth per device and kind."""
    return _section(analyzed, "memory", "Memory copy ceilings")


def compute_section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """Matmul throughput per device and dtype."""
    return _section(analyzed, "compute", "Matmul ceilings")
