"""Whole machines for the fake NVML (`gpuprof.machine.fake_nvml`), as tests and demos name
them, and the one `GPUPROF_FAKE_NVML` selects for any gpuprof command:

- `hgx-h100`: 8 x H100 SXM on 4 NVSwitches;
- `a100-pcie-bridged`: 8 x A100 80GB PCIe, NVLink bridges joining GPU pairs;
- `pcie-4gpu`: 4 x L40S on PCIe only;
- `<n>x<name>`, e.g. `8xNVIDIA H100 80GB HBM3`: `FakeNVML.dgx(n, name)`, every GPU pair joined
  directly by NVLinks.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuprof.errors import UsageError
from gpuprof.machine.fake_nvml import FakeGpu, FakeNVML


def hgx_h100() -> FakeNVML:
    """An HGX H100 board: 8 x H100 SXM, each with 18 NVLinks to 4 NVSwitches (5+4+4+5),
    no direct GPU-GPU link; GPUs 0-3 on NUMA node 0, 4-7 on node 1."""
    buses = [f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    switches = [f"00000000:{b}:00.0" for b in ("05", "06", "07", "08")]
    per_switch = (5, 4, 4, 5)
    gpus = [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=f"GPU-hgx-{i:04d}",
            bus_id=bus,
            numa=i // 4,
            host_bridge=i,
            nvlinks=[sw for sw, n in zip(switches, per_switch, strict=True) for _ in range(n)],
        )
        for i, bus in enumerate(buses)
    ]
    return FakeNVML(gpus, switches=set(switches))


def a100_pcie_bridged() -> FakeNVML:
    """8 x A100 80GB PCIe, NVLink bridges joining GPUs 0-1, 2-3, 4-5, 6-7 (12 links each
    pair); each bridged pair under one PCIe switch; GPUs 0-3 on NUMA node 0, 4-7 on 1."""
    buses = [f"00000000:{b}:00.0" for b in ("1B", "1C", "3D", "3E", "9C", "9D", "BD", "BE")]
    gpus = [
        FakeGpu(
            name="NVIDIA A100 80GB PCIe",
            uuid=f"GPU-a100-{i:04d}",
            bus_id=bus,
            numa=i // 4,
            pcie_switch=i // 2,
            host_bridge=i // 2,
            nvlinks=[buses[i ^ 1]] * 12,
        )
        for i, bus in enumerate(buses)
    ]
    return FakeNVML(gpus)


def pcie_4gpu() -> FakeNVML:
    """4 x L40S on PCIe only: GPUs 0-1 under one switch, 2-3 under another, one host
    bridge, one NUMA node."""
    buses = [f"00000000:{b}:00.0" for b in ("4F", "52", "D5", "D6")]
    gpus = [
        FakeGpu(
            name="NVIDIA L40S",
            uuid=f"GPU-l40s-{i:04d}",
            bus_id=bus,
            numa=0,
            pcie_switch=i // 2,
            host_bridge=0,
            memory_bytes=48 << 30,
        )
        for i, bus in enumerate(buses)
    ]
    return FakeNVML(gpus)


PRESETS: dict[str, Callable[[], FakeNVML]] = {
    "hgx-h100": hgx_h100,
    "a100-pcie-bridged": a100_pcie_bridged,
    "pcie-4gpu": pcie_4gpu,
}


def from_spec(spec: str) -> FakeNVML:
    """A preset name, or '8xNVIDIA H100 80GB HBM3' -> FakeNVML.dgx(8, 'NVIDIA H100 80GB HBM3');
    a UsageError naming the forms otherwise."""
    name = spec.strip()
    if name in PRESETS:
        return PRESETS[name]()
    count, sep, model = name.partition("x")
    if sep and count.isdigit() and 0 < int(count) <= 64:
        return FakeNVML.dgx(int(count), model.strip() or "NVIDIA H100 80GB HBM3")
    raise UsageError(
        f"GPUPROF_FAKE_NVML={spec!r} names no fake machine",
        f"use one of {', '.join(PRESETS)}, or <n>x<GPU name> such as 8xNVIDIA H100 80GB HBM3",
    )
