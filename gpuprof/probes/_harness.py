"""The probe harness: process groups, device, warmup, timing, adaptive iterations, records.

A probe module only describes its cases (`Case`: id, parameters, how to build the timed op and
its check); `run_cases` does the rest for every probe (nccl-tests' shape: one harness).

Timing: CUDA events around every iteration on GPU (the op is enqueued on the current stream);
`time.perf_counter_ns` around every iteration on CPU, where gloo calls block until done. Every
iteration of every rank is kept. The iteration count fills a per-case time budget at the cost
of a warm-up iteration (`_timing.warm_up`), the max over the group so all ranks run as many.
"""

from __future__ import annotations

import gc
import inspect
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpuprof.machine.env import CASE_LINES_ENV, this_host
from gpuprof.machine.groups import GroupSpec
from gpuprof.probes import _timing
from gpuprof.probes._canary import Canary
from gpuprof.probes._faults import raise_if_asked
from gpuprof.probes._logs import Tee, tee_output
from gpuprof.probes._memory import OutOfMemory, raise_oom_if_asked
from gpuprof.probes._timing import slowdown_for, stretched, time_interleaved, time_iterations
from gpuprof.probes._transfer import Shipper
from gpuprof.probes._watchdog import Watchdog
from gpuprof.runs.records import (
    CaseRecord,
    ShardWriter,
    Where,
    failure_record,
    phase_marker,
    shard_path,
    skip_record,
)

# init_process_group(device_id=...) exists from torch 2.3 (the package accepts older)
TAKES_DEVICE_ID = "device_id" in inspect.signature(dist.init_process_group).parameters


def resolve_device(request: str) -> str:
    """'auto' -> 'cuda' where a GPU is visible, else 'cpu'."""
    if request == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return request


