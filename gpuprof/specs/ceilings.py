"""Parameters shared by the two ceiling probes (memory copies and matmuls): each device alone,
one after another, like nvbandwidth's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices

MEMORY_KINDS_CUDA = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d")
MEMORY_KINDS_CPU = ("host_copy",)
MEMORY_KINDS = (*MEMORY_KINDS_CUDA, *MEMORY_KINDS_CPU)
COMPUTE_DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8")


@dataclass(frozen=True, kw_only=True)
class CeilingParams(ProbeParams):
    """Memory copies (`kinds`, `size_bytes`) or matmuls (`dtypes`, `n` = M = N = K): one
    device at a time, each alone (no contention)."""

    kinds: tuple[str, ...] = MEMORY_KINDS_CPU
    dtypes: tuple[str, ...] = ("float32",)
    size_bytes: int = 64 << 20
    n: int = 1024
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 200
    budget_s: float = 0.2

    def __post_init__(self) -> None:
        check_choices("copy kind", self.kinds, MEMORY_KINDS)
        check_choices("matmul dtype", self.dtypes, COMPUTE_DTYPES)
        if self.size_bytes <= 0:
            raise UsageError("--copy-bytes must be positive")
        if self.n <= 0:
            raise UsageError("--matmul-n must be positive")
        self._check_iterations()


# a ceiling case is one device, known across runs (a baseline made on another CI runner) by
# its rank: the host is metadata
DEVICE_KEYS = ("rank",)


def count_copies(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every copy kind on every device, one device after another."""
    assert isinstance(params, CeilingParams)
    return len(params.kinds) * num_nodes * gpus_per_node


def count_matmuls(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every matmul dtype on every device, one device after another."""
    assert isinstance(params, CeilingParams)
    return len(params.dtypes) * num_nodes * gpus_per_node
