"""What a training step's collectives send: the torch.distributed calls a strategy issues from
Python are recorded while `Accounting.recording()` is on (the module functions wrapped in
place, restored after), and DDP's bucket all_reduces, which its C++ reducer issues, are read
from its buckets; each call keeps what it takes to replay it alone and the bytes this rank
sends (counted as a ring sends them)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gpuprof.probes.ddp import bucket_bytes, fallback_buckets
from gpuprof.specs.sharded import sent_bytes

# torch.distributed calls the strategies issue from Python -> the ring op they count as
COUNTED = {
    "all_gather_single": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
}
SIZE_ARG = {"all_gather": 0, "reduce_scatter": 1, "all_reduce": 0, "broadcast": 0}


@dataclass(frozen=True)
class TensorSpec:
    """The shape and dtype of a tensor a replayed collective needs."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Call:
    """One collective of the accounted step, as it can be replayed."""

    function: str  # the torch.distributed function
    op: str  # the ring op it counts as
    args: dict[str, Any]  # bound arguments, tensors as TensorSpec
    sent: float  # bytes this rank sends


class Accounting:
    """Records the collectives issued while `recording` (module functions wrapped in place,
    restored after)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.active = False

    def note(self, function: str, bound: dict[str, Any]) -> None:
        if not self.active:
            return
        op = COUNTED[function]
        tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
        size = tensors[SIZE_ARG[op]]
        n = dist.get_world_size(bound.get("group"))
        args = {
            k: TensorSpec(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v
            for k, v in bound.items()
        }
        sent = sent_bytes(op, size.numel() * size.element_size(), n)
        self.calls.append(Call(function=function, op=op, args=args, sent=sent))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        originals = {name: getattr(dist, name) for name in COUNTED if hasattr(dist, name)}

        def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(original)

            def counted(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                self.note(name, dict(bound.arguments))
                return original(*args, **kwargs)

            return counted

        for name, original in originals.items():
            setattr(dist, name, wrap(name, original))
        self.active = True
        try:
            yield
        finally:
            self.active = False
            for name, original in originals.items():
                setattr(dist, name, original)


def bucket_calls(ddp: DistributedDataParallel, group: Any) -> list[Call]:
    """The all_reduces DDP's reducer issues in one step, one per gradient bucket (sizes from
    DDP's logging data, else as DDP first builds them), counted as a ring sends them. The
    reducer is C++: its collectives are read from its buckets, not intercepted, so the timed
    steps run DDP's own allreduce, not a Python comm hook."""
    get = getattr(ddp, "_get_ddp_logging_data", None)
    data = get() if get is not None else {}
    sizes = bucket_bytes(data) or fallback_buckets(ddp.module, 25.0)
    n = dist.get_world_size(group)
    return [
        Call(
            function="all_reduce",
            op="all_reduce",
            args={"tensor": TensorSpec((max(1, size // 4),), torch.float32), "group": group},
            sent=sent_bytes("all_reduce", size, n),
        )
        for size in sizes
    ]


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the storages behind `tensors`, each storage once (local shards of DTensors)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