@dataclass(kw_only=True)
class Context:
    """One rank's view of the job: identity, device, backend and its record shard."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    host: str
    device: torch.device
    backend: str
    case_timeout_s: float
    _writer: ShardWriter | None = field(default=None, repr=False)
    verbose: bool = True
    home_rank: int = 0  # the rank whose run folder collects every record
    shipper: Shipper | None = None
    completed: set[tuple[Any, ...]] = field(default_factory=set)  # (probe, scope, n, group, id)
    _watchdog: Watchdog | None = field(default=None, repr=False)

    def log(self, message: str) -> None:
        """Progress on stderr, from global rank 0 only (with the launcher's live line or -q,
        to the rank's log only)."""
        if self.rank != 0:
            return
        if self.verbose:
            print(message, file=sys.stderr, flush=True)
        elif isinstance(sys.stderr, Tee):
            sys.stderr.log.write(message + "\n")

    @property
    def writer(self) -> ShardWriter:
        """This rank's record shard."""
        assert self._writer is not None, "attach_shard() first"
        return self._writer

    def sync(self) -> None:
        """Wait for the device to finish queued work on every stream (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sync_stream(self) -> None:
        """Wait for the current (compute) stream only: communication that the code under
        test left running on NCCL's own streams goes on (no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def init(run_dir: Path | None, device_request: str, case_timeout_s: float) -> Context:
    """Join the job's process group (nccl on CUDA, gloo on CPU) and open this rank's shard."""
    device_type = resolve_device(device_request)
    local_rank = _env_int("LOCAL_RANK", 0)
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        # a wait at a scope boundary can outlast a case (the watchdog bounds each); device_id
        # binds NCCL to this GPU at init, so new_group splits it (no communicator made from
        # scratch per sub-group); a rank started alone (`solo_launch`) is a world of one
        kwargs: dict[str, Any] = {"timeout": timedelta(seconds=max(1800.0, 4 * case_timeout_s))}
        if device.type == "cuda" and TAKES_DEVICE_ID:
            kwargs["device_id"] = device
        if "RANK" not in os.environ and "WORLD_SIZE" not in os.environ:
            kwargs.update(store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
        dist.init_process_group(backend, **kwargs)
    world_size, rank = dist.get_world_size(), dist.get_rank()
    local_world = _env_int("LOCAL_WORLD_SIZE", world_size)
    ctx = Context(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=_env_int("GROUP_RANK", rank // local_world),
        num_nodes=max(1, world_size // local_world),
        host=this_host(),
        device=device,
        backend=backend,
        case_timeout_s=case_timeout_s,
        verbose=os.environ.get(CASE_LINES_ENV) != "0",
    )
    if run_dir is not None:
        attach_shard(ctx, run_dir)
    ctx._watchdog = Watchdog(
        rank=ctx.rank, host=ctx.host, timeout_s=case_timeout_s, writer=lambda: ctx.writer
    )
    return ctx


def attach_shard(ctx: Context, run_dir: Path, home_rank: int = 0) -> None:
    """Open this rank's shard in `run_dir` and send its records to `home_rank` as it goes."""
    ctx._writer = ShardWriter(shard_path(run_dir, ctx.rank))
    ctx.home_rank = home_rank
    ctx.shipper = Shipper(
        [ctx._writer.path, tee_output(run_dir, ctx.rank)], run_dir, ctx.rank, home_rank
    )


@dataclass(frozen=True, kw_only=True)
class Scope:
    """A group this rank measures in, with the labels its records carry."""

    spec: GroupSpec
    group: Any  # a ProcessGroup, or None for the default (world) group
    name: str
    group_rank: int
    ranks: tuple[int, ...]

    def where(self, ctx: Context) -> Where:
        """Record labels for this rank in this scope."""
        return Where(
            rank=ctx.rank,
            node_rank=ctx.node_rank,
            host=ctx.host,
            scope=self.spec.scope,
            group=self.name,
            world_size=self.spec.world_size,
            num_nodes=self.spec.num_nodes,
            group_rank=self.group_rank,
        )


def make_scopes(ctx: Context, specs: Iterable[GroupSpec]) -> list[Scope | None]:
    """Create every sub-group (all ranks call new_group in one order); None if not a member
    or the spec's groups need no communicator (`GroupSpec.communicator`)."""
    scopes: list[Scope | None] = []
    for spec in specs:
        mine: Scope | None = None
        for name, members in zip(spec.names, spec.members, strict=False):
            whole = len(members) == ctx.world_size
            group = None if whole or not spec.communicator else dist.new_group(list(members))
            if ctx.rank in members:
                mine = Scope(
                    spec=spec,
                    group=group,
                    name=name,
                    group_rank=members.index(ctx.rank),
                    ranks=members,
                )
        scopes.append(mine)
    return scopes


Series = dict[str, list[Any]]


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A built case: `run` is one timed operation; `check` re-inits inputs, runs once and
    returns the number of wrong elements on this rank.

    A probe whose iteration is several timed parts (a training step) gives `timed` instead:
    it runs n iterations and returns their times in us and more per-iteration columns."""

    run: Callable[[], None] = lambda: None
    check: Callable[[], int] | None = None
    timed: Callable[[int], tuple[list[float], Series]] | None = None
    more_records: Callable[[], list[dict[str, Any]]] | None = None  # written after the case
    # a canary (`gpuprof.probes._canary`, CPU only, not with `timed`): run between the timed
    # iterations, its value the case's `canary` result (the resource's own speed meanwhile)
    canary: Canary | None = None


class Unsupported(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a case builder when the backend or device cannot run the case; `details`
    (numbers such as the memory it needs) go into the skip record beside the reason."""

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.details = details


@dataclass(frozen=True, kw_only=True)
class Case:
    """One measured configuration: id, table columns, and how to build it."""

    case_id: str
    params: dict[str, Any]
    build: Callable[[], Prepared]
    describe: str = ""
    # collect garbage before the case (about 100 ms with torch loaded): for cases that build
    # models, whose wrappers leave reference cycles the previous case must not keep alive
    collect_first: bool = False


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How long a case may take, as iterations and seconds."""

    warmup_iters: int
    min_iters: int
    max_iters: int
    budget_s: float

    @classmethod
    def of(cls, params: Any) -> Budget:
        """The budget fields of a probe's parameters."""
        return cls(
            warmup_iters=params.warmup_iters,
            min_iters=params.min_iters,
            max_iters=params.max_iters,
            budget_s=params.budget_s,
        )


def agreed_max(ctx: Context, value: float, group: Any) -> float:
    """The max of `value` over the group (also a synchronisation point)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return float(tensor.item())


def iterations_for(budget: Budget, seconds_per_iter: float) -> int:
    """Iterations that fill the budget, clamped to [min_iters, max_iters]."""
    if seconds_per_iter <= 0:
        return budget.max_iters
    wanted = math.ceil(budget.budget_s / seconds_per_iter)
    return max(budget.min_iters, min(budget.max_iters, wanted))


def measure(
    ctx: Context, scope: Scope, prepared: Prepared, budget: Budget, canary_factor: float = 1.0
) -> tuple[list[float], int | None, Series, float | None]:
    """Warm up, check correctness, agree on the iteration count, then time every iteration
    (with the case's canary between them, if it has one: its value is the last item).

    `nwrong` is None when the case has no check: unchecked is missing, never "0 wrong".
    """

    def timed(iters: int) -> tuple[list[float], Series]:
        if prepared.timed is not None:
            return prepared.timed(iters)
        return time_iterations(ctx.device, prepared.run, iters), {}

    cost_us = _timing.warm_up(timed, max(1, budget.warmup_iters), prepared.timed is not None)
    nwrong = prepared.check() if prepared.check else None
    alone = len(scope.ranks) == 1  # agrees with itself (and may have no group: make_scopes)
    per_iter_s = cost_us / 1e6 if alone else agreed_max(ctx, cost_us / 1e6, scope.group)
    iters = iterations_for(budget, per_iter_s)
    canary = prepared.canary
    if canary is None:
        times, series = timed(iters)
        return times, nwrong, series, None
    if prepared.timed is not None or ctx.device.type != "cpu":
        raise ValueError("a canary runs between plain CPU iterations only")
    times, canary_times = time_interleaved(prepared.run, canary.run, iters, canary_factor)
    return times, nwrong, {}, canary.value(canary_times)


def run_case(ctx: Context, probe: str, scope: Scope, case: Case, budget: Budget) -> None:
    """Measure one case on this rank and append its record (or a skip or failure)."""
    where = scope.where(ctx)
    ctx.writer.write(phase_marker(probe, case.case_id, where, "start"))
    if case.collect_first:
        gc.collect()  # the previous case's models and pending work (reference cycles) go now
    assert ctx._watchdog is not None
    with ctx._watchdog.watch(probe, case.case_id, where):
        start_ns = time.time_ns()
        try:
            raise_if_asked(ctx.rank, probe, case.case_id)
            raise_oom_if_asked(probe, case.case_id)
            prepared = case.build()
            # the fault hook reaches a canary as `canary/<probe>/<case_id>`: "*" slows it with
            # every case, as a slower machine would; "memory/*" leaves it alone
            canary_factor = slowdown_for("canary", f"{probe}/{case.case_id}")
            with stretched(slowdown_for(probe, case.case_id)):
                times, nwrong, series, canary = measure(ctx, scope, prepared, budget, canary_factor)
        except (Unsupported, torch.OutOfMemoryError) as exc:
            skip = exc if isinstance(exc, Unsupported) else OutOfMemory(ctx.device, exc)
            ctx.writer.write(skip_record(probe, case.case_id, where, str(skip), **skip.details))
            return
        except Exception as exc:
            trace = traceback.format_exc()
            ctx.writer.write(failure_record(probe, case.case_id, where, repr(exc), trace))
            ctx.writer.flag_failure()
            raise
        record = CaseRecord(
            probe=probe,
            case_id=case.case_id,
            where=where,
            params=case.params,
            times_us=times,
            results={"nwrong": nwrong, **({} if canary is None else {"canary": canary})},
            series=series,
            warmup_iters=budget.warmup_iters,
            start_unix_ns=start_ns,
            end_unix_ns=time.time_ns(),
        )
        ctx.writer.write(record.to_dict())
        for extra in prepared.more_records() if prepared.more_records else []:
            ctx.writer.write(extra)
    if scope.group_rank == 0 and ctx.rank == 0:
        median = sorted(times)[len(times) // 2]
        ctx.log(
            f"  {case.describe or case.case_id}: {median:,.1f} us x {len(times)}"
            + (f"  #wrong {nwrong}" if nwrong else "")
        )


def run_cases(
    ctx: Context,
    probe: str,
    scopes: list[Scope | None],
    cases_for: Callable[[Scope], list[Case]],
    budget: Budget,
) -> None:
    """Run every case of every scope this rank belongs to; scopes are separated by barriers."""
    for scope in scopes:
        if scope is not None:
            cases = cases_for(scope)
            if ctx.rank == scope.ranks[0]:
                ctx.log(
                    f"[{probe}] {scope.spec.scope} n={scope.spec.world_size}: {len(cases)} cases"
                )
            key = (probe, scope.spec.scope, scope.spec.world_size, scope.name)
            for case in cases:
                if (*key, case.case_id) not in ctx.completed:  # --resume: measured already
                    run_case(ctx, probe, scope, case, budget)
            gc.collect()  # the last case's objects, while its group lives
        dist.barrier()
        if ctx.shipper is not None:
            ctx.shipper.ship()
    release_scopes(scopes)
    ctx.writer.sync()


def release_scopes(scopes: list[Scope | None]) -> None:
    """Destroy this rank's sub-groups (every rank is past the last barrier): communicators
    must not pile up from probe to probe."""
    for scope in scopes:
        if scope is not None and scope.group is not None:
            dist.destroy_process_group(scope.group)
