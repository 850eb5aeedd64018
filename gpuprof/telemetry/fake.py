"""A fake NVML behind the same call boundary as `pynvml`, for tests and demos without GPUs.

`FakeNVML.dgx(num_gpus, name)` builds an NVSwitch-style node: every GPU pair joined by
`links` NVLinks, GPUs split over two NUMA nodes. Select it for any gpuprof command with
`GPUPROF_FAKE_NVML=<num_gpus>x<name>`, e.g. `GPUPROF_FAKE_NVML="8xNVIDIA H100 80GB HBM3"`.
Functions a device does not support raise NVMLError_NotSupported, as real NVML does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
    # what the counters say; `unsupported` names NVML functions that raise NotSupported
    util_pct: int = 50
    power_mw: int = 400_000
    temperature_c: int = 55
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clock_reasons: int = 0
    pcie_kbps: int = 1_000_000
    nvlink_kib_per_s: float = 100e6  # ~102 GB/s each way
    nvlink_kib_start: int = 0  # start near 2**64 to test the wrap-around
    unsupported: set[str] = field(default_factory=set)


@dataclass
class _Pci:
    busId: str  # noqa: N815 - pynvml's field name


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Value:
    ullVal: int  # noqa: N815 - pynvml's field name


@dataclass
class _Field:
    fieldId: int  # noqa: N815
    nvmlReturn: int  # noqa: N815
    value: _Value


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

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver: str = "550.54.15",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.clock = clock
        self.t0 = clock()

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

    # -- sampling: counters grow with the (injectable) clock; unsupported calls raise --

    def _check(self, gpu: FakeGpu, function: str) -> None:
        if function in gpu.unsupported:
            raise NVMLError_NotSupported(function)

    def _elapsed(self) -> float:
        return self.clock() - self.t0

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> _Util:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetUtilizationRates")
        return _Util(gpu=gpu.util_pct, memory=gpu.util_pct // 2)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetPowerUsage")
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTotalEnergyConsumption")
        return int(gpu.power_mw * self._elapsed())  # mJ

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTemperature")
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetClockInfo")
        return gpu.sm_clock_mhz if clock == 1 else gpu.mem_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetCurrentClocksEventReasons")
        return gpu.clock_reasons

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetPcieThroughput")
        return gpu.pcie_kbps

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, kind: int, counter: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTotalEccErrors")
        return 0

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, fields: list[int]) -> list[_Field]:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetFieldValues")
        kib = (gpu.nvlink_kib_start + int(gpu.nvlink_kib_per_s * self._elapsed())) % (1 << 64)
        return [_Field(fieldId=f, nvmlReturn=0, value=_Value(ullVal=kib)) for f in fields]

    def numa_node(self, bus_id: str) -> int | None:
        """What sysfs would say for this device's NUMA node (fake only)."""
        return next((g.numa for g in self.gpus if g.bus_id == bus_id), None)


def fake_from_env(spec: str | None) -> Any:
    """The fake selected by GPUPROF_FAKE_NVML, or None."""
    return FakeNVML.from_spec(spec) if spec else None
