"""Known peaks per GPU model and NIC rates, for "% of peak" and "is this good?".

Public datasheet figures (dense, no sparsity), in decimal units: GB/s = 1e9 B/s and
TFLOP/s = 1e12 FLOP/s. A model or a figure that is not in this table is missing, never
guessed: `pct_of_peak` is then empty. NVLink is per GPU and per direction, the number a
collective's busbw is compared with (docs/methodology.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class GpuPeaks:
    """Datasheet ceilings of one GPU model."""

    model: str
    memory_gbps: float | None = None
    nvlink_gbps: float | None = None  # per GPU, per direction
    pcie_gen: int | None = None
    tflops: dict[str, float] = field(default_factory=dict)  # dense, per dtype
    all_reduce_busbw_gbps: float | None = None  # a full NVLink node, ring (docs/methodology.md)
    # a full node with NVLink SHARP (NCCL's NVLS, on by default on third-generation NVSwitch):
    # the all_reduce busbw nccl-tests reaches at large sizes (docs/validation.md's rows)
    nvls_busbw_gbps: float | None = None
    # host <-> device per direction when not PCIe (GH200's NVLink-C2C: 450 GB/s each way)
    host_link_gbps: float | None = None

    @property
    def host_gbps(self) -> float | None:
        """What a host <-> device copy can reach per direction: the host link, else PCIe x16."""
        return self.host_link_gbps or pcie_x16_gbps(self.pcie_gen)


_A100 = {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0}
_H100_SXM = {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4,
             "float8": 1978.9}  # fmt: skip
_H100_PCIE = {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0, "float16": 756.0,
              "float8": 1513.0}  # fmt: skip
_L40S = {"float32": 91.6, "tf32": 183.0, "bfloat16": 362.1, "float16": 362.1, "float8": 733.0}

_H100_NVL = {"float32": 60.0, "tf32": 417.5, "bfloat16": 835.5, "float16": 835.5,
              "float8": 1670.5}  # fmt: skip
# H200 NVL: 1,671 / 3,341 / 835 TFLOPS with sparsity (bf16 / fp8 / tf32), 60 FP32 (H200 page)
_H200_NVL = _H100_NVL
_B200 = {"tf32": 1125.0, "bfloat16": 2250.0, "float16": 2250.0, "float8": 4500.0}
_GB200 = {"tf32": 1250.0, "bfloat16": 2500.0, "float16": 2500.0, "float8": 5000.0}

# (pattern on the NVML/CUDA device name, peaks); the first match wins, so specific first.
# Real names (NVIDIA's open-gpu-kernel-modules README lists them): "NVIDIA H100 80GB HBM3"
# (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200" (SXM), "NVIDIA H200 NVL" (PCIe
# cards joined by 2- or 4-way NVLink bridges: no NVSwitch), "NVIDIA GH200 480GB" (96 GB HBM3
# with 480 GB of Grace memory), "NVIDIA GH200 144G HBM3e", "NVIDIA A100-SXM4-40GB",
# "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA L40S",
# "NVIDIA B200", "NVIDIA GB200".
# NVLS references: H100 476 GB/s (8 x H100, nccl-tests issue #290, the NCCL maintainer's
# figure), H200 480 GB/s at 16 GiB (Azure's ND H200 v5 results), B200 838 GB/s at 8 GiB (AWS
# p6-b200, NVLS on); the rings' figures beside them
GPUS: list[tuple[str, GpuPeaks]] = [
    # NVLink-C2C to the Grace CPU: 900 GB/s total, 450 GB/s per direction (NVIDIA's Grace
    # Hopper architecture blog), so host <-> device copies are not bounded by PCIe
    (r"GH200.*144", GpuPeaks(model="GH200 144G HBM3e", memory_gbps=4800, nvlink_gbps=450,
                             pcie_gen=5, tflops=_H100_SXM, host_link_gbps=450)),
    (r"GH200", GpuPeaks(model="GH200", memory_gbps=4000, nvlink_gbps=450, pcie_gen=5,
                        tflops=_H100_SXM, host_link_gbps=450)),
    (r"H200 NVL", GpuPeaks(model="H200 NVL", memory_gbps=4800, nvlink_gbps=450, pcie_gen=5,
                           tflops=_H200_NVL)),
    (r"H200", GpuPeaks(model="H200 SXM", memory_gbps=4800, nvlink_gbps=450, pcie_gen=5,
                       tflops=_H100_SXM, all_reduce_busbw_gbps=367, nvls_busbw_gbps=480)),
    (r"H100 NVL", GpuPeaks(model="H100 NVL", memory_gbps=3938, nvlink_gbps=300, pcie_gen=5,
                           tflops=_H100_NVL)),
    (r"H100.*PCIe", GpuPeaks(model="H100 PCIe", memory_gbps=2000, pcie_gen=5,
                             tflops=_H100_PCIE)),
    (r"H100", GpuPeaks(model="H100 SXM", memory_gbps=3350, nvlink_gbps=450, pcie_gen=5,
                       tflops=_H100_SXM, all_reduce_busbw_gbps=370, nvls_busbw_gbps=476)),
    (r"A100.*(PCIE.*80|80GB.*PCIE)", GpuPeaks(model="A100 PCIe 80GB", memory_gbps=1935,
                                              pcie_gen=4, tflops=_A100)),
    (r"A100.*PCIE", GpuPeaks(model="A100 PCIe 40GB", memory_gbps=1555, pcie_gen=4,
                             tflops=_A100)),
    (r"A100.*80", GpuPeaks(model="A100 SXM4 80GB", memory_gbps=2039, nvlink_gbps=300,
                           pcie_gen=4, tflops=_A100, all_reduce_busbw_gbps=232)),
    (r"A100", GpuPeaks(model="A100 SXM4 40GB", memory_gbps=1555, nvlink_gbps=300, pcie_gen=4,
                       tflops=_A100, all_reduce_busbw_gbps=232)),
    # a Blackwell in the Grace superchip: NVLink-C2C to the CPU, as GH200 (900 GB/s total)
    (r"GB200", GpuPeaks(model="GB200", memory_gbps=8000, nvlink_gbps=900, pcie_gen=6,
                        tflops=_GB200, all_reduce_busbw_gbps=680, host_link_gbps=450)),
    (r"B200", GpuPeaks(model="B200", memory_gbps=8000, nvlink_gbps=900, pcie_gen=5,
                       tflops=_B200, all_reduce_busbw_gbps=682, nvls_busbw_gbps=838)),
    (r"L40S", GpuPeaks(model="L40S", memory_gbps=864, pcie_gen=4, tflops=_L40S)),
]  # fmt: skip


def gpu_peaks(name: str | None) -> GpuPeaks | None:
    """Peaks of the GPU called `name` (as NVML or torch names it), or None if unknown."""
    if not name:
        return None
    for pattern, peaks in GPUS:
        if re.search(pattern, name, re.IGNORECASE):
            return peaks
    return None


def pcie_x16_gbps(gen: int | None) -> float | None:
    """Spec bandwidth of a PCIe x16 link per direction (gen 3: 15.8, 4: 31.5, 5: 63 GB/s)."""
    per_lane = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gen or 0)
    return round(per_lane * 16, 1) if per_lane else None


def nic_gbps(speed_mbps: int | None) -> float | None:
    """A NIC's line rate in GB/s from its Mbit/s (sysfs speed); None when unknown (0 or -1)."""
    if not speed_mbps or speed_mbps <= 0:
        return None
    return speed_mbps / 8 / 1e3


def pct_of_peak(measured: float, peak: float | None) -> float | None:
    """measured / peak in percent, or None when the peak is unknown."""
    return None if not peak else 100.0 * measured / peak
