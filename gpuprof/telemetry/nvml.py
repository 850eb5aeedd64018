"""NVML counters per GPU. Every metric a device does not support is missing (None), never
zero, and never stops the sampler (nvml.h: NVML_ERROR_NOT_SUPPORTED).

Rates come from counter deltas over the sampling interval: energy (mJ) -> power, NVLink
throughput fields 138/139 (cumulative KiB) -> GB/s. nvml.h: those fields take the link id in
`scopeId`, or UINT_MAX for the sum over every link; a plain field id means scopeId 0, link 0
only, so they are asked for as (field, UINT_MAX) pairs. Counters are unsigned 64-bit; a delta
across a wrap-around is corrected.

NVML lists every GPU of the machine (it ignores CUDA_VISIBLE_DEVICES): given the job's PCI
bus ids, only those GPUs are sampled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuprof.machine.clocks import NVML_CLOCK_SM, clock_flags
from gpuprof.machine.topology import normalize_bus_id

NVLINK_TX, NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB
ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX: the sum over every NVLink of the GPU


def counter_delta(previous: int, current: int, bits: int = 64) -> int:
    """current - previous for an unsigned counter that may have wrapped once."""
    delta = current - previous
    return delta + (1 << bits) if delta < 0 else delta


class GpuSampler:
    """Samples the job's GPUs (every GPU NVML sees when `bus_ids` is None); keeps the previous
    counters for rates."""

    def __init__(self, nvml: Any, bus_ids: Iterable[str] | None = None) -> None:
        self.nvml = nvml
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        buses = [normalize_bus_id(str(nvml.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
        wanted = None if bus_ids is None else {normalize_bus_id(b) for b in bus_ids}
        keep = [i for i, bus in enumerate(buses) if wanted is None or bus in wanted]
        self.handles = [handles[i] for i in keep]
        self.buses = [buses[i] for i in keep]
        self.indices = keep  # NVML's index of each sampled GPU (source gpu<index>)
        self._prev: dict[tuple[int, str], tuple[int, int]] = {}

    def _get(self, function: str, *args: Any) -> Any:
        """nvml.<function>(*args), or None when the device does not support it or this
        nvidia-ml-py has no such function."""
        try:
            return getattr(self.nvml, function)(*args)
        except (self.nvml.NVMLError, AttributeError):
            return None  # not supported on this device (or transiently unavailable)

    def _reasons(self, handle: Any) -> int | None:
        """The clock-event bitmask; nvidia-ml-py before 12.535 only has the older name."""
        if hasattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
            return self._get("nvmlDeviceGetCurrentClocksEventReasons", handle)  # type: ignore[no-any-return]
        return self._get("nvmlDeviceGetCurrentClocksThrottleReasons", handle)  # type: ignore[no-any-return]

    def _rate(
        self, gpu: int, name: str, value: int | None, t_ns: int, scale: float
    ) -> float | None:
        """Per-second rate of a cumulative counter since the last sample, times `scale`."""
        if value is None:
            return None
        prev = self._prev.get((gpu, name))
        self._prev[(gpu, name)] = (value, t_ns)
        if prev is None or t_ns <= prev[1]:
            return None
        return counter_delta(prev[0], value) * scale / ((t_ns - prev[1]) / 1e9)

    def _app_clock(self, handle: Any) -> int | None:
        """The SM clock applications run at (nvmlDeviceGetApplicationsClock), else the
        maximum (nvmlDeviceGetMaxClockInfo) where applications clocks are not supported."""
        found = self._get("nvmlDeviceGetApplicationsClock", handle, NVML_CLOCK_SM)
        if found is None:
            found = self._get("nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)
        return found  # type: ignore[no-any-return]

    def _fields(self, handle: Any) -> tuple[int | None, int | None]:
        fields = [(NVLINK_TX, ALL_LINKS), (NVLINK_RX, ALL_LINKS)]
        values = self._get("nvmlDeviceGetFieldValues", handle, fields)
        if values is None:
            return None, None
        out = [int(v.value.ullVal) if v.nvmlReturn == 0 else None for v in values]
        return out[0], out[1]

    def sample(self, t_ns: int) -> list[dict[str, Any]]:
        """One row per GPU."""
        rows = []
        for i, h in enumerate(self.handles):
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            power = self._get("nvmlDeviceGetPowerUsage", h)
            energy = self._get("nvmlDeviceGetTotalEnergyConsumption", h)
            reasons = self._reasons(h)
            sm_clock = self._get("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)
            app_clock = self._app_clock(h)
            pcie_tx = self._get("nvmlDeviceGetPcieThroughput", h, 0)
            pcie_rx = self._get("nvmlDeviceGetPcieThroughput", h, 1)
            nvl_tx, nvl_rx = self._fields(h)
            rows.append(
                {
                    "source": f"gpu{self.indices[i]}",
                    "bus_id": self.buses[i],
                    "gpu_util_pct": None if util is None else float(util.gpu),
                    "mem_util_pct": None if util is None else float(util.memory),
                    "mem_used_bytes": None if mem is None else int(mem.used),
                    "power_w": None if power is None else power / 1e3,
                    "energy_j": None if energy is None else energy / 1e3,
                    "power_from_energy_w": self._rate(i, "energy", energy, t_ns, 1e-3),
                    "temperature_c": self._get("nvmlDeviceGetTemperature", h, 0),
                    "sm_clock_mhz": sm_clock,
                    "app_clock_mhz": app_clock,
                    "mem_clock_mhz": self._get("nvmlDeviceGetClockInfo", h, 2),
                    "clock_reasons": reasons,
                    **clock_flags(reasons, sm_clock, app_clock),
                    "pcie_tx_gbps": None if pcie_tx is None else pcie_tx * 1e3 / 1e9,  # KB/s
                    "pcie_rx_gbps": None if pcie_rx is None else pcie_rx * 1e3 / 1e9,
                    "nvlink_tx_bytes": None if nvl_tx is None else nvl_tx * 1024,
                    "nvlink_rx_bytes": None if nvl_rx is None else nvl_rx * 1024,
                    "nvlink_tx_gbps": self._rate(i, "nvl_tx", nvl_tx, t_ns, 1024 / 1e9),
                    "nvlink_rx_gbps": self._rate(i, "nvl_rx", nvl_rx, t_ns, 1024 / 1e9),
                    "ecc_uncorrected": self._get(
                        "nvmlDeviceGetTotalEccErrors", h, 1, 0
                    ),  # volatile
                }
            )
        return rows
