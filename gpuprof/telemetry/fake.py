"""A fake NVML behind the same call boundary as `pynvml`, for tests and demos without GPUs.

`FakeNVML.dgx(num_gpus, name)` builds an NVSwitch-style node: every GPU pair joined by
`links` NVLinks, GPUs split over two NUMA nodes. Select it for any gpuprof command with
`GPUPROF_FAKE_NVML=<num_gpus>x<name>`, e.g. `GPUPROF_FAKE_NVML="8xNVIDIA H100 80GB HBM3"`.
Functions a device does not support raise NVMLError_NotSupported, as real NVML does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_NVLINK_MAX_LINKS = 18


class NVMLError(Exception):
    """Base of the fake's errors (pynvml.NVMLError)."""


class NVMLError_NotSupported(NVMLError):  # noqa: N801, N818 - pynvml names
    """The device does not support this query."""


@dataclass
class FakeGpu:
    """One fake device."""

    name: str
    uuid: str
    bus_id: str
    numa: int
    memory_bytes: int = 80 << 30
    nvlinks: list[str] = field(default_factory=list)  # remote bus id per active link


@dataclass
class _Pci:
    busId: str  # noqa: N815 - pynvml's field name


@dataclass
class _Memory:
    total: int
    used: int = 0
    free: int = 0


class FakeNVML:
    """The subset of pynvml gpuprof calls, answered from a list of FakeGpu."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_TOPOLOGY_INTERNAL = NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM

    def __init__(self, gpus: list[FakeGpu], driver: str = "550.54.15") -> None:
        self.gpus = gpus
        self.driver = driver

    @classmethod
    def dgx(
        cls, num_gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3", links: int = 18
    ) -> FakeNVML:
        """Every pair of GPUs joined by NVLink (the `links` of a GPU shared evenly among its
        peers); half the GPUs per NUMA node."""
        buses = [f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(num_gpus)]
        per_peer = max(1, links // max(1, num_gpus - 1))
        gpus = [
            FakeGpu(
                name=name,
                uuid=f"GPU-fake-{i:04d}",
                bus_id=bus,
                numa=0 if i < max(1, num_gpus // 2) else 1,
                nvlinks=[b for b in buses if b != bus for _ in range(per_peer)],
            )
            for i, bus in enumerate(buses)
        ]
        return cls(gpus)

    @classmethod
    def from_spec(cls, spec: str) -> FakeNVML:
        """'8xNVIDIA H100 80GB HBM3' -> dgx(8, 'NVIDIA H100 80GB HBM3')."""
        count, _, name = spec.partition("x")
        return cls.dgx(int(count), name.strip() or "NVIDIA H100 80GB HBM3")

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names below
        """No-op."""

    def nvmlShutdown(self) -> None:  # noqa: N802
        """No-op."""

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return self.driver

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:  # noqa: N802
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:  # noqa: N802
        return gpu.uuid

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> _Pci:  # noqa: N802
        return _Pci(gpu.bus_id)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> _Memory:  # noqa: N802
        return _Memory(total=gpu.memory_bytes)

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:  # noqa: N802
        if link >= NVML_NVLINK_MAX_LINKS:
            raise NVMLError_NotSupported("no such link")
        return int(link < len(gpu.nvlinks))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> _Pci:  # noqa: N802
        if link >= len(gpu.nvlinks):
            raise NVMLError_NotSupported("link down")
        return _Pci(gpu.nvlinks[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeGpu, b: FakeGpu) -> int:  # noqa: N802
        if a is b:
            return NVML_TOPOLOGY_INTERNAL
        return NVML_TOPOLOGY_NODE if a.numa == b.numa else NVML_TOPOLOGY_SYSTEM

    def numa_node(self, bus_id: str) -> int | None:
        """What sysfs would say for this device's NUMA node (fake only)."""
        return next((g.numa for g in self.gpus if g.bus_id == bus_id), None)


def fake_from_env(spec: str | None) -> Any:
    """The fake selected by GPUPROF_FAKE_NVML, or None."""
    return FakeNVML.from_spec(spec) if spec else None
