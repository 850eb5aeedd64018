"""Sharded data parallelism: DDP, ZeRO-1 and FSDP on one synthetic transformer, per strategy.

Every case is one strategy in one scope, on the DDP probe's model and batch:

- ddp: DistributedDataParallel (gradient_as_bucket_view) and AdamW;
- zero1: the same DDP and ZeroRedundancyOptimizer(AdamW): each rank updates its share of the
  parameters and broadcasts them;
- fsdp / fsdp_noreshard / fsdp_bf16: FSDP2 `fully_shard` on every block and the root
  (reshard_after_forward True / False / True with bf16 parameters and fp32 reduction).

Before timing, one step settles lazy initialisation (FSDP's, DDP's bucket rebuild) and one
more is *accounted*: every collective it issues is recorded from torch.distributed's own
calls (FSDP's all_gather/reduce_scatter, ZeRO's broadcasts) and from a comm hook on DDP's
buckets (the reducer is C++), giving the bytes this rank sends per step; the memory this rank
holds after it (parameters, gradients, optimizer state: every tensor's storage once) is
measured then, and on GPU the peak allocated memory of those two steps.

One iteration is a round of three measurements:

1. the strategy's step (zero_grad, forward, backward, optimizer), timed by phase;
2. the same step on a communication-free twin: the plain model alone (bf16 where the strategy
   computes in bf16), its optimizer over tensors shaped like what this rank's optimizer holds
   (all parameters for DDP, its share for ZeRO-1 and FSDP): the compute the step must do;
3. the collectives of the accounted step replayed alone, back to back.

Exposed communication = the strategy's phases - the twin's (communication the step waits for,
and the strategy's own overhead); hidden = 1 - exposed / the replay.

    torchrun --nproc-per-node 8 -m gpuprof.probes.sharded --model-params 1.3B
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel

from gpuprof.probes._accounting import Accounting, TensorSpec, bucket_calls, held_bytes
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Context,
    Scope,
    Series,
    Unsupported,
)
from gpuprof.probes._model import build, cast_batch, forward_loss, samples
from gpuprof.probes._training import replay, rounds, run_weak_scaling, synced_clock
from gpuprof.specs.sharded import (
    FSDP_BF16,
    FSDP_NORESHARD,
    FSDP_STRATEGIES,
    ZERO1,
    ShardedParams,
    sharded_case_bytes,
    theory_memory,
    theory_sent,
    what_fits,
)

PROBE = "sharded"
# where torch keeps FSDP2 (fully_shard, MixedPrecisionPolicy): public from torch 2.6, in the
# composable API in 2.4 and 2.5 (where torch.distributed.fsdp holds FSDP1 only)
FSDP2_HOMES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fsdp2() -> tuple[Callable[..., Any], type]:
    """(fully_shard, MixedPrecisionPolicy) from the first home this torch has; Unsupported,
    naming every home tried, when it has neither."""
    tried = []
    for home in FSDP2_HOMES:
        try:
            module = importlib.import_module(home)
            return module.fully_shard, module.MixedPrecisionPolicy
        except (ImportError, AttributeError) as exc:
            tried.append(f"{home}: {exc}")
    raise Unsupported(f"FSDP2 fully_shard: {'; '.join(tried)}")


def _fsdp(model: nn.Module, ctx: Context, scope: Scope, strategy: str) -> nn.Module:
    fully_shard, MixedPrecisionPolicy = fsdp2()  # noqa: N806 - torch's class name
    kwargs: dict[str, Any] = {"reshard_after_forward": strategy != FSDP_NORESHARD}
    if strategy == FSDP_BF16:
        if ctx.device.type == "cuda" and not torch.cuda.is_bf16_supported(
            including_emulation=False
        ):
            raise Unsupported("bf16 mixed precision needs a GPU with bfloat16 support")
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    group = scope.group if scope.group is not None else dist.group.WORLD
    assert group is not None
    mesh = DeviceMesh.from_group(group, ctx.device.type)
    # each child with parameters its own unit, the last (a final norm or head) with the root
    blocks = [child for child in model.children() if any(True for _ in child.parameters())]
    for block in blocks[:-1]:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


class ShardedBench:
    """The strategy's model and optimizer, its communication-free twin, and the accounted
    collectives of one case on one rank."""

    def __init__(self, ctx: Context, scope: Scope, params: ShardedParams, strategy: str) -> None:
        self.ctx, self.scope, self.strategy = ctx, scope, strategy
        self.accounting = Accounting()
        built = build(params, ctx.device, ctx.rank)
        model = built.module
        self.num_params = sum(p.numel() for p in model.parameters())
        if strategy in FSDP_STRATEGIES:
            self.model = _fsdp(model, ctx, scope, strategy)
            self.opt: Any = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        else:
            cuda = ctx.device.type == "cuda"
            ddp = DistributedDataParallel(
                model,
                device_ids=[ctx.device.index] if cuda else None,
                process_group=scope.group,
                gradient_as_bucket_view=True,
            )
            self.model = ddp
            if strategy == ZERO1:
                # deferred: importing torch.distributed.optim scripts its functional optimizers
                # (torch.jit.script: slow, and deprecated on new torch); ZeRO-1 alone needs it
                from torch.distributed.optim import ZeroRedundancyOptimizer

                self.opt = ZeroRedundancyOptimizer(
                    ddp.parameters(),
                    optimizer_class=torch.optim.AdamW,
                    process_group=scope.group,
                    lr=1e-6,
                )
            else:
                self.opt = torch.optim.AdamW(ddp.parameters(), lr=1e-6)
        self.inputs = built.make_batch()
        self.info: dict[str, Any] = {"num_params": self.num_params}
        if params.model:  # the user's batch says how many samples a step trains
            self.info["samples_per_step"] = samples(self.inputs)
        self._account()
        # the twin: built after the accounted steps, so a GPU's peak is the strategy's own
        self.twin = build(params, ctx.device, ctx.rank).module
        self.twin_inputs = self.inputs
        if strategy == FSDP_BF16:  # computes as FSDP's bf16 policy does
            self.twin = self.twin.to(torch.bfloat16)
            self.twin_inputs = cast_batch(self.inputs, torch.bfloat16)
        held = [torch.zeros_like(t) for t in self._optimized()]
        for tensor in held:
            tensor.grad = torch.ones_like(tensor)
        self.twin_opt = torch.optim.AdamW(held, lr=1e-6)
        self.replay_tensors: list[dict[str, Any]] = []

    def _optimized(self) -> list[torch.Tensor]:
        """This rank's optimizer's parameters, as local tensors (shards for FSDP)."""
        opt = self.opt.optim if self.strategy == ZERO1 else self.opt
        params = [p for g in opt.param_groups for p in g["params"]]
        return [p.to_local() if hasattr(p, "to_local") else p for p in params]

    def _account(self) -> None:
        """One settling step, then one accounted step: bytes sent and memory held."""
        cuda = self.ctx.device.type == "cuda"
        self.step()
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.ctx.device)
        self.accounting.calls.clear()
        with self.accounting.recording():
            self.step()
        if isinstance(self.model, DistributedDataParallel):
            self.accounting.calls[:0] = bucket_calls(self.model, self.scope.group)
            logging: dict[str, Any] = getattr(self.model, "_get_ddp_logging_data", dict)()
            self.info["comm_hook"] = logging.get("comm_hook")  # None: DDP's own allreduce
        opt = self.opt.optim if self.strategy == ZERO1 else self.opt
        params = list(self.model.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        n = self.scope.spec.world_size
        by_op: dict[str, float] = defaultdict(float)
        for call in self.accounting.calls:
            by_op[call.op] += call.sent
        self.info.update(
            sent_bytes=sum(by_op.values()),
            **{f"sent_{op}_bytes": by_op[op] for op in sorted(by_op)},
            num_collectives=len(self.accounting.calls),
            theory_sent_bytes=theory_sent(self.strategy, n, self.num_params),
            param_bytes=held_bytes(params),
            grad_bytes=held_bytes(grads),
            optim_bytes=held_bytes(state),
            theory_memory_bytes=theory_memory(self.strategy, n, self.num_params),
            peak_bytes=torch.cuda.max_memory_allocated(self.ctx.device) if cuda else None,
        )
        self.info["memory_bytes"] = sum(self.info[k] for k in ("param_bytes", "grad_bytes"))
        self.info["memory_bytes"] += self.info["optim_bytes"]
        self.opt.zero_grad(set_to_none=True)

    def step(self, twin: bool = False) -> dict[str, float]:
        """One training step of the strategy (or of its twin); phase times in us. The twin's
        optimizer keeps its gradients: it updates what this rank's optimizer holds."""
        start = synced_clock(self.ctx)
        if twin:
            self.twin.zero_grad(set_to_none=True)
        else:
            self.opt.zero_grad(set_to_none=True)
        t0 = synced_clock(self.ctx)
        model, x = (self.twin, self.twin_inputs) if twin else (self.model, self.inputs)
        loss = forward_loss(model, x)
        t1 = synced_clock(self.ctx)
        loss.backward()  # type: ignore[no-untyped-call]
        t2 = synced_clock(self.ctx)
        (self.twin_opt if twin else self.opt).step()
        end = synced_clock(self.ctx)
        return {
            "forward_us": (t1 - t0) / 1e3,
            "backward_us": (t2 - t1) / 1e3,
            "optimizer_us": (end - t2) / 1e3,
            "step_us": (end - start) / 1e3,
        }

    def comm_only(self) -> float:
        """The accounted step's collectives replayed alone, back to back; us."""
        if not self.replay_tensors:
            # one buffer per distinct shape, shared by the calls that have it (FSDP gathers
            # every block into the same shapes): the replay's contents are never read, and
            # one buffer per call would hold a whole gathered model at once
            buffers: dict[TensorSpec, torch.Tensor] = {}

            def buffer(spec: TensorSpec) -> torch.Tensor:
                if spec not in buffers:
                    buffers[spec] = torch.empty(
                        spec.shape, dtype=spec.dtype, device=self.ctx.device
                    )
                return buffers[spec]

            for call in self.accounting.calls:
                self.replay_tensors.append(
                    {k: buffer(v) if isinstance(v, TensorSpec) else v for k, v in call.args.items()}
                )
        return replay(
            self.ctx,
            lambda: [
                getattr(dist, call.function)(**{**args, "async_op": True})
                for call, args in zip(self.accounting.calls, self.replay_tensors, strict=True)
            ],
        )

    def _round(self) -> dict[str, float]:
        """The strategy's step, the twin's step, the collectives alone."""
        main = self.step()
        twin = self.step(twin=True)
        main.update({f"twin_{key}": value for key, value in twin.items()})
        main["comm_only_us"] = self.comm_only()
        return main

    def timed(self, iters: int) -> tuple[list[float], Series]:
        """`iters` rounds: the strategy's step, the twin's step, the collectives alone."""
        return rounds(iters, self._round, "step_us")


