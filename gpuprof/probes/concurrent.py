"""Two collectives at once on two process groups over every rank: per pair and size, each
round times A alone, B alone and both started together (each started on every rank together:
a barrier, not timed), each op's own finish measured from the common start. The order of
the two launches alternates from round to round, so neither is always first.

The finish of each op: on CPU (gloo runs each group's work on its own threads) the moment
the op's future completes, stamped by a callback; on a GPU an event recorded on a side stream
that waits for the op (each group's NCCL stream), timed from an event recorded before both.

    torchrun --nproc-per-node 4 -m gpuprof.probes.concurrent
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gpuprof.machine.groups import GroupSpec
from gpuprof.probes._check import count_wrong
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import Budget, Case, Context, Prepared, make_scopes, run_cases
from gpuprof.probes._timing import clock_ns
from gpuprof.probes._training import rounds
from gpuprof.probes.collectives import ALL_GATHER_FN
from gpuprof.probes.collectives import DTYPES as TORCH_DTYPES
from gpuprof.specs.concurrent import EXPERTS_PER_RANK, TOP_K, ConcurrentParams
from gpuprof.specs.routing import Routing, zipf_weights
from gpuprof.units import DTYPE_BYTES

PROBE = "concurrent"


class Op:
    """One collective on one group: `start()` launches it (async) and returns its work;
    `check()` runs it once on fresh inputs and counts wrong elements; `bytes` is this rank's
    buffer (the size column's meaning for the op)."""

    def __init__(self, ctx: Context, name: str, params: ConcurrentParams, size: int, group: Any):
        n, r = ctx.world_size, ctx.rank
        dtype, device = TORCH_DTYPES[params.dtype], ctx.device
        count = params.elements(name, size, n)
        self.fill: Callable[[], Any] = lambda: None
        self.start: Callable[[], Any]  # -> the op's work
        self.expected: torch.Tensor | None = None
        self.bytes = count * DTYPE_BYTES[params.dtype]
        if name == "all_reduce":
            self.out = torch.zeros(count, dtype=dtype, device=device)
            self.start = lambda: dist.all_reduce(self.out, group=group, async_op=True)
            self.fill = lambda: self.out.fill_(r + 1)
            self.expected = torch.full_like(self.out, n * (n + 1) / 2)
        elif name == "all_gather":
            inp = torch.full((count // n,), r + 1.0, dtype=dtype, device=device)
            self.out = torch.zeros(count, dtype=dtype, device=device)
            self.start = lambda: ALL_GATHER_FN(self.out, inp, group=group, async_op=True)
            self.expected = torch.arange(1, n + 1, device=device).repeat_interleave(count // n)
        elif name == "all_to_all":
            inp = torch.full((count,), r + 1.0, dtype=dtype, device=device)
            self.out = torch.zeros(count, dtype=dtype, device=device)
            self.start = lambda: dist.all_to_all_single(self.out, inp, group=group, async_op=True)
            self.expected = torch.arange(1, n + 1, device=device).repeat_interleave(count // n)
        else:  # dispatch: every rank routes alike (the moe probe's plan)
            self._dispatch(ctx, params, size, group)

    def _dispatch(self, ctx: Context, params: ConcurrentParams, size: int, group: Any) -> None:
        n, r = ctx.world_size, ctx.rank
        experts = EXPERTS_PER_RANK * n
        routing = Routing(
            ranks=n,
            tokens=params.tokens(size),
            experts=experts,
            top_k=min(TOP_K, experts),
            weights=tuple(zipf_weights(experts, params.skew)),
            placement="contiguous",
            capacity_factor=None,
        )
        flat = routing.dispatch_tokens()
        send, recv = flat[r], [flat[src][r] for src in range(n)]
        dtype = TORCH_DTYPES[params.dtype]
        inp = torch.full((sum(send), params.hidden), r + 1.0, dtype=dtype, device=ctx.device)
        self.out = torch.zeros((sum(recv), params.hidden), dtype=dtype, device=ctx.device)
        self.start = lambda: dist.all_to_all_single(
            self.out, inp, output_split_sizes=recv, input_split_sizes=send, group=group,
            async_op=True,
        )  # fmt: skip
        sources = torch.arange(1, n + 1, device=ctx.device).repeat_interleave(
            torch.tensor(recv, device=ctx.device)
        )
        self.expected = sources[:, None].expand(-1, params.hidden)
        self.bytes = inp.numel() * inp.element_size()

    def check(self) -> int:
        self.out.zero_()
        self.fill()
        self.start().wait()
        assert self.expected is not None
        wrong = count_wrong(self.out, self.expected.to(self.out.dtype))
        self.out.zero_()  # an all_reduce sums into it again each timed iteration
        return wrong


class Finishes:
    """When each of the works launched since `start()` finished, in us from the start."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cuda = ctx.device.type == "cuda"
        if self.cuda:
            cuda: Any = torch.cuda  # Stream and Event are untyped in torch
            self.streams = [cuda.Stream(ctx.device) for _ in range(2)]
            self.begin = cuda.Event(enable_timing=True)
            self.ends = [cuda.Event(enable_timing=True) for _ in range(2)]

    def start(self) -> None:
        dist.barrier()
        self.ctx.sync()
        self.futures: list[Any] = []
        if self.cuda:
            self.begin.record()
        self.t0 = clock_ns()

    def watch(self, work: Any) -> None:
        """Stamp the work's finish."""
        k = len(self.futures)
        if self.cuda:
            with torch.cuda.stream(self.streams[k]):
                work.wait()
                self.ends[k].record(self.streams[k])
            self.futures.append(None)
        else:  # the callback runs once the op completes; its future's value is the stamp
            self.futures.append(work.get_future().then(lambda _: clock_ns()))

    def times_us(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize(self.ctx.device)
            return [self.begin.elapsed_time(self.ends[k]) * 1e3 for k in range(len(self.futures))]
        return [(future.wait() - self.t0) / 1e3 for future in self.futures]


def _case(ctx: Context, params: ConcurrentParams, pair: str, size: int, groups: list[Any]) -> Case:
    names = params.ops(pair)
    first, second = names

    def build() -> Prepared:
        ops = [Op(ctx, op, params, size, g) for op, g in zip(names, groups, strict=True)]
        clock = Finishes(ctx)
        state = {"round": 0}

        def alone(op: Op) -> float:
            clock.start()
            clock.watch(op.start())
            return clock.times_us()[0]

        def one_round() -> dict[str, float]:
            a, b = alone(ops[0]), alone(ops[1])
            order = [0, 1] if state["round"] % 2 == 0 else [1, 0]
            state["round"] += 1
            clock.start()
            for k in order:
                clock.watch(ops[k].start())
            finish = dict(zip(order, clock.times_us(), strict=True))
            return {
                "time_us": max(finish.values()),
                "a_alone_us": a,
                "b_alone_us": b,
                "a_beside_us": finish[0],
                "b_beside_us": finish[1],
                "a_first": float(order[0] == 0),
            }

        def check() -> int:
            return sum(op.check() for op in ops)

        columns["a_bytes"], columns["b_bytes"] = ops[0].bytes, ops[1].bytes
        return Prepared(timed=lambda iters: rounds(iters, one_round, "time_us"), check=check)

    columns: dict[str, Any] = {
        "pair": pair,
        "op_a": first,
        "op_b": second,
        "size_bytes": size,
        "skew": params.skew,
        "dtype": params.dtype,
    }
    return Case(
        case_id=f"{pair}.{size}",
        params=columns,
        build=build,
        describe=f"{first} beside {second}, {size} bytes",
    )


def run(ctx: Context, params: ConcurrentParams, num_nodes: int, gpus_per_node: int) -> None:
    """Every pair at every size, on two groups of every rank."""
    ranks = ctx.world_size
    members = list(range(ranks))
    groups = [dist.new_group(members), dist.new_group(members)]
    spec = GroupSpec(
        scope="global",
        world_size=ranks,
        num_nodes=num_nodes,
        members=(tuple(members),),
        names=("global",),
    )

    def cases(scope: Any) -> list[Case]:
        return [
            _case(ctx, params, pair, size, groups) for pair in params.pairs for size in params.sizes
        ]

    try:
        run_cases(ctx, PROBE, make_scopes(ctx, [spec]), cases, Budget.of(params))
    finally:
        for group in groups:
            dist.destroy_process_group(group)


if __name__ == "__main__":
    run_as_command(PROBE)
