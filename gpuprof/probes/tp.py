"""Tensor parallelism: one transformer layer split over a group, per layer kind and world size.

Layers (width h, 64 per head, on `batch` x `seq` tokens, the same tokens on every rank):

- mlp: Linear(h, 4h) column-wise, GELU, Linear(4h, h) row-wise;
- attention: a fused q/k/v projection Linear(h, 3h) column-wise, its outputs laid out head by
  head so each rank's columns are whole heads (q, k and v of each), causal attention on them,
  and Linear(h, h) row-wise.

Split with `parallelize_module(ColwiseParallel, RowwiseParallel)` on a device mesh over the
scope's group: forward all-reduces the output activation, backward the input gradient.

One iteration is a round of three: the split layer's forward and backward (timed, device
synchronised at the edges); the same on a twin holding this rank's shard as plain layers (the
compute the split leaves each rank, no communication); the activation all_reduces the layer
issued, replayed alone. Bytes: every functional collective of one forward and backward,
counted by a dispatch mode as a ring sends them.

    torchrun --nproc-per-node 8 -m gpuprof.probes.tp --tp-hidden 8192
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Context,
    Scope,
    Series,
    Unsupported,
)
from gpuprof.probes._training import replay, rounds, run_weak_scaling, synced_clock
from gpuprof.specs.sharded import sent_bytes
from gpuprof.specs.tp import HEAD, TPParams, activation_bytes, theory_sent

PROBE = "tp"
# functional collectives (what DTensor issues) -> the ring op they count as
FUNCTIONAL = {
    "all_reduce": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
}


class MLP(nn.Module):
    """Linear(h, width) -> GELU -> Linear(width, h): width 4h whole, 4h/n as a rank's shard."""

    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, width)
        self.fc2 = nn.Linear(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return out


class Attention(nn.Module):
    """Fused q/k/v (head by head: [q k v] of head 0, then head 1, ...), causal attention on
    the heads present, output projection; `heads` is all of them, or a rank's share."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(hidden, 3 * heads * HEAD)
        self.proj = nn.Linear(heads * HEAD, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, -1, 3, HEAD)  # the heads this rank holds
        q, k, v = qkv.permute(3, 0, 2, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(attn.transpose(1, 2).reshape(b, s, -1))
        return out


def layer(kind: str, hidden: int, share: int, device: torch.device) -> nn.Module:
    """The layer whole (share 1) or one rank's shard of it (share n), seeded identically."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        if kind == "mlp":
            module: nn.Module = MLP(hidden, 4 * hidden // share)
        else:
            module = Attention(hidden, hidden // HEAD // share)
        return module.to(device)


class CollectiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the functional collectives (`_c10d_functional.*`) DTensor issues: op, shape,
    dtype, and the bytes a ring sends for each."""

    def __init__(self, n: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.n = n
        self.calls: list[tuple[str, tuple[int, ...], torch.dtype, float]] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        namespace, _, name = str(func.name()).partition("::")
        op = FUNCTIONAL.get(name.partition(".")[0]) if namespace == "_c10d_functional" else None
        if op is not None and isinstance(args[0], torch.Tensor):
            tensor = args[0]
            size = tensor.numel() * tensor.element_size() * (self.n if op == "all_gather" else 1)
            self.calls.append((op, tuple(tensor.shape), tensor.dtype, sent_bytes(op, size, self.n)))
        return func(*args, **(kwargs or {}))


class TPBench:
    """The split layer, its twin and the replayed all_reduces of one case on one rank."""

    def __init__(self, ctx: Context, scope: Scope, params: TPParams, kind: str) -> None:
        try:  # optional: tensor parallelism is skipped with the reason where torch lacks it
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.tensor.parallel import (
                ColwiseParallel,
                RowwiseParallel,
                parallelize_module,
            )
        except ImportError as exc:
            raise Unsupported(f"tensor parallelism: {exc}") from None
        self.ctx, self.scope = ctx, scope
        n = scope.spec.world_size
        if kind == "attention" and (params.hidden // HEAD) % n:
            raise Unsupported(f"{params.hidden // HEAD} heads do not split over {n} ranks")
        group = scope.group if scope.group is not None else dist.group.WORLD
        assert group is not None
        self.group = group
        mesh = DeviceMesh.from_group(group, ctx.device.type)
        names = ("fc1", "fc2") if kind == "mlp" else ("qkv", "proj")
        plan = {names[0]: ColwiseParallel(), names[1]: RowwiseParallel()}
        self.split = parallelize_module(layer(kind, params.hidden, 1, ctx.device), mesh, plan)
        self.twin = layer(kind, params.hidden, n, ctx.device)
        gen = torch.Generator(device=ctx.device).manual_seed(1000)  # one input for the group
        shape = (params.batch, params.seq, params.hidden)
        self.x = torch.randn(*shape, device=ctx.device, generator=gen, requires_grad=True)
        self.run_layer(self.split)  # settles lazy initialisation
        counter = CollectiveBytes(n)
        with counter:
            self.run_layer(self.split)
        self.calls = counter.calls
        self.replay = [torch.empty(s, dtype=d, device=ctx.device) for _, s, d, _ in self.calls]
        replayed = CollectiveBytes(n)
        with replayed:  # the replay issues the ops the layer did: counted by the same mode
            self.comm_only()
        self.info: dict[str, Any] = {
            "num_collectives": len(self.calls),
            "replayed_collectives": len(replayed.calls),
            "sent_bytes": sum(c[3] for c in self.calls),
            "theory_sent_bytes": theory_sent(n, params.tokens, params.hidden),
            "activation_bytes": activation_bytes(params.tokens, params.hidden),
            "params_per_rank": sum(p.numel() for p in self.twin.parameters()),
        }

    def run_layer(self, module: nn.Module) -> tuple[float, float]:
        """Forward and backward of `module` on the input; (forward, backward) in us."""
        module.zero_grad(set_to_none=True)
        self.x.grad = None
        t0 = synced_clock(self.ctx)
        # an op on the output waits for its all_reduce (an async result): the forward's; the
        # twin pays the same copy
        out = module(self.x).clone()
        t1 = synced_clock(self.ctx)
        out.float().square().mean().backward()
        t2 = synced_clock(self.ctx)
        return (t1 - t0) / 1e3, (t2 - t1) / 1e3

    def comm_only(self) -> float:
        """The layer's all_reduces alone, back to back, as the split layer issues them: the
        functional collectives (`_c10d_functional.all_reduce`, then waiting on the result),
        not c10d's in-place all_reduce; us."""
        return replay(
            self.ctx,
            lambda: [
                funcol.all_reduce(t, "sum", self.group)
                for (op, *_), t in zip(self.calls, self.replay, strict=True)
                if op == "all_reduce"
            ],
        )

    def _round(self) -> dict[str, float]:
        """The split layer, its twin, the all_reduces alone."""
        fwd, bwd = self.run_layer(self.split)
        twin_fwd, twin_bwd = self.run_layer(self.twin)
        return {
            "layer_us": fwd + bwd,
            "forward_us": fwd,
            "backward_us": bwd,
            "twin_forward_us": twin_fwd,
            "twin_backward_us": twin_bwd,
            "comm_only_us": self.comm_only(),
        }

    def timed(self, iters: int) -> tuple[list[float], Series]:
        """`iters` rounds: the split layer, its twin, the all_reduces alone."""
        return rounds(iters, self._round, "layer_us")


def run(ctx: Context, params: TPParams, num_nodes: int, gpus_per_node: int) -> None:
    """Every layer kind at every world size."""
    shape = {"hidden": params.hidden, "batch": params.batch, "seq": params.seq}
    run_weak_scaling(
        ctx,
        PROBE,
        params,
        (num_nodes, gpus_per_node),
        names=lambda largest: params.layers,
        columns=lambda kind: {"layer": kind, **shape, "tokens": params.tokens},
        bench=lambda scope, kind: TPBench(ctx, scope, params, kind),
        label=f" h={params.hidden}",
    )


if __name__ == "__main__":
    run_as_command(PROBE)
