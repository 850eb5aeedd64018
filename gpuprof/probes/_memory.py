"""Whether a case fits in a device's memory, asked before building it, and what an
out-of-memory error inside a case becomes: a skip with the memory figures, not the end of the
sweep.

Test-only hook: GPUPROF_FAKE_DEVICE_MEMORY=BYTES makes every rank believe it has BYTES free of
BYTES (a CPU stand-in for a small GPU); GPUPROF_FAULT_OOM=PATTERN makes every rank raise
torch's out-of-memory error in the cases whose `probe/case_id` matches PATTERN (fnmatch), as
a GPU that is too small does on every rank of a data-parallel case.
"""

from __future__ import annotations

import fnmatch
import gc
import os

import psutil
import torch

from gpuprof.units import format_size

FAKE_MEMORY_ENV = "GPUPROF_FAKE_DEVICE_MEMORY"
FAULT_OOM_ENV = "GPUPROF_FAULT_OOM"
HEADROOM = 0.9  # a case may plan on this share of the free memory (allocator, fragmentation)


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes this rank may use: the GPU's (cudaMemGetInfo), or on CPU the host's
    available memory shared by the node's ranks (LOCAL_WORLD_SIZE)."""
    fake = os.environ.get(FAKE_MEMORY_ENV)
    if fake:
        return int(fake), int(fake)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    memory = psutil.virtual_memory()
    share = max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    return int(memory.available) // share, int(memory.total) // share


def raise_oom_if_asked(probe: str, case_id: str) -> None:
    """The test-only out-of-memory fault (GPUPROF_FAULT_OOM)."""
    pattern = os.environ.get(FAULT_OOM_ENV)
    if pattern and fnmatch.fnmatchcase(f"{probe}/{case_id}", pattern):
        raise torch.OutOfMemoryError(f"test fault: {FAULT_OOM_ENV}={pattern}")


class OutOfMemory(Exception):  # noqa: N818 - a case's skip, not an error
    """What an out-of-memory error inside a case becomes (the harness records it as a skip):
    the error's first line and the device's memory figures once the case's objects are
    freed."""

    def __init__(self, device: torch.device, exc: BaseException) -> None:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        free, total = device_memory(device)
        figures = f"{format_size(free)} free of {format_size(total)} after freeing the case"
        if device.type == "cuda":
            figures += f"; peak allocated {format_size(torch.cuda.max_memory_allocated(device))}"
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        super().__init__(f"out of memory: {first} ({figures})")
        self.details = {"free_bytes": free, "total_bytes": total}
