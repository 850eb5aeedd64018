"""GPU-to-GPU and GPU-to-NIC topology from NVML and sysfs, printed like `nvidia-smi topo -m`.

Labels: `X` (itself), `NV#` (# NVLinks between the two GPUs), `PIX` (one PCIe switch), `PXB`
(several switches), `PHB` (the CPU's host bridge), `NODE` (same NUMA node, across host
bridges), `SYS` (across NUMA nodes / the CPU interconnect). GPU-to-NIC labels come from NUMA
affinity only (`NODE` or `SYS`): NVML does not see NICs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

SYSFS = Path("/sys")


def _level_labels(nvml: Any) -> dict[int, str]:
    return {
        nvml.NVML_TOPOLOGY_INTERNAL: "X",
        nvml.NVML_TOPOLOGY_SINGLE: "PIX",
        nvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
        nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        nvml.NVML_TOPOLOGY_NODE: "NODE",
        nvml.NVML_TOPOLOGY_SYSTEM: "SYS",
    }


def nvlink_peers(nvml: Any, handle: Any) -> Counter[str]:
    """Active NVLinks of a GPU, counted per remote PCI bus id."""
    peers: Counter[str] = Counter()
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link):
                peers[str(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)] += 1
        except nvml.NVMLError:
            continue  # a link that does not exist or is down
    return peers


def _sysfs_numa(path: Path) -> int | None:
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def gpu_numa(nvml: Any, bus_id: str) -> int | None:
    """NUMA node of a GPU (sysfs wants a 4-digit domain, lower case)."""
    if hasattr(nvml, "numa_node"):  # the fake knows its own
        return nvml.numa_node(bus_id)  # type: ignore[no-any-return]
    domain, rest = bus_id.split(":", 1)
    return _sysfs_numa(SYSFS / "bus/pci/devices" / f"{domain[-4:]}:{rest}".lower() / "numa_node")


def nic_numa(name: str) -> int | None:
    """NUMA node of a NIC, None for virtual interfaces."""
    return _sysfs_numa(SYSFS / "class/net" / name / "device/numa_node")


def gpu_topology(nvml: Any, nics: list[str]) -> dict[str, Any]:
    """{'gpus': bus ids, 'matrix': GPU x GPU labels, 'numa': per GPU, 'nics': names,
    'nic_matrix': GPU x NIC labels}."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    buses = [str(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
    levels = _level_labels(nvml)
    matrix = []
    for i, a in enumerate(handles):
        peers = nvlink_peers(nvml, a)
        row = []
        for j, b in enumerate(handles):
            if i == j:
                row.append("X")
            elif peers.get(buses[j]):
                row.append(f"NV{peers[buses[j]]}")
            else:
                try:
                    row.append(levels.get(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b), "?"))
                except nvml.NVMLError:
                    row.append("?")
        matrix.append(row)
    numa = [gpu_numa(nvml, bus) for bus in buses]
    nic_numas = [nic_numa(n) for n in nics]
    nic_matrix = [
        ["?" if g is None or n is None else "NODE" if g == n else "SYS" for n in nic_numas]
        for g in numa
    ]
    return {
        "gpus": buses,
        "matrix": matrix,
        "numa": numa,
        "nics": nics,
        "nic_numa": nic_numas,
        "nic_matrix": nic_matrix,
    }


def format_topology(topo: dict[str, Any]) -> str:
    """The matrix as `nvidia-smi topo -m` prints it, plus each GPU's NUMA node."""
    gpus = [f"GPU{i}" for i in range(len(topo["gpus"]))]
    nics = [f"NIC{i}" for i in range(len(topo["nics"]))]
    header = ["", *gpus, *nics, "NUMA"]
    rows = [header]
    for i, name in enumerate(gpus):
        numa = topo["numa"][i]
        rows.append(
            [name, *topo["matrix"][i], *topo["nic_matrix"][i], "-" if numa is None else str(numa)]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    legend = [f"{nic}: {name}" for nic, name in zip(nics, topo["nics"], strict=True)]
    return "\n".join(lines + legend)