def run(ctx: Context, params: ShardedParams, num_nodes: int, gpus_per_node: int) -> None:
    """Every strategy at every weak-scaling world size."""
    hidden, layers = params.shape
    cpu = ctx.device.type == "cpu"  # the attention scores are kept (no fused kernel)

    def columns(strategy: str) -> dict[str, Any]:
        return {
            "strategy": strategy,
            "model": params.model or "synthetic",
            "hidden": 0 if params.model else hidden,
            "layers": 0 if params.model else layers,
            "batch": params.batch,
            "seq": params.seq,
            "samples_per_step": params.batch,
        }

    run_weak_scaling(
        ctx,
        PROBE,
        params,
        (num_nodes, gpus_per_node),
        names=lambda largest: params.strategies,
        columns=columns,
        bench=lambda scope, strategy: ShardedBench(ctx, scope, params, strategy),
        # the user's model is sized when it is built (an out-of-memory is the case's skip)
        need=None
        if params.model
        else lambda scope, strategy: sharded_case_bytes(
            params, strategy, scope.spec.world_size, scores=cpu
        ),
        instead=lambda scope, strategy, budget: what_fits(
            params, scope.spec.world_size, cpu, budget, strategy
        ),
    )


if __name__ == "__main__":
    run_as_command(PROBE)
