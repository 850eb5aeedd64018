"""DDP micro-benchmark: where a data-parallel training step's time goes, by two methods.

Every case is one DDP variant (bucket size, gradient_as_bucket_view, static_graph, comm hook,
gradient accumulation, bf16 autocast) of a synthetic transformer in one scope. One iteration
is a round of four measurements, alternated so drift on a shared machine hits them alike:

1. the DDP step (zero_grad, k micro-batches with the first k-1 under `no_sync`, optimizer),
   timed by phase; DDP's own logging data (sample rate 1) gives forward, backward compute,
   backward communication and their overlap for the same step (read one step later: DDP
   records a step's statistics when the next one starts);
2. the same step with every micro-batch under `no_sync` (compute only);
3. the same step on a twin model whose comm hook is `noop_hook`: all of DDP but the
   all_reduce, so the difference to 1 is what communication costs the step (method A/B);
4. communication only: the all_reduces of the same buckets (sizes from DDP's logging data),
   back to back.

Times are wall clock (`perf_counter_ns`), with the device synchronised at each phase edge on
GPU. The twin model doubles the memory the case needs. On CPU each round also runs a canary
right after its DDP step (`gpuprof.probes._canary.StepCanary`: a numpy matmul and copy, code
neither side of a check changes): the core's own speed in that moment, which a regression
check judges samples/s against (the `canary_per_s` column).

    torchrun --nproc-per-node 8 -m gpuprof.probes.ddp --model-params 350M
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
from torch.nn.parallel import DistributedDataParallel

from gpuprof.probes._canary import StepCanary
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Context,
    Scope,
    Series,
    Unsupported,
)
from gpuprof.probes._model import build, forward_loss, samples
from gpuprof.probes._timing import slowdown_for, time_canary
from gpuprof.probes._training import replay, run_weak_scaling, synced_clock
from gpuprof.specs.ddp import DDPParams, ddp_case_bytes, parse_variant
from gpuprof.specs.sharded import what_fits

PROBE = "ddp"
# the canary three times right after each round's DDP step (about 0.6 ms each on one core of
# this VM, beside a ci step of 25-35 ms); a 512^3 matmul once a round, after the no-op step,
# did not follow the step
CANARY_RUNS = 3
LOGGING_FIELDS = {  # DDP logging data (ns) -> our column (us)
    "forward_compute_time": "log_forward_us",
    "backward_compute_time": "log_backward_compute_us",
    "backward_comm_time": "log_comm_us",
    "backward_compute_comm_overlap_time": "log_overlap_us",
}


def _hook(name: str | None) -> Callable[..., Any] | None:
    hooks: dict[str | None, Callable[..., Any] | None] = {
        None: None,
        "allreduce": default_hooks.allreduce_hook,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "noop": debugging_hooks.noop_hook,
    }
    return hooks[name]


def _wrap(
    model: nn.Module, ctx: Context, scope: Scope, settings: dict[str, Any], hook: str | None
) -> DistributedDataParallel:
    ddp = DistributedDataParallel(
        model,
        device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
        process_group=scope.group,
        bucket_cap_mb=settings["bucket_cap_mb"],
        gradient_as_bucket_view=settings["gradient_as_bucket_view"],
        static_graph=settings["static_graph"],
    )
    fn = _hook(hook)
    if fn is not None:
        try:
            ddp.register_comm_hook(scope.group, fn)
        except TypeError as exc:  # e.g. the bf16 hook needs NCCL: "not here", not a failure
            raise Unsupported(f"comm hook {hook}: {exc}") from None
    return ddp


def logging_supported(ddp: DistributedDataParallel) -> bool:
    """DDP's runtime logging data is a private API: feature-detect it, sample every step."""
    setter = getattr(ddp, "_set_ddp_runtime_logging_sample_rate", None)
    if setter is None or not hasattr(ddp, "_get_ddp_logging_data"):
        return False
    setter(1)
    return True


def bucket_bytes(data: dict[str, Any]) -> list[int]:
    """The gradient bucket sizes in bytes from DDP's logging data (rebuilt ones if any)."""
    text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    return [int(part) for part in str(text).split(",") if part.strip()]


