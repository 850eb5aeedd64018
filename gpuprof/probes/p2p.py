"""Point-to-point bandwidth and latency for every pair of ranks (nvbandwidth / p2pBandwidth-
LatencyTest style), disjoint pairs at the same time in rounds (specs.p2p.pair_rounds), every
mode through batch_isend_irecv on the round's group (one communicator for all three).

Per pair (a < b), at `size_bytes`:
- `uni`: a sends, b receives; bandwidth = size / time;
- `bidir`: both send and receive at once; bandwidth = size / time per direction (the number
  to compare with a link's unidirectional rate, like busbw);
and at `latency_bytes`:
- `latency`: ping-pong a -> b -> a; latency = round trip / 2.
Each iteration's time is the slower rank of the pair; received data is checked (`nwrong`).

    torchrun --nproc-per-node 8 -m gpuprof.probes.p2p
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gpuprof.machine.groups import GroupSpec
from gpuprof.probes._check import byte_pattern, count_wrong
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import Budget, Case, Context, Prepared, Scope, make_scopes, run_cases
from gpuprof.specs.p2p import P2PParams, pair_rounds
from gpuprof.units import format_size

PROBE = "p2p"


def round_specs(rounds: list[list[tuple[int, int]]], gpus_per_node: int) -> list[GroupSpec]:
    """One group per round: the ranks paired in it (every rank, when the count is even)."""
    specs = []
    for index, pairs in enumerate(rounds):
        members = tuple(sorted(r for pair in pairs for r in pair))
        nodes = len({r // gpus_per_node for r in members})
        specs.append(
            GroupSpec(
                scope="pairs",
                world_size=len(members),
                num_nodes=nodes,
                members=(members,),
                names=(f"round{index}",),
            )
        )
    return specs


def _exchange(
    ctx: Context, mode: str, peer: int, send: torch.Tensor, recv: torch.Tensor, group: Any
) -> Callable[[], None]:
    """One iteration of `mode` with `peer`. Every mode goes through batch_isend_irecv on the
    round's group, so all three use the same communicator (on NCCL a plain send/recv would
    use a separate per-pair communicator, bidir the group's)."""
    first = ctx.rank < peer

    def transfer(*ops: tuple[Any, torch.Tensor]) -> None:
        p2p = [dist.P2POp(op, tensor, peer, group) for op, tensor in ops]
        for work in dist.batch_isend_irecv(p2p):
            work.wait()

    def uni() -> None:
        if first:
            transfer((dist.isend, send))
        else:
            transfer((dist.irecv, recv))

    def bidir() -> None:
        # receive posted first: gloo then moves both directions at once (see collectives)
        transfer((dist.irecv, recv), (dist.isend, send))

    def ping_pong() -> None:
        if first:
            transfer((dist.isend, send))
            transfer((dist.irecv, recv))
        else:
            transfer((dist.irecv, recv))
            transfer((dist.isend, send))

    return {"uni": uni, "bidir": bidir, "latency": ping_pong}[mode]


def _case(ctx: Context, mode: str, size: int, peer: int, group: Any) -> Case:
    def build() -> Prepared:
        send = byte_pattern(size, ctx.rank, ctx.device)
        recv = torch.zeros(size, dtype=torch.uint8, device=ctx.device)
        run = _exchange(ctx, mode, peer, send, recv, group)
        receives = mode != "uni" or ctx.rank > peer

        def check() -> int:
            recv.zero_()
            run()
            return count_wrong(recv, byte_pattern(size, peer, ctx.device)) if receives else 0

        return Prepared(run=run, check=check)

    low, high = sorted((ctx.rank, peer))
    return Case(
        case_id=f"{mode}.{size}",
        params={"mode": mode, "size_bytes": size, "peer": peer, "rank_a": low, "rank_b": high},
        build=build,
        describe=f"{mode} {format_size(size)} (rank 0 with rank {peer})",
    )


def cases(ctx: Context, scope: Scope, params: P2PParams, peers: dict[str, int]) -> list[Case]:
    """This rank's cases in one round: every mode with its partner of that round."""
    peer = peers[scope.name]
    return [
        _case(
            ctx,
            mode,
            params.latency_bytes if mode == "latency" else params.size_bytes,
            peer,
            scope.group,
        )
        for mode in params.modes
    ]


def run(ctx: Context, params: P2PParams, num_nodes: int, gpus_per_node: int) -> None:
    """Measure every round of pairs."""
    rounds = pair_rounds(num_nodes, gpus_per_node, params.node_rounds)
    specs = round_specs(rounds, gpus_per_node)
    peers = {}
    for index, pairs in enumerate(rounds):
        for a, b in pairs:
            if ctx.rank in (a, b):
                peers[f"round{index}"] = b if ctx.rank == a else a
    budget = Budget.of(params)
    scopes = make_scopes(ctx, specs)
    run_cases(ctx, PROBE, scopes, lambda scope: cases(ctx, scope, params, peers), budget)


if __name__ == "__main__":
    run_as_command(PROBE)
