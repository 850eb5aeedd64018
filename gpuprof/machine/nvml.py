"""The NVML module to read GPUs through: nvidia-ml-py's `pynvml`, initialised, or the fake
(`gpuprof.machine.fake_nvml`) that GPUPROF_FAKE_NVML selects, for machines without GPUs."""

from __future__ import annotations

import os
from typing import Any

from gpuprof.machine.fake_machines import from_spec

FAKE_NVML_ENV = "GPUPROF_FAKE_NVML"


def open_nvml() -> tuple[Any, str | None]:
    """(the initialised NVML module, None), or (None, why not) when NVML or its driver is
    absent. The caller shuts it down (nvmlShutdown) when done."""
    if os.environ.get(FAKE_NVML_ENV):
        return from_spec(os.environ[FAKE_NVML_ENV]), None
    try:
        import pynvml  # optional at run time: absent or driverless machines have no GPUs to read

        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / ImportError
        return None, f"{type(exc).__name__}: {exc}"
    return pynvml, None
