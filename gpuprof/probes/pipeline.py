"""Pipeline micro-benchmark: torch.distributed.pipelining schedules, timed per micro-batch.

Every rank of the job is one pipeline stage (p = world size); the multi-chunk schedules
(Interleaved1F1B, LoopedBFS, InterleavedZeroBubble: stage s on rank s mod p; ZBVZeroBubble:
the V shape, rank r holds stages r and 2p-1-r) split the same layers into `chunks` chunks per
rank, so every schedule does the same compute. A stage is `stage_layers` x (Linear + GELU)
times its `--stage-weights` entry (a deliberate imbalance).

One iteration is one `schedule.step()` of m micro-batches after a barrier. Every forward
(F), backward (B: the full backward, or the input-gradient part in zero-bubble schedules)
and weight-gradient (W) call of each stage is timed by wrapping the stage's methods, and every
wait for a send/recv by wrapping the schedules' wait helper; on GPU the compute stream (not
NCCL's) is synchronised around each, so a kernel's time is its own. Intervals are on each
rank's monotonic clock shifted to group rank 0's: the offset comes from 10 ping-pongs with
rank 0 (the one with the shortest round trip, each transfer waited for), and its error is at
most half that round trip (recorded per rank).

    torchrun --nproc-per-node 4 -m gpuprof.probes.pipeline --schedules GPipe,1F1B
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, schedules

from gpuprof.machine.groups import GroupSpec, scope_groups
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Case,
    Context,
    Scope,
    Series,
    Unsupported,
)
from gpuprof.probes._model import pipeline_stages
from gpuprof.probes._training import bench_case, run_scoped
from gpuprof.runs.records import timeline_record
from gpuprof.specs.pipeline import MULTI_CHUNK_SCHEDULES, PipelineParams, stage_ranks

PROBE = "pipeline"
V_SHAPED = ("ZBVZeroBubble", "DualPipeV")
PING_ROUNDS = 10


def stage_indices(schedule: str, rank: int, p: int, v: int) -> list[int]:
    """The stages rank `rank` holds: one for GPipe/1F1B; looped (s mod p) or V-shaped."""
    if schedule not in MULTI_CHUNK_SCHEDULES:
        return [rank]
    if schedule in V_SHAPED:
        return [rank, 2 * p - 1 - rank]
    return [rank + i * p for i in range(v)]


def chunk_layers(params: PipelineParams, rank: int, v: int) -> int:
    """Layers per model chunk on `rank`: its weighted share of `stage_layers`, split in v."""
    weight = params.stage_weights[rank] if params.stage_weights else 1.0
    return max(1, round(params.stage_layers * weight / v))


def _chunk(hidden: int, layers: int, seed: int, device: torch.device) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(hidden, hidden), nn.GELU()]
        return nn.Sequential(*blocks).to(device)


def _user_chunks(
    params: PipelineParams, device: torch.device, num_stages: int, m: int
) -> tuple[list[nn.Module], torch.Tensor, torch.Tensor]:
    """The user's model as stages, the first stage's m micro-batches (one tensor: a pipeline
    passes one tensor between stages) and the last stage's target (zeros shaped as its
    output: the loss is the output's mean square, as for gpuprof's own stages)."""
    chunks, batch = pipeline_stages(params.model, device, num_stages)
    first = batch()
    if not isinstance(first, torch.Tensor):
        raise Unsupported(
            f"--model {params.model}: a pipeline's micro-batch is one tensor "
            f"(make_batch returned {type(first).__name__})"
        )
    inputs = torch.cat([first, *(batch() for _ in range(m - 1))])
    with torch.no_grad():  # the output's shape, from the whole model on one micro-batch
        out = first
        for chunk in chunks:
            out = chunk.to(device)(out)
            chunk.to("cpu")
    if not isinstance(out, torch.Tensor):
        raise Unsupported(f"--model {params.model}: the last stage must return one tensor")
    target = torch.zeros((m * out.shape[0], *out.shape[1:]), device=device)
    return chunks, inputs, target


def clock_offset(ctx: Context, scope: Scope) -> tuple[float, float]:
    """(offset, error) in us that map this rank's perf_counter onto group rank 0's: Cristian's
    method, the ping-pong with the shortest round trip; error <= half that round trip."""
    buf = torch.zeros(1, dtype=torch.float64, device=ctx.device)
    root = scope.ranks[0]

    # On NCCL send/recv return once queued: wait for the transfer itself before reading a
    # clock, else the ping-pong times queueing and the offset is off by about a round trip.
    def send(to: int) -> None:
        dist.send(buf, to, group=scope.group)
        ctx.sync()

    def recv(source: int) -> None:
        dist.recv(buf, source, group=scope.group)
        ctx.sync()

    if ctx.rank == root:
        for peer in scope.ranks[1:]:
            for _ in range(PING_ROUNDS):
                recv(peer)
                buf.fill_(time.perf_counter_ns() / 1e3)
                send(peer)
        return 0.0, 0.0
    best = (float("inf"), 0.0)
    for _ in range(PING_ROUNDS):
        t0 = time.perf_counter_ns() / 1e3
        send(root)
        recv(root)
        t1 = time.perf_counter_ns() / 1e3
        best = min(best, (t1 - t0, float(buf.item()) - (t0 + t1) / 2))
    return best[1], best[0] / 2


class PipelineBench:
    """One schedule at one micro-batch count on one rank: stages, inputs, timers."""

    def __init__(
        self,
        ctx: Context,
        scope: Scope,
        params: PipelineParams,
        schedule: str,
        m: int,
        case_id: str,
    ) -> None:
        cls = getattr(schedules, f"Schedule{schedule}", None)
        if cls is None:
            raise Unsupported(f"torch {torch.__version__} has no Schedule{schedule}")
        self.ctx, self.scope, self.case_id = ctx, scope, case_id
        p = scope.spec.world_size
        self.v = params.chunks if schedule in MULTI_CHUNK_SCHEDULES else 1
        rank = scope.group_rank
        self.stage_ids = stage_indices(schedule, rank, p, self.v)
        num_stages = p * self.v
        if params.model:
            chunks, self.inputs, self.target = _user_chunks(params, ctx.device, num_stages, m)
            modules = [chunks[s].to(ctx.device) for s in self.stage_ids]
            layers = sum(len(list(module.children())) or 1 for module in modules)
        else:
            layers = chunk_layers(params, rank, self.v)
            modules = [_chunk(params.hidden, layers, 100 + s, ctx.device) for s in self.stage_ids]
        self.stages = [
            PipelineStage(module, s, num_stages, ctx.device, group=scope.group)
            for module, s in zip(modules, self.stage_ids, strict=True)
        ]
        self.events: list[dict[str, Any]] = []
        self.iteration = 0
        for stage in self.stages:
            self._wrap(stage)

        def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return ((output.float() - target) ** 2).mean()

        stage_arg: Any = self.stages if self.v > 1 else self.stages[0]
        try:
            self.schedule = cls(stage_arg, n_microbatches=m, loss_fn=loss_fn)
        except (ValueError, AssertionError, NotImplementedError) as exc:
            raise Unsupported(f"{schedule} with p={p}, m={m}, v={self.v}: {exc}") from None
        self.first = 0 in self.stage_ids
        self.last = num_stages - 1 in self.stage_ids
        if not params.model:
            gen = torch.Generator(device=ctx.device).manual_seed(7)
            rows = m * params.mb_rows
            self.inputs = torch.randn(rows, params.hidden, device=ctx.device, generator=gen)
            self.target = torch.zeros(rows, params.hidden, device=ctx.device)
        self.offset_us, self.offset_error_us = clock_offset(ctx, scope)
        self.info = {
            "stages": self.stage_ids,
            "chunk_layers": layers,
            "clock_offset_us": self.offset_us,
            "clock_error_us": self.offset_error_us,
        }
        if params.model:  # the user's micro-batch size
            self.info["mb_rows"] = int(self.inputs.shape[0]) // m

    def _now(self) -> float:
        # the compute stream only: sends the schedule overlaps with compute go on
        self.ctx.sync_stream()
        return time.perf_counter_ns() / 1e3 + self.offset_us

    def _record(self, kind: str, stage: int, micro_batch: int, start: float) -> None:
        self.events.append(
            {
                "iteration": self.iteration,
                "kind": kind,
                "stage": stage,
                "micro_batch": micro_batch,
                "start_us": start,
                "end_us": self._now(),
            }
        )

    def _wrap(self, stage: Any) -> None:
        for name, kind in (
            ("forward_one_chunk", "F"),
            ("backward_one_chunk", "B"),
            ("backward_weight_one_chunk", "W"),
        ):
            original = getattr(stage, name, None)
            if original is not None:  # an older torch may lack the weight-gradient method
                setattr(stage, name, self._timed(original, kind, stage.stage_index))

    def _timed(self, original: Callable[..., Any], kind: str, stage: int) -> Callable[..., Any]:
        def call(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            start = self._now()
            out = original(chunk_id, *args, **kwargs)
            self._record(kind, stage, chunk_id, start)
            return out

        return call

    @contextlib.contextmanager
    def _timed_waits(self) -> Iterator[None]:
        """Time the schedules' waits for sends and receives (module-level helper)."""
        original = getattr(schedules, "_wait_batch_p2p", None)
        if original is None:  # a torch that waits inline: waits show as gaps, not WAIT bars
            yield
            return

        def wait(work: Any) -> None:
            start = self._now()
            original(work)
            if work:
                self._record("WAIT", -1, -1, start)

        schedules._wait_batch_p2p = wait
        try:
            yield
        finally:
            schedules._wait_batch_p2p = original

    def _step(self) -> None:
        args = (self.inputs,) if self.first else ()
        if self.last:
            losses: list[torch.Tensor] = []
            self.schedule.step(*args, target=self.target, losses=losses)
        else:
            self.schedule.step(*args)

    def timed(self, iters: int) -> tuple[list[float], Series]:
        """`iters` steps, each after a barrier; step wall times and per-step busy time."""
        self.events = []
        times: list[float] = []
        with self._timed_waits():
            for i in range(iters):
                self.iteration = i
                dist.barrier(group=self.scope.group)
                start = self._now()
                self._step()
                times.append(self._now() - start)
        return times, {}

    def timeline(self) -> list[dict[str, Any]]:
        """The last measured steps' intervals, as one timeline record."""
        return [timeline_record(PROBE, self.case_id, self.scope.where(self.ctx), self.events)]


