"""GPU-to-GPU and GPU-to-NIC topology from NVML and sysfs, printed like `nvidia-smi topo -m`.

Labels: `X` (itself), `NV#` (# NVLinks between the two GPUs; on NVSwitch systems, where every
link ends at a switch, the links each GPU has to the switches, as nvidia-smi prints), `PIX`
(one PCIe switch), `PXB`
(several switches), `PHB` (the CPU's host bridge), `NODE` (same NUMA node, across host
bridges), `SYS` (across NUMA nodes / the CPU interconnect). GPU-to-NIC labels come from NUMA
affinity only (`NODE` or `SYS`): NVML does not see NICs.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

SYSFS = Path("/sys")
NVLINK_DEVICE_TYPE_SWITCH = 2  # nvml.h: NVML_NVLINK_DEVICE_TYPE_SWITCH
P2P_CAPS_INDEX_NVLINK = 2  # nvml.h: NVML_P2P_CAPS_INDEX_NVLINK
P2P_STATUS_OK = 0
_BUS_RE = re.compile(
    r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*$"
)


def bus_id_fields(bus_id: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a PCI bus id however its source wrote it (NVML's
    `00000000:D8:00.0`, torch's lower case, sysfs's 4-digit domain); None when it is not one."""
    match = _BUS_RE.match(str(bus_id))
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16), int(function)


def normalize_bus_id(bus_id: str) -> str:
    """A PCI bus id in NVML's form, `00000000:D8:00.0` (8-digit domain, upper case), whatever
    its source wrote. Unparseable text is returned upper-cased."""
    fields = bus_id_fields(bus_id)
    if fields is None:
        return str(bus_id).strip().upper()
    domain, bus, device, function = fields
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


def _level_labels(nvml: Any) -> dict[int, str]:
    return {
        nvml.NVML_TOPOLOGY_INTERNAL: "X",
        nvml.NVML_TOPOLOGY_SINGLE: "PIX",
        nvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
        nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        nvml.NVML_TOPOLOGY_NODE: "NODE",
        nvml.NVML_TOPOLOGY_SYSTEM: "SYS",
    }


def nvlink_peers(nvml: Any, handle: Any) -> tuple[Counter[str], int]:
    """Active NVLinks of a GPU: per remote GPU (by normalized PCI bus id), and the number
    that end at an NVSwitch (nvmlDeviceGetNvLinkRemoteDeviceType; an NVML without it: GPU)."""
    peers: Counter[str] = Counter()
    to_switch = 0
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = normalize_bus_id(
                str(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            )
        except nvml.NVMLError:
            continue  # a link that does not exist or is down
        try:
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except (AttributeError, nvml.NVMLError):
            kind = None
        if kind == NVLINK_DEVICE_TYPE_SWITCH:
            to_switch += 1
        else:
            peers[remote] += 1
    return peers, to_switch


def _nvlink_p2p(nvml: Any, a: Any, b: Any) -> bool:
    """Whether NVML says a and b reach each other over NVLink (True when it cannot tell)."""
    index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", P2P_CAPS_INDEX_NVLINK)
    try:
        return bool(nvml.nvmlDeviceGetP2PStatus(a, b, index) == P2P_STATUS_OK)
    except (AttributeError, nvml.NVMLError):
        return True


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
    raw = [str(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
    buses = [normalize_bus_id(b) for b in raw]
    levels = _level_labels(nvml)
    links = [nvlink_peers(nvml, h) for h in handles]
    matrix = []
    for i, a in enumerate(handles):
        peers, to_switch = links[i]
        row = []
        for j, b in enumerate(handles):
            switched = min(to_switch, links[j][1])
            if i == j:
                row.append("X")
            elif peers.get(buses[j]):
                row.append(f"NV{peers[buses[j]]}")
            elif switched and _nvlink_p2p(nvml, a, b):
                row.append(f"NV{switched}")
            else:
                try:
                    row.append(levels.get(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b), "?"))
                except nvml.NVMLError:
                    row.append("?")
        matrix.append(row)
    numa = [gpu_numa(nvml, bus) for bus in raw]
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
