"""Canaries: a small workload outside the code under test, run by the rank between the
iterations of a case (`Prepared.canary`), on the same resource and in the same moments, so that
a check against a stored baseline can tell the machine's drift in that resource (a shared
host's memory bandwidth falling by a quarter within an hour) from a change of the case itself.

A canary uses none of torch's kernels: a torch upgrade that slows the host copy does not slow
its canary, while a host whose memory got slower slows both. Interleaved (case, canary, case,
canary...), each canary time sits within milliseconds of a case time, so the two medians share
the host's moment-to-moment noise as well as its drift: their ratio varies less than either
(a canary measured before and after the case instead, on buffers of its own each time, varied
as much as the case on a quiet host, and its ratio to the case more). Its value is recorded as
the case's `canary` result; `gpuprof.gate.machine` judges the case against it.
"""

from __future__ import annotations

import statistics
from typing import Protocol

import numpy as np
import torch


def _torch_memory(shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
    """An array on memory from torch's CPU allocator, as the case's tensors are: NumPy asks the
    kernel for transparent huge pages on its own large arrays (madvise), torch does not, and
    whether the kernel grants them varies from one allocation to the next (a numpy copy ran at
    22 GB/s in one run and 30 GB/s in the next, beside a torch copy at 23 in both)."""
    return torch.empty(shape, dtype=dtype).numpy()


class Canary(Protocol):
    """One canary operation (`run`, untimed by itself) and its value from the times (us)."""

    def run(self) -> None: ...

    def value(self, times_us: list[float]) -> float: ...


class MatmulCanary:
    """A numpy float32 matmul of n x n by n x n (NumPy's own BLAS, not torch's), counted as
    2 n^3 FLOP like the compute case: TFLOP/s at the median of its times. It follows the
    speed of the core the rank runs on (a busy hyperthread sibling, steal, a lower clock),
    which a shared VM changes per core and by the hour."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.n = n
        self.a, self.b, self.out = (_torch_memory((n, n), torch.float32) for _ in range(3))
        self.a[...] = rng.standard_normal((n, n), dtype=np.float32)
        self.b[...] = rng.standard_normal((n, n), dtype=np.float32)

    def run(self) -> None:
        np.matmul(self.a, self.b, out=self.out)

    def value(self, times_us: list[float]) -> float:
        return 2 * self.n**3 / statistics.median(times_us) / 1e6  # FLOP per us / 1e6


class HostCopyCanary:
    """A numpy copy of `size_bytes` host bytes between buffers of its own (allocated and
    touched once), counted as read plus written, as the host copy case counts it: GB/s at
    the median of its times. The copy is an elementwise ufunc loop (`np.positive` of the
    bytes: ordinary vector loads and stores, as torch's copy kernel does), not `np.copyto`:
    that is memmove, which glibc runs with non-temporal stores at this size, and on a shared
    VM their speed moves apart from ordinary stores' (a memmove canary ran 11-20% faster than
    in its baseline for most of two hours beside a torch copy that held within 3%; across 30
    fresh processes its bandwidth varied 5.5%, the torch copy's 3.2%, the ufunc's 2.7%)."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.src, self.dst = (_torch_memory((size_bytes,), torch.uint8) for _ in range(2))
        self.src[...] = 7
        self.run()  # the first touch maps the pages

    def run(self) -> None:
        np.positive(self.src, out=self.dst)

    def value(self, times_us: list[float]) -> float:
        return 2 * self.size_bytes / statistics.median(times_us) / 1e3  # bytes per us / 1e3


class StepCanary:
    """A training step's mix in miniature, for a case that is a whole step (DDP on CPU): a
    numpy float32 matmul of n x n by n x n and an elementwise copy of `size_bytes`
    (`MatmulCanary`, `HostCopyCanary`), run back to back; its value is runs per second at
    the median of its times, the two parts about equally long (0.3 ms each on one core of this
    VM). A step moves with its core's arithmetic and its memory alike: over 16 fresh launches
    of the ci DDP step on this 2-core VM, whose step varied 0.13 (log spread) from launch to
    launch, the step against this canary varied 0.058 (correlation 0.91); against a matmul
    alone 0.06-0.068, a copy alone 0.066 (other launches)."""

    def __init__(self, n: int = 256, size_bytes: int = 2 << 20) -> None:
        self.matmul = MatmulCanary(n)
        self.copy = HostCopyCanary(size_bytes)

    def run(self) -> None:
        self.matmul.run()
        self.copy.run()

    def value(self, times_us: list[float]) -> float:
        return 1e6 / statistics.median(times_us)
