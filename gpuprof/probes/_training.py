"""What the training probes (ddp, sharded, tp, pipeline) share: a case that builds its bench
when the harness asks for it, cases for every scope of a job, a clock read after the device
is done, collectives replayed alone, and rounds that alternate A and B measurements.

A bench is one case's model(s) and inputs on one rank. It gives `info` (columns learnt while
building: parameter counts, bytes, memory), `timed(iters)` for the harness, and, when it
records more than one row per iteration, `timeline()`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import torch.distributed as dist

from gpuprof.machine.groups import GroupSpec
from gpuprof.probes._harness import (
    Budget,
    Case,
    Context,
    Prepared,
    Scope,
    Series,
    Unsupported,
    agreed_max,
    make_scopes,
    run_cases,
)
from gpuprof.probes._memory import HEADROOM, device_memory
from gpuprof.probes._timing import clock_ns
from gpuprof.specs.ddp import ddp_scopes
from gpuprof.units import format_size


class Bench(Protocol):
    """One case's models, inputs and timers on one rank."""

    @property
    def info(self) -> dict[str, Any]: ...

    def timed(self, iters: int) -> tuple[list[float], Series]: ...


def bench_case(
    case_id: str,
    params: dict[str, Any],
    make: Callable[[], Bench],
    describe: str,
    fits: Callable[[], None] | None = None,
) -> Case:
    """A case whose build makes its bench (raising Unsupported when it cannot run here, and
    first, with `fits`, when it would not fit in memory) and adds what the bench learnt to
    the case's columns."""

    def build() -> Prepared:
        if fits is not None:
            fits()
        bench = make()
        params.update(bench.info)
        timeline = getattr(bench, "timeline", None)
        return Prepared(timed=bench.timed, more_records=timeline)

    # every case builds models: the previous case's reference cycles go first
    return Case(case_id=case_id, params=params, build=build, describe=describe, collect_first=True)


def run_scoped(
    ctx: Context,
    probe: str,
    params: Any,
    specs: Sequence[GroupSpec],
    cases: Callable[[Scope], list[Case]],
) -> None:
    """Every scope of `specs` in order, each with its cases, within the probe's budget."""
    run_cases(ctx, probe, make_scopes(ctx, specs), cases, Budget.of(params))


def synced_clock(ctx: Context) -> int:
    """The clock (ns) once the device has finished the work queued before it."""
    ctx.sync()
    return clock_ns()


def replay(ctx: Context, issue: Callable[[], Iterable[dist.Work | None]]) -> float:
    """Collectives alone: `issue()` starts them (async), then every one is waited for; us."""
    start = synced_clock(ctx)
    works = [w for w in issue() if w is not None]
    for work in works:
        work.wait()
    return (synced_clock(ctx) - start) / 1e3


def rounds(
    iters: int, one_round: Callable[[], dict[str, float]], main: str
) -> tuple[list[float], Series]:
    """`iters` rounds of A/B measurements taken back to back, so drift on a shared machine
    hits both sides alike: each round's `main` value is the iteration time, every other value
    becomes a per-iteration column."""
    times: list[float] = []
    series: Series = defaultdict(list)
    for _ in range(iters):
        values = one_round()
        times.append(values.pop(main))
        for key, value in values.items():
            series[key].append(value)
    return times, dict(series)


def run_weak_scaling(
    ctx: Context,
    probe: str,
    params: Any,
    job: tuple[int, int],
    names: Callable[[bool], Sequence[str]],
    columns: Callable[[str], dict[str, Any]],
    bench: Callable[[Scope, str], Bench],
    label: str = "",
    need: Callable[[Scope, str], int] | None = None,
    instead: Callable[[Scope, str, float], list[tuple[str, int]]] | None = None,
) -> None:
    """A study at every weak-scaling world size of a job of (num_nodes, gpus_per_node): one
    rank alone, each scope, the whole job (`params.scaling`: or the whole job only). Per
    scope, a case per name of `names(largest)` with the case's `columns(name)`, its bench
    `bench(scope, name)`, described as '<probe> <name><label> n=<ranks> (<scope>)'; with
    `need(scope, name)` (bytes a rank needs), a case that would not fit is skipped first,
    naming what would (`instead(scope, name, budget)`)."""
    specs = ddp_scopes(*job, params.scaling)

    def case(scope: Scope, name: str) -> Case:
        spec = scope.spec
        described = f"{probe} {name}{label} n={spec.world_size} ({spec.scope})"

        def fits() -> None:
            if need is not None:
                other = None if instead is None else lambda budget: instead(scope, name, budget)
                check_fits(ctx, scope, need(scope, name), other)

        return bench_case(name, columns(name), lambda: bench(scope, name), described, fits)

    def cases(scope: Scope) -> list[Case]:
        return [case(scope, name) for name in names(scope.spec == specs[-1])]

    run_scoped(ctx, probe, params, specs, cases)


def check_fits(
    ctx: Context,
    scope: Scope,
    need_bytes: int,
    instead: Callable[[float], list[tuple[str, int]]] | None = None,
) -> None:
    """Unsupported (a skip on every rank of the group, with the figures and what would fit
    instead) when the case needs more than HEADROOM x the free memory of the group's
    tightest rank; the ranks agree on that memory first, so all of them skip or none does."""
    free, total = device_memory(ctx.device)
    tightest = int(-agreed_max(ctx, -float(free), scope.group))
    budget = HEADROOM * tightest
    if need_bytes <= budget:
        return
    fits = instead(budget) if instead is not None else []
    named = "; ".join(f"{what} (about {format_size(need)})" for what, need in fits)
    raise Unsupported(
        f"does not fit: needs about {format_size(need_bytes)} a rank, "
        f"{format_size(tightest)} free on the tightest rank (of {format_size(total)})"
        + (f"; would fit: {named}" if named else ""),
        need_bytes=need_bytes,
        free_bytes=tightest,
        total_bytes=total,
        fits_instead=[[what, need] for what, need in fits],
    )
