"""Collectives with nccl-tests semantics: all_reduce, all_gather, reduce_scatter, broadcast,
reduce, all_to_all and a send/recv ring (docs/methodology.md; nccl-tests src/*.cu).

The size column S follows nccl-tests: the buffer for all_reduce / broadcast / reduce / sendrecv,
the total output for all_gather, the total input for reduce_scatter, and the per-rank send
buffer for all_to_all; sizes are rounded down to whole elements per rank, like nccl-tests.

Inputs make every result exactly predictable in float32, bfloat16 and float16: reductions use a
"one contributor per element" pattern (element i carries 1 + (i // n) % 4 on rank i % n and 0
elsewhere), so sum and max are exact for any rank count; data movement ops carry small integers
that name their source rank. `nwrong` counts elements that differ from the expected result.

torch.distributed offers all_reduce, broadcast and reduce in place only, and all_to_all and
send/recv out of place only, so those ops are measured in the one mode the API has.

Run it alone like an nccl-tests binary:
    torchrun --nproc-per-node 4 -m gpuprof.probes.collectives --op all_reduce -b 8 -e 128M -f 2
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gpuprof.machine.groups import scope_groups
from gpuprof.probes._check import count_wrong
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._faults import fault_rank
from gpuprof.probes._harness import (
    Budget,
    Case,
    Context,
    Prepared,
    Scope,
    Unsupported,
    make_scopes,
    run_cases,
)
from gpuprof.runs.records import collective_case_id
from gpuprof.specs.collectives import CollectivesParams, dtypes_for, modes_for
from gpuprof.units import format_size

PROBE = "collectives"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
REDOPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
PER_RANK_CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")

# torch 2.13 renamed the tensor-in/tensor-out collectives; keep both for torch>=2.4.
ALL_GATHER_FN: Any = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER_FN: Any = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def element_count(op: str, size_bytes: int, num_ranks: int, elem_bytes: int) -> int:
    """Elements in the op's whole buffer S, rounded down to whole elements per rank."""
    if op in PER_RANK_CHUNKED:
        return size_bytes // (elem_bytes * num_ranks) * num_ranks
    return size_bytes // elem_bytes


