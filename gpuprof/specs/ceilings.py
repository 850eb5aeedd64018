"""Parameters shared by the two ceiling probes (memory copies and matmuls), and how they run:
each device in a group of its own, `alone` (one device per node at a time, every node at
once: nvbandwidth's view of one device) and/or `together` (every device at once, as a training
job loads a node), so the time does not grow with the node count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuprof.errors import UsageError
from gpuprof.machine.groups import CONCURRENCY
from gpuprof.params import ProbeParams, check_choices, csv
from gpuprof.registry import Option

MEMORY_KINDS_CUDA = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d")
MEMORY_KINDS_CPU = ("host_copy",)
MEMORY_KINDS = (*MEMORY_KINDS_CUDA, *MEMORY_KINDS_CPU)
COMPUTE_DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8")
# copies inside one device's memory: nothing of the node is shared, so they run once, with the
# other devices busy (together) where that is asked; host copies run each way asked (together
# shows a shared PCIe switch or NUMA link, alone shows the device's own link)
DEVICE_LOCAL_KINDS = ("d2d",)


@dataclass(frozen=True, kw_only=True)
class CeilingParams(ProbeParams):
    """Memory copies (`kinds`, `size_bytes`) or matmuls (`dtypes`, `n` = M = N = K), each
    way of `concurrency` (alone, together)."""

    kinds: tuple[str, ...] = MEMORY_KINDS_CPU
    dtypes: tuple[str, ...] = ("float32",)
    size_bytes: int = 64 << 20
    n: int = 1024
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 200
    budget_s: float = 0.2
    concurrency: tuple[str, ...] = ("alone",)

    def __post_init__(self) -> None:
        check_choices("copy kind", self.kinds, MEMORY_KINDS)
        check_choices("concurrency", self.concurrency, CONCURRENCY)
        check_choices("matmul dtype", self.dtypes, COMPUTE_DTYPES)
        if self.size_bytes <= 0:
            raise UsageError("--copy-bytes must be positive")
        if self.n <= 0:
            raise UsageError("--matmul-n must be positive")
        self._check_iterations()


# a ceiling case is one device, known across runs (a baseline made on another CI runner) by
# its rank and how it ran (runs and baselines from before `concurrency` ran alone): the host is
# metadata
DEVICE_KEYS = ("rank", "concurrency")
KEY_DEFAULTS = (("concurrency", "alone"),)

CONCURRENCY_OPTION = Option(
    flag="--concurrency",
    field="concurrency",
    parse=csv,
    help="memory and compute: alone (one device per node at a time, every node at once) "
    "and/or together (every device at once), e.g. alone,together",
)


def copy_kinds(params: CeilingParams, concurrency: str) -> tuple[str, ...]:
    """The copy kinds measured `concurrency`: host copies each way asked; a device's own
    copies once, together where that is asked."""
    if concurrency == "together" or "together" not in params.concurrency:
        return params.kinds
    return tuple(k for k in params.kinds if k not in DEVICE_LOCAL_KINDS)


def _one_after_another(
    params: CeilingParams, gpus_per_node: int, cases: Callable[[str], int]
) -> int:
    """Cases one after another, whatever the node count: alone, a round per local rank;
    together, one round (`cases(concurrency)` in each)."""
    return sum(cases(c) * (gpus_per_node if c == "alone" else 1) for c in params.concurrency)


def count_copies(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Copy cases one after another (`copy_kinds` in each round)."""
    assert isinstance(params, CeilingParams)
    return _one_after_another(params, gpus_per_node, lambda c: len(copy_kinds(params, c)))


def count_matmuls(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Matmul cases one after another (every dtype in each round)."""
    assert isinstance(params, CeilingParams)
    return _one_after_another(params, gpus_per_node, lambda c: len(params.dtypes))
