"""A fake NVML behind the same call boundary as `pynvml`, for tests and demos without GPUs.

It models what nvml.h documents where gpuprof depends on it, so tests run the real code paths:

- PCI bus ids as NVML prints them: `00000000:18:00.0`, 8-digit domain, upper-case hex.
- NVLink throughput fields (138/139, cumulative KiB): nvmlDeviceGetFieldValues takes plain
  field ids (scopeId 0: link 0 only) or (field id, scopeId) pairs, scopeId a link id or
  UINT_MAX (0xFFFFFFFF) for the sum over all links; each entry has its own nvmlReturn.
- NVSwitch systems: every link of a GPU ends at a switch (remote device type
  NVML_NVLINK_DEVICE_TYPE_SWITCH, remote bus id the switch's), and
  nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK) says whether two GPUs talk over it.
- NVML lists every GPU of the machine, whatever CUDA_VISIBLE_DEVICES says.
- An older nvidia-ml-py lacks newer functions (`missing`: AttributeError, as a module would);
  a device that does not support a query raises NVMLError_NotSupported.
- Clocks: nvmlDeviceGetClockInfo / nvmlDeviceGetMaxClockInfo / nvmlDeviceGetApplicationsClock
  take an nvmlClockType_t (NVML_CLOCK_GRAPHICS 0, NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2) and
  answer MHz; applications clocks are "the current setting of a clock that applications will
  use unless an overspec situation occurs" (nvml.h), not supported on every device.
- Clock event reasons (nvmlDeviceGetCurrentClocksEventReasons, and its deprecated Throttle
  name): a bitmask of nvml.h's nvmlClocksEventReasons, the device's `clock_reasons` as set:
  GpuIdle 0x1, ApplicationsClocksSetting 0x2, SwPowerCap 0x4, HwSlowdown 0x8, SyncBoost 0x10,
  SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80,
  DisplayClockSetting 0x100. nvml.h says HwSlowdown, HwThermalSlowdown and
  HwPowerBrakeSlowdown reduce the core clocks "by a factor of 2 or more": a device given one
  of them and no explicit `sm_clock_mhz` runs at half its applications clock.

Whole machines to fake (HGX boards, PCIe boxes, `GPUPROF_FAKE_NVML`) are in
`gpuprof.machine.fake_machines`; `FakeNVML.dgx(n, name)` joins every GPU pair by NVLinks.
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
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_ERROR_NOT_SUPPORTED = 3
UINT_MAX = 0xFFFFFFFF
# nvmlClocksEventReasons that reduce the core clocks "by a factor of 2 or more" (nvml.h):
# HwSlowdown 0x8, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80
HW_FACTOR_OF_TWO = 0x8 | 0x40 | 0x80


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
    pcie_switch: int | None = None  # GPUs under one PCIe switch: PIX
    host_bridge: int | None = None  # GPUs under one host bridge: PHB
    # what the counters say; `unsupported` names NVML functions that raise NotSupported
    util_pct: int = 50
    power_mw: int = 400_000
    temperature_c: int = 55
    sm_clock_mhz: int | None = None  # None: the applications clock, halved under a HW slowdown
    mem_clock_mhz: int = 2619
    app_clock_mhz: int = 1980  # NVML_CLOCK_SM applications clock (H100 SXM: 1980 MHz)
    max_clock_mhz: int = 1980
    clock_reasons: int = 0
    pcie_kbps: int = 1_000_000
    nvlink_kib_per_s: float = 5e6  # per active link, each way (~5 GB/s)
    nvlink_kib_start: int = 0  # each link's counter at start: near 2**64 tests the wrap
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
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_P2P_CAPS_INDEX_NVLINK = NVML_P2P_CAPS_INDEX_NVLINK

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver: str = "550.54.15",
        clock: Callable[[], float] = time.monotonic,
        switches: set[str] | None = None,
        missing: set[str] | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.clock = clock
        self.t0 = clock()
        self.switches = switches or set()  # bus ids of NVSwitches (remote ends of links)
        self.missing = missing or set()  # functions this (older) nvidia-ml-py lacks

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

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

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: FakeGpu, link: int) -> int:  # noqa: N802
        if link >= len(gpu.nvlinks):
            raise NVMLError_NotSupported("link down")
        switch = gpu.nvlinks[link] in self.switches
        return NVML_NVLINK_DEVICE_TYPE_SWITCH if switch else NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetP2PStatus(self, a: FakeGpu, b: FakeGpu, index: int) -> int:  # noqa: N802
        if index != NVML_P2P_CAPS_INDEX_NVLINK:
            return NVML_P2P_STATUS_OK  # read/write/atomics over PCIe: fine on these boards
        direct = b.bus_id in a.nvlinks
        switched = bool(set(a.nvlinks) & self.switches) and bool(set(b.nvlinks) & self.switches)
        return NVML_P2P_STATUS_OK if direct or switched else NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeGpu, b: FakeGpu) -> int:  # noqa: N802
        if a is b:
            return NVML_TOPOLOGY_INTERNAL
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return NVML_TOPOLOGY_SINGLE
        if a.host_bridge is not None and a.host_bridge == b.host_bridge:
            return NVML_TOPOLOGY_HOSTBRIDGE
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
        """The current clock (MHz) of an nvmlClockType_t."""
        self._check(gpu, "nvmlDeviceGetClockInfo")
        if clock == 2:  # NVML_CLOCK_MEM
            return gpu.mem_clock_mhz
        if gpu.sm_clock_mhz is not None:
            return gpu.sm_clock_mhz
        halved = gpu.clock_reasons & HW_FACTOR_OF_TWO  # "by a factor of 2 or more"
        return gpu.app_clock_mhz // 2 if halved else gpu.app_clock_mhz

    def nvmlDeviceGetApplicationsClock(self, gpu: FakeGpu, clock: int) -> int:  # noqa: N802
        """The applications clock (MHz) of an nvmlClockType_t (SM and graphics alike here)."""
        self._check(gpu, "nvmlDeviceGetApplicationsClock")
        return gpu.mem_clock_mhz if clock == 2 else gpu.app_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:  # noqa: N802
        """The maximum clock (MHz) of an nvmlClockType_t."""
        self._check(gpu, "nvmlDeviceGetMaxClockInfo")
        return gpu.mem_clock_mhz if clock == 2 else gpu.max_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetCurrentClocksEventReasons")
        return gpu.clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:  # noqa: N802
        """The older name of the same bitmask (deprecated, still in every nvidia-ml-py)."""
        self._check(gpu, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return gpu.clock_reasons

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetPcieThroughput")
        return gpu.pcie_kbps

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, kind: int, counter: int) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTotalEccErrors")
        return 0

    def _link_kib(self, gpu: FakeGpu, link: int) -> int:
        return (gpu.nvlink_kib_start + int(gpu.nvlink_kib_per_s * self._elapsed())) % (1 << 64)

    def _field(self, gpu: FakeGpu, request: int | tuple[int, int]) -> _Field:
        field_id, scope = request if isinstance(request, tuple) else (request, 0)
        links = range(len(gpu.nvlinks))
        if not gpu.nvlinks:  # a GPU without NVLink does not support the NVLink fields
            return _Field(fieldId=field_id, nvmlReturn=NVML_ERROR_NOT_SUPPORTED, value=_Value(0))
        if scope == UINT_MAX:
            kib = sum(self._link_kib(gpu, link) for link in links) % (1 << 64)
        elif scope in links:
            kib = self._link_kib(gpu, scope)
        else:
            return _Field(fieldId=field_id, nvmlReturn=NVML_ERROR_NOT_SUPPORTED, value=_Value(0))
        return _Field(fieldId=field_id, nvmlReturn=0, value=_Value(ullVal=kib))

    def nvmlDeviceGetFieldValues(  # noqa: N802
        self, gpu: FakeGpu, fields: list[int | tuple[int, int]]
    ) -> list[_Field]:
        """Fields 138/139: per link (scopeId = link id; a plain id means scopeId 0) or summed
        over every link (scopeId UINT_MAX)."""
        self._check(gpu, "nvmlDeviceGetFieldValues")
        return [self._field(gpu, request) for request in fields]

    def numa_node(self, bus_id: str) -> int | None:
        """What sysfs would say for this device's NUMA node (fake only)."""
        return next((g.numa for g in self.gpus if g.bus_id == bus_id), None)
