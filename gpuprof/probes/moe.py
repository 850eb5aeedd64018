"""A mixture-of-experts layer's token dispatch and combine over every rank: per routing (skew
or histogram, capacity factor, placement; `specs.routing`'s plan) and layout, one iteration is
the dispatch (`all_to_all_single` with the plan's uneven splits: each kept token's hidden
vector to its expert's rank) then the combine (the reverse), each started on every rank
together (a barrier, not timed) and timed on its own after a device sync; the slowest rank's
time is what every rank of the layer waits for.

Hierarchical: inside the node first (to the rank with the destination's local index, on the
node's group), then across nodes on the group of that local index (one rank per node), with
the local reordering between the two stages timed as part of the dispatch.

Each rank records the bytes it actually sent to other ranks (counted from the tensors and
splits it passed), received, and dropped tokens; the check sends each token filled with its
source rank + 1 and counts received tokens whose source does not match the plan, and, after
the combine, tokens that did not come back unchanged.

    torchrun --nproc-per-node 4 -m gpuprof.probes.moe
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from gpuprof.machine.groups import GroupSpec
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import Budget, Case, Context, Prepared, make_scopes, run_cases
from gpuprof.probes._training import rounds, synced_clock
from gpuprof.specs.moe import DTYPES, MoEParams
from gpuprof.specs.routing import Routing

PROBE = "moe"
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Groups:
    """This rank's node group and local-index group (every rank creates every group, in one
    order), for the hierarchical layout."""

    def __init__(self, ctx: Context, num_nodes: int, gpus_per_node: int) -> None:
        self.node: Any = None
        self.rail: Any = None
        g = gpus_per_node
        for n in range(num_nodes):
            group = dist.new_group([n * g + i for i in range(g)])
            if ctx.rank // g == n:
                self.node = group
        for i in range(g):
            group = dist.new_group([n * g + i for n in range(num_nodes)])
            if ctx.rank % g == i:
                self.rail = group


class Layer:
    """One routing's dispatch and combine on this rank."""

    def __init__(
        self,
        ctx: Context,
        routing: Routing,
        params: MoEParams,
        layout: str,
        groups: Groups | None,
        gpus_per_node: int,
    ) -> None:
        self.ctx, self.routing = ctx, routing
        rank = ctx.rank
        flat = routing.dispatch_tokens()
        self.expect = [flat[src][rank] for src in range(routing.ranks)]  # tokens per source
        dtype = TORCH_DTYPES[params.dtype]
        rows = sum(flat[rank])
        self.send = torch.full((rows, params.hidden), rank + 1.0, dtype=dtype, device=ctx.device)
        self.reorder: torch.Tensor | None = None
        self.restore: torch.Tensor | None = None
        if layout == "flat":
            self.stages: list[tuple[list[int], list[int], Any]] = [(flat[rank], self.expect, None)]
        else:
            assert groups is not None
            self.stages = self._hierarchical(flat, groups, gpus_per_node)
        self.buffers = [self.send] + [
            torch.empty((sum(recv), params.hidden), dtype=dtype, device=ctx.device)
            for _, recv, _ in self.stages
        ]
        self.back = torch.empty_like(self.send)
        # hierarchical: what stage 2 sent, to receive it back in the combine
        self.middle = torch.empty_like(self.buffers[1]) if len(self.stages) > 1 else self.back
        self.sent = 0  # bytes this rank sent other ranks in the last dispatch, as passed

    def _hierarchical(
        self, flat: list[list[int]], groups: Groups, gpn: int
    ) -> list[tuple[list[int], list[int], Any]]:
        """Stage 1 on the node group, a reorder, stage 2 on the local-index group."""
        ranks, rank = len(flat), self.ctx.rank
        nodes, node, local = ranks // gpn, rank // gpn, rank % gpn
        # stage 1: to local index j of my node, my tokens for every (m, j), node by node
        send1 = [sum(flat[rank][m * gpn + j] for m in range(nodes)) for j in range(gpn)]
        block = {  # (source local index i, destination node m) -> tokens, as received
            (i, m): flat[node * gpn + i][m * gpn + local] for i in range(gpn) for m in range(nodes)
        }
        recv1 = [sum(block[(i, m)] for m in range(nodes)) for i in range(gpn)]
        starts, offset = {}, 0
        for i in range(gpn):
            for m in range(nodes):
                starts[(i, m)] = offset
                offset += block[(i, m)]
        # stage 2 sends by destination node m: for each m, every i's block for m
        pieces = [
            torch.arange(starts[(i, m)], starts[(i, m)] + block[(i, m)])
            for m in range(nodes)
            for i in range(gpn)
        ]
        self.reorder = torch.cat(pieces).to(self.ctx.device)
        self.restore = torch.argsort(self.reorder)
        send2 = [sum(block[(i, m)] for i in range(gpn)) for m in range(nodes)]
        recv2 = [sum(flat[m * gpn + i][rank] for i in range(gpn)) for m in range(nodes)]
        return [(send1, recv1, groups.node), (send2, recv2, groups.rail)]

    def _exchange(
        self, out: torch.Tensor, inp: torch.Tensor, recv: list[int], send: list[int], group: Any
    ) -> None:
        if len(set(send)) == 1 and len(set(recv)) == 1:  # equal splits: nccl-tests' alltoall,
            dist.all_to_all_single(out, inp, group=group)  # the collectives probe's call
            return
        dist.all_to_all_single(
            out, inp, output_split_sizes=recv, input_split_sizes=send, group=group
        )

    def dispatch(self) -> None:
        data, self.sent = self.send, 0
        for k, (send, recv, group) in enumerate(self.stages):
            if k == 1 and self.reorder is not None:
                data = data.index_select(0, self.reorder)
            me = dist.get_rank(group) if group is not None else self.ctx.rank
            row = data.shape[1] * data.element_size()
            self.sent += sum(n for peer, n in enumerate(send) if peer != me) * row
            self._exchange(self.buffers[k + 1], data, recv, send, group)
            data = self.buffers[k + 1]

    def combine(self) -> None:
        """The dispatch reversed: each token back to its source (through the reorder and the
        node group again, hierarchically)."""
        data = self.buffers[-1]
        for k in reversed(range(len(self.stages))):
            send, recv, group = self.stages[k]
            out = self.back if k == 0 else self.middle
            self._exchange(out, data, send, recv, group)
            data = out
            if k == 1 and self.restore is not None:
                data = data.index_select(0, self.restore)

    def round(self) -> dict[str, float]:
        """Dispatch, then combine, each started on every rank together (a barrier, not
        timed): without it a rank's dispatch would also time its peers' previous combine."""
        dist.barrier()
        t0 = synced_clock(self.ctx)
        self.dispatch()
        t1 = synced_clock(self.ctx)
        dist.barrier()
        t2 = synced_clock(self.ctx)
        self.combine()
        t3 = synced_clock(self.ctx)
        return {
            "time_us": (t1 - t0 + t3 - t2) / 1e3,
            "dispatch_us": (t1 - t0) / 1e3,
            "combine_us": (t3 - t2) / 1e3,
            "sent_bytes": float(self.sent),
        }

    def check(self) -> int:
        """Tokens received from another source than the plan says (by count per source), and
        tokens that did not come back unchanged from the combine."""
        self.back.zero_()
        self.dispatch()
        self.combine()
        got = self.buffers[-1][:, 0].float().round().long()
        counts = torch.bincount(got, minlength=self.routing.ranks + 1)[1:].tolist()
        wrong = int(sum(abs(c - e) for c, e in zip(counts, self.expect, strict=True)))
        return wrong + int((self.back != self.send).any(dim=1).sum())