def fallback_buckets(model: nn.Module, cap_mb: float) -> list[int]:
    """Bucket sizes as DDP first builds them (reverse parameter order, 1 MiB first bucket,
    then `cap_mb`), for torch versions without the logging data."""
    sizes, current, cap = [], 0, 1 << 20
    for param in reversed(list(model.parameters())):
        current += param.numel() * param.element_size()
        if current >= cap:
            sizes.append(current)
            current, cap = 0, int(cap_mb * (1 << 20))
    return [*sizes, current] if current else sizes


class DDPBench:
    """The models, optimizers, inputs and timers of one DDP case on one rank."""

    def __init__(self, ctx: Context, scope: Scope, params: DDPParams, variant: str) -> None:
        self.ctx, self.scope = ctx, scope
        self.settings = parse_variant(variant)
        self.accum = int(self.settings["accum"])
        cuda = ctx.device.type == "cuda"
        if (
            self.settings["amp"]
            and cuda
            and not torch.cuda.is_bf16_supported(including_emulation=False)
        ):
            raise Unsupported("bf16 autocast needs a GPU with bfloat16 support")
        self.amp = self.settings["amp"]
        built = build(params, ctx.device, ctx.rank)
        self.model = _wrap(built.module, ctx, scope, self.settings, self.settings["hook"])
        self.twin = _wrap(
            build(params, ctx.device, ctx.rank).module, ctx, scope, self.settings, "noop"
        )
        self.logging = logging_supported(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        self.twin_opt = torch.optim.AdamW(self.twin.parameters(), lr=1e-6)
        self.inputs = [built.make_batch() for _ in range(self.accum)]
        self.num_params = sum(p.numel() for p in self.model.parameters())
        self.info = {
            "num_params": self.num_params,
            "grad_bytes": 4 * self.num_params,
            "ddp_logging": self.logging,
        }
        if params.model:  # the user's batch says how many samples a step trains
            self.info["samples_per_step"] = samples(self.inputs[0]) * self.accum
        self.comm_buffers: list[torch.Tensor] | None = None
        self.last_iteration = -1
        # the core's own speed in each round, on CPU (on GPU the step is the device's); timed
        # by the real clock: the fault hook reaches it as `canary/ddp/<variant>`, not `ddp/*`
        self.canary = StepCanary() if ctx.device.type == "cpu" else None
        self.canary_factor = slowdown_for("canary", f"{PROBE}/{variant}")
        if self.settings["static_graph"]:
            # static_graph records the graph in the first iteration, which must synchronise
            # (a first micro-batch under no_sync trips an internal assert in the reducer)
            for model, opt in ((self.model, self.opt), (self.twin, self.twin_opt)):
                forward_loss(model, self.inputs[0]).backward()  # type: ignore[no-untyped-call]
                opt.zero_grad(set_to_none=True)

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        if self.amp:
            with torch.autocast(self.ctx.device.type, dtype=torch.bfloat16):
                yield
        else:
            yield

    def step(
        self, model: DistributedDataParallel, opt: torch.optim.Optimizer, sync: bool
    ) -> dict[str, float]:
        """One training step of `accum` micro-batches; phase times in us. Only the last
        micro-batch synchronises gradients, and only when `sync`."""
        start = synced_clock(self.ctx)
        opt.zero_grad(set_to_none=True)
        times: dict[str, float] = defaultdict(float)
        for i in range(self.accum):
            last = sync and i == self.accum - 1
            with contextlib.nullcontext() if last else model.no_sync():
                t0 = synced_clock(self.ctx)
                with self._autocast():
                    loss = forward_loss(model, self.inputs[i])
                t1 = synced_clock(self.ctx)
                loss.backward()  # type: ignore[no-untyped-call]
                t2 = synced_clock(self.ctx)
            part = "sync" if last else "local"
            times[f"{part}_forward_us"] += (t1 - t0) / 1e3
            times[f"{part}_backward_us"] += (t2 - t1) / 1e3
        t3 = synced_clock(self.ctx)
        opt.step()
        end = synced_clock(self.ctx)
        times["optimizer_us"] = (end - t3) / 1e3
        times["step_us"] = (end - start) / 1e3
        return times

    def logged(self) -> dict[str, float | None]:
        """The previous synchronised step's statistics from DDP's logging data, in us."""
        empty: dict[str, float | None] = dict.fromkeys(LOGGING_FIELDS.values())
        if not self.logging:
            return empty
        data = self.model._get_ddp_logging_data()  # type: ignore[no-untyped-call]
        iteration = int(data.get("iteration", -1))
        if iteration == self.last_iteration or "backward_comm_time" not in data:
            return empty
        self.last_iteration = iteration
        return {
            ours: float(data[theirs]) / 1e3
            for theirs, ours in LOGGING_FIELDS.items()
            if theirs in data
        }

    def comm_only(self) -> float:
        """The all_reduces of this variant's buckets alone, back to back; us."""
        if self.comm_buffers is None:
            data = (
                self.model._get_ddp_logging_data()  # type: ignore[no-untyped-call]
                if self.logging
                else {}
            )
            sizes = bucket_bytes(data) or fallback_buckets(
                self.model.module, self.settings["bucket_cap_mb"]
            )
            dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(
                self.settings["hook"], torch.float32
            )
            self.comm_buffers = [
                torch.ones(max(1, size // 4), dtype=dtype, device=self.ctx.device) for size in sizes
            ]
        return replay(
            self.ctx,
            lambda: [
                dist.all_reduce(buf, group=self.scope.group, async_op=True)
                for buf in self.comm_buffers or []
            ],
        )

    def run_canary(self) -> float | None:
        """The canary's rate right after a DDP step (CPU only): the median of CANARY_RUNS."""
        if self.canary is None:
            return None
        took = [time_canary(self.canary.run, self.canary_factor) for _ in range(CANARY_RUNS)]
        return self.canary.value(took)

    def timed(self, iters: int) -> tuple[list[float], Series]:
        """`iters` rounds (DDP step, canary, no_sync step, noop step, comm only) and one more DDP
        step, whose start makes DDP record the statistics of the last round's step."""
        times: list[float] = []
        series: Series = defaultdict(list)
        previous: dict[str, float] | None = None
        for i in range(iters + 1):
            main = self.step(self.model, self.opt, sync=True)
            canary = self.run_canary() if i < iters else None
            logged = self.logged()
            if previous is not None:
                times.append(previous.pop("step_us"))
                for key, value in (*previous.items(), *logged.items()):
                    series[key].append(value)
            if i == iters:
                break
            previous = dict(main)
            previous["nosync_step_us"] = self.step(self.model, self.opt, sync=False)["step_us"]
            previous["noop_step_us"] = self.step(self.twin, self.twin_opt, sync=True)["step_us"]
            if canary is not None:
                previous["canary_per_s"] = canary
            previous["comm_only_us"] = self.comm_only()
        return times, dict(series)


def run(ctx: Context, params: DDPParams, num_nodes: int, gpus_per_node: int) -> None:
    """The default variant at every world size (weak scaling), every variant at the largest."""
    hidden, layers = params.shape
    cpu = ctx.device.type == "cpu"  # the attention scores are kept (no fused kernel)

    def columns(variant: str) -> dict[str, Any]:
        settings = parse_variant(variant)
        return {
            "variant": variant,
            **settings,
            "model": params.model or "synthetic",
            "hidden": 0 if params.model else hidden,
            "layers": 0 if params.model else layers,
            "batch": params.batch,
            "seq": params.seq,
            "samples_per_step": params.batch * settings["accum"],
        }

    run_weak_scaling(
        ctx,
        PROBE,
        params,
        (num_nodes, gpus_per_node),
        names=lambda largest: params.variants if largest else params.variants[:1],
        columns=columns,
        bench=lambda scope, variant: DDPBench(ctx, scope, params, variant),
        # the user's model is sized when it is built (an out-of-memory is the case's skip)
        need=None if params.model else lambda scope, variant: ddp_case_bytes(params, scores=cpu),
        instead=lambda scope, variant, budget: what_fits(
            params,
            scope.spec.world_size,
            cpu,
            budget,
            own=lambda model, checkpointed: ddp_case_bytes(model, cpu, checkpointed),
        ),
    )


if __name__ == "__main__":
    run_as_command(PROBE)