def _case(ctx: Context, scope: Scope, params: PipelineParams, schedule: str, m: int) -> Case:
    p = scope.spec.world_size
    v = params.chunks if schedule in MULTI_CHUNK_SCHEDULES else 1
    case_id = f"{schedule}.m{m}"
    case_params: dict[str, Any] = {
        "schedule": schedule,
        "p": p,
        "m": m,
        "v": v,
        "model": params.model or "synthetic",
        "hidden": 0 if params.model else params.hidden,
        "mb_rows": params.mb_rows,
        "stage_layers": 0 if params.model else params.stage_layers,
        "stage_weight": params.stage_weights[scope.group_rank] if params.stage_weights else 1.0,
    }

    def make() -> PipelineBench:
        if p < 2:
            raise Unsupported("a pipeline needs at least 2 ranks")
        return PipelineBench(ctx, scope, params, schedule, m, case_id)

    return bench_case(case_id, case_params, make, f"pipeline {schedule} p={p} m={m} v={v}")


def pipeline_group(num_nodes: int, gpus_per_node: int, max_stages: int) -> GroupSpec:
    """The pipeline's group: every rank (`global`), or `max_stages` ranks spread over the
    job (`stages`)."""
    ranks = stage_ranks(num_nodes, gpus_per_node, max_stages)
    if len(ranks) == num_nodes * gpus_per_node:
        return scope_groups(num_nodes, gpus_per_node, ("global",))[0]
    nodes = len({r // gpus_per_node for r in ranks})
    return GroupSpec(
        scope="stages", world_size=len(ranks), num_nodes=nodes, members=(ranks,), names=("pipe",)
    )


def run(ctx: Context, params: PipelineParams, num_nodes: int, gpus_per_node: int) -> None:
    """Every schedule at every micro-batch count, one pipeline (`pipeline_group`)."""
    group = pipeline_group(num_nodes, gpus_per_node, params.max_stages)
    p = group.world_size
    run_scoped(
        ctx,
        PROBE,
        params,
        [group],
        lambda scope: [
            _case(ctx, scope, params, schedule, m)
            for schedule in params.schedules
            for m in params.micro_batch_counts(p)
        ],
    )


if __name__ == "__main__":
    run_as_command(PROBE)
