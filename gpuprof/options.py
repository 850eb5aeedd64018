"""Click option groups defined once, used by `gpuprof sweep/run` and by the rank-side mains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from gpuprof.errors import UsageError
from gpuprof.plan import (
    COMPUTE_DTYPES,
    MEMORY_KINDS,
    OPS,
    P2P_MODES,
    PIPELINE_SCHEDULES,
    CeilingParams,
    CollectivesParams,
    DDPParams,
    P2PParams,
    PipelineParams,
)
from gpuprof.units import parse_count, parse_size, parse_size_list, size_range

F = TypeVar("F", bound=Callable[..., Any])


def stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def collectives_options(func: F) -> F:
    """Options of the collectives probe (nccl-tests spellings -b/-e/-f/-d/-o where they exist)."""
    return stack(
        click.option("--op", "-o", "ops", help=f"ops, comma-separated, or 'all': {','.join(OPS)}"),
        click.option("--dtype", "-d", "dtypes", help="dtypes: float32,bfloat16,float16"),
        click.option("--min-bytes", "-b", help="smallest size, e.g. 8 or 1K"),
        click.option("--max-bytes", "-e", help="largest size, e.g. 1G"),
        click.option("--factor", "-f", type=float, help="size multiplication factor (2)"),
        click.option("--sizes", help="explicit size list, e.g. 1K,1M,64M"),
        click.option("--redop", help="reduce op: sum, max or min"),
        click.option(
            "--mode",
            "modes",
            type=click.Choice(["both", "in_place", "out_of_place"]),
            help="in-place, out-of-place or both where the op offers both",
        ),
        click.option("--scopes", help="scopes: intra,global"),
        click.option("--check/--no-check", default=None, help="count wrong elements (default on)"),
    )(func)


def _iteration_changes(opts: dict[str, Any]) -> dict[str, Any]:
    """The iteration options the user gave, as parameter fields (shared by every probe)."""
    changes = {
        key: opts[key]
        for key in ("warmup_iters", "min_iters", "max_iters")
        if opts.get(key) is not None
    }
    if opts.get("budget_ms") is not None:
        changes["budget_s"] = opts["budget_ms"] / 1e3
    return changes


def _csv(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def collectives_params(base: CollectivesParams, opts: dict[str, Any]) -> CollectivesParams:
    """`base` (a suite's parameters) overridden by the options the user gave."""
    changes: dict[str, Any] = {}
    if opts.get("ops"):
        changes["ops"] = OPS if opts["ops"] == "all" else _csv(opts["ops"])
    for key in ("dtypes", "scopes"):
        if opts.get(key):
            changes[key] = _csv(opts[key])
    if opts.get("modes"):
        both = ("out_of_place", "in_place")
        changes["modes"] = both if opts["modes"] == "both" else (opts["modes"],)
    for key in ("redop", "check"):
        if opts.get(key) is not None:
            changes[key] = opts[key]
    changes.update(_iteration_changes(opts))
    sizes = _sizes(base, opts)
    if sizes is not None:
        changes["sizes"] = tuple(sizes)
    return replace(base, **changes)


def _sizes(base: CollectivesParams, opts: dict[str, Any]) -> list[int] | None:
    ranged = any(opts.get(k) is not None for k in ("min_bytes", "max_bytes", "factor"))
    if opts.get("sizes") and ranged:
        raise UsageError("--sizes cannot be combined with --min-bytes/--max-bytes/--factor")
    if opts.get("sizes"):
        return parse_size_list(opts["sizes"])
    if not ranged:
        return None
    low = parse_size(opts["min_bytes"]) if opts.get("min_bytes") else min(base.sizes)
    high = parse_size(opts["max_bytes"]) if opts.get("max_bytes") else max(base.sizes)
    return size_range(low, high, opts.get("factor") or 2.0)


COLLECTIVE_KEYS = (
    "ops",
    "dtypes",
    "min_bytes",
    "max_bytes",
    "factor",
    "sizes",
    "redop",
    "modes",
    "scopes",
    "warmup_iters",
    "min_iters",
    "max_iters",
    "budget_ms",
    "check",
)


def iteration_options(func: F) -> F:
    """How long each case may run (shared by every probe)."""
    return stack(
        click.option("--warmup", "-w", "warmup_iters", type=int, help="warmup iterations"),
        click.option("--min-iters", type=int, help="fewest timed iterations per case"),
        click.option("--max-iters", type=int, help="most timed iterations per case"),
        click.option("--budget-ms", type=float, help="time budget per case (iterations adapt)"),
    )(func)


def ceiling_options(func: F) -> F:
    """Options of the memory and compute probes."""
    return stack(
        click.option("--copy-bytes", help="memory: bytes per copy, e.g. 1G"),
        click.option("--matmul-n", type=int, help="compute: matrix size n (n x n x n)"),
        click.option("--kinds", help=f"memory copy kinds: {','.join(MEMORY_KINDS)}"),
        click.option(
            "--matmul-dtypes", "matmul_dtypes", help=f"compute dtypes: {','.join(COMPUTE_DTYPES)}"
        ),
    )(func)


CEILING_KEYS = (
    "copy_bytes",
    "matmul_n",
    "kinds",
    "matmul_dtypes",
    "warmup_iters",
    "min_iters",
    "max_iters",
    "budget_ms",
)


def ceiling_params(base: CeilingParams, opts: dict[str, Any], probe: str) -> CeilingParams:
    """A suite's memory or compute parameters overridden by the options given."""
    changes: dict[str, Any] = {}
    if opts.get("copy_bytes") and probe == "memory":
        changes["size_bytes"] = parse_size(opts["copy_bytes"])
    if opts.get("matmul_n") is not None and probe == "compute":
        changes["n"] = opts["matmul_n"]
    if opts.get("kinds"):
        changes["kinds"] = _csv(opts["kinds"])
    if opts.get("matmul_dtypes"):
        changes["dtypes"] = _csv(opts["matmul_dtypes"])
    changes.update(_iteration_changes(opts))
    return replace(base, **changes)


def p2p_options(func: F) -> F:
    """Options of the p2p probe."""
    return stack(
        click.option("--p2p-bytes", help="p2p: bandwidth message size, e.g. 64M"),
        click.option("--p2p-modes", help=f"p2p modes: {','.join(P2P_MODES)}"),
    )(func)


P2P_KEYS = ("p2p_bytes", "p2p_modes")


def p2p_params(base: P2PParams, opts: dict[str, Any]) -> P2PParams:
    """A suite's p2p parameters overridden by the options given."""
    changes: dict[str, Any] = {}
    if opts.get("p2p_bytes"):
        changes["size_bytes"] = parse_size(opts["p2p_bytes"])
    if opts.get("p2p_modes"):
        changes["modes"] = _csv(opts["p2p_modes"])
    changes.update(_iteration_changes(opts))
    return replace(base, **changes)


def ddp_options(func: F) -> F:
    """Options of the DDP probe."""
    return stack(
        click.option("--model-params", help="ddp: synthetic model size, e.g. 10M, 350M, 1.3B"),
        click.option("--hidden", type=int, help="ddp: hidden size (multiple of 64)"),
        click.option("--layers", type=int, help="ddp: transformer blocks"),
        click.option("--batch", type=int, help="ddp: sequences per rank per micro-batch"),
        click.option("--seq", type=int, help="ddp: tokens per sequence"),
        click.option(
            "--ddp-variants",
            help="ddp: variants, the first also at every world size: default, bucket=MB, "
            "grad_view, static_graph, hook=allreduce|fp16|bf16, accum=K, amp (join with +)",
        ),
        click.option(
            "--scaling/--no-scaling", default=None, help="ddp: weak scaling over world sizes"
        ),
    )(func)


DDP_KEYS = ("model_params", "hidden", "layers", "batch", "seq", "ddp_variants", "scaling")


def ddp_params(base: DDPParams, opts: dict[str, Any]) -> DDPParams:
    """A suite's DDP parameters overridden by the options given."""
    changes: dict[str, Any] = {}
    if opts.get("model_params"):
        changes["model_params"] = parse_count(opts["model_params"])
    for key in ("hidden", "layers", "batch", "seq", "scaling"):
        if opts.get(key) is not None:
            changes[key] = opts[key]
    if opts.get("ddp_variants"):
        changes["variants"] = _csv(opts["ddp_variants"])
    changes.update(_iteration_changes(opts))
    return replace(base, **changes)


def pipeline_options(func: F) -> F:
    """Options of the pipeline probe."""
    return stack(
        click.option("--schedules", help=f"pipeline schedules: {','.join(PIPELINE_SCHEDULES)}"),
        click.option("--micro-batches", help="pipeline: micro-batch counts, e.g. 4,8,16"),
        click.option("--pp-hidden", type=int, help="pipeline: layer width"),
        click.option("--stage-layers", type=int, help="pipeline: Linear+GELU layers per stage"),
        click.option("--chunks", type=int, help="pipeline: chunks per rank (interleaved, V)"),
        click.option("--mb-rows", type=int, help="pipeline: rows per micro-batch"),
        click.option("--stage-weights", help="pipeline: compute per stage, e.g. 1,1,2,1"),
    )(func)


PIPELINE_KEYS = (
    "schedules",
    "micro_batches",
    "pp_hidden",
    "stage_layers",
    "chunks",
    "mb_rows",
    "stage_weights",
)


def _numbers(text: str, kind: type, option: str) -> tuple[Any, ...]:
    try:
        return tuple(kind(part) for part in _csv(text))
    except ValueError:
        raise UsageError(f"invalid {option} {text!r}", "give comma-separated numbers") from None


def pipeline_params(base: PipelineParams, opts: dict[str, Any]) -> PipelineParams:
    """A suite's pipeline parameters overridden by the options given."""
    changes: dict[str, Any] = {}
    if opts.get("schedules"):
        changes["schedules"] = _csv(opts["schedules"])
    if opts.get("micro_batches"):
        changes["micro_batches"] = _numbers(opts["micro_batches"], int, "--micro-batches")
    if opts.get("stage_weights"):
        changes["stage_weights"] = _numbers(opts["stage_weights"], float, "--stage-weights")
    for key, field in (
        ("pp_hidden", "hidden"),
        ("stage_layers", "stage_layers"),
        ("chunks", "chunks"),
        ("mb_rows", "mb_rows"),
    ):
        if opts.get(key) is not None:
            changes[field] = opts[key]
    changes.update(_iteration_changes(opts))
    return replace(base, **changes)


def suite_params(suite: str, device: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Every probe's parameters for a suite and device, with the user's options applied."""
    from gpuprof.plan import (
        suite_collectives,
        suite_compute,
        suite_ddp,
        suite_memory,
        suite_p2p,
        suite_pipeline,
    )

    coll = {k: opts.get(k) for k in COLLECTIVE_KEYS}
    ceil = {k: opts.get(k) for k in CEILING_KEYS}
    return {
        "collectives": collectives_params(suite_collectives(suite, device), coll),
        "p2p": p2p_params(suite_p2p(suite, device), opts),
        "memory": ceiling_params(suite_memory(suite, device), ceil, "memory"),
        "compute": ceiling_params(suite_compute(suite, device), ceil, "compute"),
        "ddp": ddp_params(suite_ddp(suite, device), opts),
        "pipeline": pipeline_params(suite_pipeline(suite, device), opts),
    }


def probe_options(probe: str) -> Callable[[F], F]:
    """The options of one probe, iteration options included."""
    own = {
        "collectives": collectives_options,
        "p2p": p2p_options,
        "ddp": ddp_options,
        "pipeline": pipeline_options,
    }.get(probe, ceiling_options)
    return stack(own, iteration_options)


def all_probe_options(func: F) -> F:
    """Every probe's options (for `gpuprof sweep`)."""
    return stack(
        collectives_options,
        p2p_options,
        ceiling_options,
        ddp_options,
        pipeline_options,
        iteration_options,
    )(func)


def pop_probe_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove every probe option from a command's kwargs."""
    keys = (*COLLECTIVE_KEYS, *P2P_KEYS, *CEILING_KEYS, *DDP_KEYS, *PIPELINE_KEYS)
    return {key: kwargs.pop(key) for key in keys if key in kwargs}