def theory_sent(routing: Routing, layout: str, rank: int, gpus_per_node: int) -> int:
    """Tokens the plan has this rank send other ranks in a dispatch (both stages of a
    hierarchical one)."""
    if layout == "flat":
        row = routing.dispatch_tokens()[rank]
        return sum(row) - row[rank]
    intra, inter = routing.hierarchical_tokens(gpus_per_node)
    return sum(intra[rank]) - intra[rank][rank] + sum(inter[rank]) - inter[rank][rank]


def _case(
    ctx: Context,
    label: str,
    routing: Routing,
    params: MoEParams,
    layout: str,
    groups: Groups | None,
    gpus_per_node: int,
) -> Case:
    def build() -> Prepared:
        layer = Layer(ctx, routing, params, layout, groups, gpus_per_node)
        return Prepared(
            timed=lambda iters: rounds(iters, layer.round, "time_us"), check=layer.check
        )

    width = params.hidden * DTYPES[params.dtype]
    flat = routing.dispatch_tokens()
    cap = routing.capacity_factor or 0.0
    return Case(
        case_id=f"{label}.{cap:g}.{routing.placement}.{layout}",
        params={
            "skew": label,
            "capacity_factor": cap,
            "placement": routing.placement,
            "layout": layout,
            "experts": routing.experts,
            "top_k": routing.top_k,
            "tokens": routing.tokens,
            "hidden": params.hidden,
            "dtype": params.dtype,
            "theory_sent_bytes": theory_sent(routing, layout, ctx.rank, gpus_per_node) * width,
            "received_tokens": sum(flat[src][ctx.rank] for src in range(routing.ranks)),
            "kept_tokens": sum(routing.kept),
            "dropped": routing.dropped,
            "imbalance": routing.imbalance(),
        },
        build=build,
        describe=f"skew {label} capacity {cap:g} {routing.placement} {layout}",
    )


def run(ctx: Context, params: MoEParams, num_nodes: int, gpus_per_node: int) -> None:
    """Every routing in every layout, over all ranks."""
    ranks = ctx.world_size
    spec = GroupSpec(
        scope="global",
        world_size=ranks,
        num_nodes=num_nodes,
        members=(tuple(range(ranks)),),
        names=("global",),
    )
    layouts = params.layouts_for(num_nodes, gpus_per_node)
    groups = Groups(ctx, num_nodes, gpus_per_node) if "hierarchical" in layouts else None
    routings = params.routings(ranks)
    scopes = make_scopes(ctx, [spec])

    def cases(scope: Any) -> list[Case]:
        return [
            _case(ctx, label, routing, params, layout, groups, gpus_per_node)
            for layout in layouts
            for label, routing in routings
        ]

    run_cases(ctx, PROBE, scopes, cases, Budget.of(params))


if __name__ == "__main__":
    run_as_command(PROBE)