class _Data:
    """Predictable inputs and expected outputs for one group, dtype and device."""

    def __init__(self, ctx: Context, scope: Scope, dtype: torch.dtype) -> None:
        self.n, self.r = scope.spec.world_size, scope.group_rank
        self.dtype, self.device = dtype, ctx.device
        self.faulty = fault_rank() == ctx.rank

    def _index(self, count: int, offset: int = 0) -> torch.Tensor:
        return torch.arange(offset, offset + count, dtype=torch.int32, device=self.device)

    def contribution(self, count: int, offset: int = 0) -> torch.Tensor:
        """This rank's share of a reduction: nonzero only where it is element's contributor."""
        i = self._index(count, offset)
        value = (1 + (i // self.n) % 4) * (i % self.n == self.r)
        return self._inject(value.to(self.dtype))

    def reduced(self, count: int, redop: str, offset: int = 0) -> torch.Tensor:
        """The exact reduction of every rank's contribution."""
        i = self._index(count, offset)
        value = 1 + (i // self.n) % 4
        if redop == "min" and self.n > 1:
            value = torch.zeros_like(value)
        return value.to(self.dtype)

    def tagged(self, count: int, source: int, salt: int = 0) -> torch.Tensor:
        """Small integers that identify their source rank (exact in every dtype here)."""
        value = 1 + (self._index(count) + source * 31 + salt * 7) % 97
        return value.to(self.dtype)

    def send(self, count: int, salt: int = 0) -> torch.Tensor:
        """This rank's tagged data, perturbed if it is the test fault rank."""
        return self._inject(self.tagged(count, self.r, salt))

    def _inject(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.faulty and tensor.numel():
            tensor.view(-1)[0] += 1
        return tensor


Builder = Callable[[Context, Scope, _Data, int, bool, str], Prepared]


def _all_reduce(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    buf = data.contribution(count)

    def run() -> None:
        dist.all_reduce(buf, op=REDOPS[redop], group=scope.group)

    def check() -> int:
        buf.copy_(data.contribution(count))
        run()
        return count_wrong(buf, data.reduced(count, redop))

    return Prepared(run=run, check=check)


def _reduce(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    buf, root = data.contribution(count), scope.ranks[0]

    def run() -> None:
        dist.reduce(buf, dst=root, op=REDOPS[redop], group=scope.group)

    def check() -> int:
        buf.copy_(data.contribution(count))
        run()
        return count_wrong(buf, data.reduced(count, redop)) if ctx.rank == root else 0

    return Prepared(run=run, check=check)


def _broadcast(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    root = scope.ranks[0]
    buf = (
        data.send(count)
        if ctx.rank == root
        else torch.zeros(count, dtype=data.dtype, device=ctx.device)
    )

    def run() -> None:
        dist.broadcast(buf, src=root, group=scope.group)

    def check() -> int:
        buf.copy_(data.send(count) if ctx.rank == root else torch.zeros_like(buf))
        run()
        return count_wrong(buf, data.tagged(count, 0))

    return Prepared(run=run, check=check)


def _all_gather(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    chunk = count // data.n
    out = torch.zeros(count, dtype=data.dtype, device=ctx.device)
    inp = out.narrow(0, data.r * chunk, chunk) if in_place else data.send(chunk)
    inp.copy_(data.send(chunk))
    expected = torch.cat([data.tagged(chunk, k) for k in range(data.n)])

    def run() -> None:
        ALL_GATHER_FN(out, inp, group=scope.group)

    def check() -> int:
        out.zero_()
        inp.copy_(data.send(chunk))
        run()
        return count_wrong(out, expected)

    return Prepared(run=run, check=check)


def _reduce_scatter(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    chunk = count // data.n
    inp = data.contribution(count)
    out = (
        inp.narrow(0, data.r * chunk, chunk)
        if in_place
        else torch.zeros(chunk, dtype=data.dtype, device=ctx.device)
    )

    def run() -> None:
        REDUCE_SCATTER_FN(out, inp, op=REDOPS[redop], group=scope.group)

    def check() -> int:
        inp.copy_(data.contribution(count))
        if not in_place:
            out.zero_()
        run()
        return count_wrong(out, data.reduced(chunk, redop, offset=data.r * chunk))

    return Prepared(run=run, check=check)


def _all_to_all(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    chunk = count // data.n
    send = torch.cat([data.send(chunk, salt=k) for k in range(data.n)])
    recv = torch.zeros(count, dtype=data.dtype, device=ctx.device)
    expected = torch.cat([data.tagged(chunk, k, salt=data.r) for k in range(data.n)])

    def run() -> None:
        dist.all_to_all_single(recv, send, group=scope.group)

    def check() -> int:
        send.copy_(torch.cat([data.send(chunk, salt=k) for k in range(data.n)]))
        recv.zero_()
        run()
        return count_wrong(recv, expected)

    return Prepared(run=run, check=check)


def _sendrecv(
    ctx: Context, scope: Scope, data: _Data, count: int, in_place: bool, redop: str
) -> Prepared:
    if data.n < 2:
        raise Unsupported("sendrecv needs at least 2 ranks")
    send = data.send(count)
    recv = torch.zeros(count, dtype=data.dtype, device=ctx.device)
    nxt, prv = scope.ranks[(data.r + 1) % data.n], scope.ranks[(data.r - 1) % data.n]
    # Receive posted before send: gloo then moves both directions at once (send first
    # serialises them and halves a full-duplex link); NCCL groups the pair either way.
    ops = [
        dist.P2POp(dist.irecv, recv, prv, scope.group),
        dist.P2POp(dist.isend, send, nxt, scope.group),
    ]

    def run() -> None:
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def check() -> int:
        send.copy_(data.send(count))
        recv.zero_()
        run()
        return count_wrong(recv, data.tagged(count, (data.r - 1) % data.n))

    return Prepared(run=run, check=check)


BUILDERS: dict[str, Builder] = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "broadcast": _broadcast,
    "reduce": _reduce,
    "all_to_all": _all_to_all,
    "sendrecv": _sendrecv,
}


case_id = collective_case_id  # the runs' own spelling: imported runs name cases alike


def _case(
    ctx: Context,
    scope: Scope,
    params: CollectivesParams,
    op: str,
    dtype: str,
    in_place: bool,
    requested: int,
) -> Case:
    torch_dtype = DTYPES[dtype]
    elem = torch_dtype.itemsize
    n = scope.spec.world_size
    count = element_count(op, requested, n, elem)

    def build() -> Prepared:
        if count == 0:
            raise Unsupported(f"{format_size(requested)} is less than one {dtype} per rank")
        data = _Data(ctx, scope, torch_dtype)
        prepared = BUILDERS[op](ctx, scope, data, count, in_place, params.redop)
        return prepared if params.check else Prepared(run=prepared.run)

    mode = "in-place" if in_place else "out-of-place"
    redop = params.redop if op in REDUCING else "none"
    return Case(
        case_id=case_id(op, dtype, redop, in_place, requested),
        params={
            "op": op,
            "dtype": dtype,
            "redop": redop,
            "size_bytes": count * elem,
            "requested_bytes": requested,
            "count": count,
            "in_place": in_place,
        },
        build=build,
        describe=f"{op} {dtype} {format_size(count * elem)} {mode}",
    )


def cases(ctx: Context, scope: Scope, params: CollectivesParams) -> list[Case]:
    """Every case of the parameters in one scope: op x dtype x mode x size."""
    return [
        _case(ctx, scope, params, op, dtype, in_place, size)
        for op in params.ops
        for dtype in dtypes_for(op, params.dtypes, params.reduce_dtypes_only)
        for in_place in modes_for(op, params.modes)
        for size in params.sizes
    ]


def run(ctx: Context, params: CollectivesParams, num_nodes: int, gpus_per_node: int) -> None:
    """Measure every case in every scope of the job (the probe's entry for a sweep)."""
    budget = Budget.of(params)
    scopes = make_scopes(ctx, scope_groups(num_nodes, gpus_per_node, params.scopes))
    run_cases(ctx, PROBE, scopes, lambda scope: cases(ctx, scope, params), budget)


if __name__ == "__main__":
    run_as_command(PROBE)
