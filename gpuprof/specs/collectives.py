"""The collectives probe: nccl-tests semantics (size = whole buffer, algbw, busbw factors),
out-of-place and in-place, every scope of the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import psutil

from gpuprof.errors import UsageError
from gpuprof.machine.groups import SCOPES, scope_groups
from gpuprof.params import ProbeParams, check_choices, csv
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.units import bus_factor, format_size, parse_size, parse_size_list, size_range

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "sendrecv",
)
DTYPES = ("float32", "bfloat16", "float16")
REDOPS = ("sum", "max", "min")
MODES = ("out_of_place", "in_place")
# ops that reduce: the dtype decides their arithmetic (and NCCL's kernels); the others move
# the same bytes whatever the type
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
# torch.distributed offers these only in place / only out of place
IN_PLACE_ONLY = ("all_reduce", "broadcast", "reduce")
OUT_OF_PLACE_ONLY = ("all_to_all", "sendrecv")


def modes_for(op: str, modes: tuple[str, ...]) -> list[bool]:
    """The in_place values measured for `op`: what was asked, within what torch offers."""
    if op in IN_PLACE_ONLY:
        return [True]
    if op in OUT_OF_PLACE_ONLY:
        return [False]
    return [mode == "in_place" for mode in modes]


def dtypes_for(op: str, dtypes: tuple[str, ...], reduce_dtypes_only: bool) -> tuple[str, ...]:
    """The dtypes measured for `op`: all of them, or with `reduce_dtypes_only` the first one
    for an op that only moves data."""
    return dtypes if op in REDUCING or not reduce_dtypes_only else dtypes[:1]


@dataclass(frozen=True, kw_only=True)
class CollectivesParams(ProbeParams):
    """What the collectives probe measures and how long it may spend on each case."""

    ops: tuple[str, ...] = OPS
    dtypes: tuple[str, ...] = ("float32",)
    sizes: tuple[int, ...] = tuple(size_range(1 << 10, 16 << 20, 4))
    modes: tuple[str, ...] = MODES
    redop: str = "sum"
    # dtypes beyond the first for the reducing ops only (a suite's choice; --dtypes names
    # the dtypes of every op)
    reduce_dtypes_only: bool = False
    scopes: tuple[str, ...] = SCOPES
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 1000
    budget_s: float = 0.1
    check: bool = True

    def __post_init__(self) -> None:
        check_choices("op", self.ops, OPS)
        check_choices("dtype", self.dtypes, DTYPES)
        check_choices("mode", self.modes, MODES)
        check_choices("scope", self.scopes, SCOPES)
        check_choices("reduce op", (self.redop,), REDOPS)
        if not self.sizes or min(self.sizes) <= 0:
            raise UsageError("sizes must be positive", "e.g. --sizes 1K,1M,64M")
        self._check_iterations("check --warmup, --min-iters and --max-iters")

    def check_job(self, num_nodes: int, gpus_per_node: int, device: str) -> None:
        """On CPU every rank of a node holds an input and an output buffer of the largest
        size in host memory (plus a copy to check against): refuse what cannot fit."""
        if device != "cpu":
            return

        need = 3 * max(self.sizes) * gpus_per_node
        have = psutil.virtual_memory().total
        if need > have:
            raise UsageError(
                f"the largest size {format_size(max(self.sizes))} needs about "
                f"{format_size(need)} of host memory for {gpus_per_node} CPU ranks; this node "
                f"has {format_size(have)}",
                "use a smaller --max-bytes",
            )


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Cases one after another: every scope's cases (its groups run at the same time)."""
    assert isinstance(params, CollectivesParams)
    per_scope = sum(
        len(modes_for(op, params.modes))
        * len(dtypes_for(op, params.dtypes, params.reduce_dtypes_only))
        for op in params.ops
    )
    per_scope *= len(params.sizes)
    return per_scope * len(scope_groups(num_nodes, gpus_per_node, params.scopes))


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes each node's NIC sends per iteration. A group spanning nodes is taken as
    a ring with each node's ranks adjacent, so it crosses each NIC once with the op's bus
    factor x S; concurrent groups (rails) add up on the NIC."""
    assert isinstance(params, CollectivesParams)
    out = []
    for spec in scope_groups(num_nodes, gpus_per_node, params.scopes):
        crossing = len(spec.members) if spec.num_nodes > 1 else 0
        for op in params.ops:
            per_size = [
                crossing * bus_factor(op, spec.world_size) * size
                for _ in modes_for(op, params.modes)
                for _ in dtypes_for(op, params.dtypes, params.reduce_dtypes_only)
                for size in params.sizes
            ]
            out.extend(per_size)
    return out


def quick_for_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The quick suite on more than one node, where every scope but intra waits on the network
    and a large size's minimum iterations over a slow link outlast the budget: one warmup, 3
    timed iterations at least, and sizes a factor 16 apart on GPU (1 KiB to 1 GiB) or 32 apart
    on CPU (1 KiB, 32 KiB, 1 MiB: gloo over TCP is bandwidth-bound from about 1 MiB)."""
    assert isinstance(params, CollectivesParams)
    if suite != "quick" or num_nodes == 1:
        return params
    if device == "cuda":
        sizes = size_range(1 << 10, max(params.sizes), 16)
    else:
        sizes = [1 << 10, 32 << 10, 1 << 20]
    return replace(params, sizes=tuple(sizes), warmup_iters=1, min_iters=3)


def suite_collectives(suite: str, device: str) -> CollectivesParams:
    """The collectives parameters of a suite; GPUs get larger sizes than CPU/gloo."""
    gpu = device == "cuda"
    if suite == "ci":  # past the latency floor on gloo, each op's own algorithm; one mode
        sizes = (1 << 20, 16 << 20, 256 << 20) if gpu else (64 << 10, 1 << 20, 4 << 20)
        return CollectivesParams(
            ops=("all_reduce", "all_gather", "reduce_scatter"),
            sizes=sizes,
            modes=("out_of_place",),
            budget_s=0.3,
            min_iters=10,
        )
    if suite == "quick":
        top = parse_size("1G" if gpu else "16M")
        return CollectivesParams(sizes=tuple(size_range(1 << 10, top, 4)), budget_s=0.1)
    if suite == "standard":
        # sized for a cluster's time (about 15 minutes on 2 x 8 GPUs in all): sizes a factor
        # 4 apart from 16 bytes (the curve between is smooth on a log axis), bfloat16 for the
        # ops whose arithmetic it changes
        top = parse_size("1G" if gpu else "64M")
        return CollectivesParams(
            sizes=tuple(size_range(16, top, 4)),
            dtypes=("float32", "bfloat16"),
            reduce_dtypes_only=True,
            budget_s=0.2,
        )
    top = parse_size("4G" if gpu else "256M")
    return CollectivesParams(
        sizes=tuple(size_range(8, top, 2)), dtypes=DTYPES, budget_s=1.0, warmup_iters=5
    )


def _ops(text: str) -> tuple[str, ...]:
    """--op: collectives; nccl-tests' -o (a reduction: sum, max, ...) is --redop here."""
    ops = OPS if text == "all" else csv(text)
    reductions = [op for op in ops if op in (*REDOPS, "prod", "avg")]
    if reductions:
        raise ValueError(
            f"--op names the collective here; nccl-tests' -o is the reduction: use --redop "
            f"{reductions[0]}"
        )
    return ops


# nccl-tests' -d names (float, half, bfloat16) for gpuprof's dtypes
NCCL_TESTS_DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16"}


def _dtypes(text: str) -> tuple[str, ...]:
    return tuple(NCCL_TESTS_DTYPES.get(name, name) for name in csv(text))


def _modes(text: str) -> tuple[str, ...]:
    return MODES if text == "both" else (text,)


def _sizes(base: ProbeParams, opts: Mapping[str, Any]) -> dict[str, Any]:
    """--sizes, or nccl-tests' -b/-e/-f range (missing ends from the suite's sizes); --dtypes
    for every op."""
    assert isinstance(base, CollectivesParams)
    ranged = any(opts.get(k) is not None for k in ("min_bytes", "max_bytes", "factor"))
    if opts.get("sizes") is not None and ranged:
        raise UsageError("--sizes cannot be combined with --min-bytes/--max-bytes/--factor")
    # --dtypes names the dtypes of every op
    dtypes = {"reduce_dtypes_only": False} if opts.get("dtypes") is not None else {}
    if opts.get("sizes") is not None:
        return {"sizes": tuple(parse_size_list(opts["sizes"])), **dtypes}
    if not ranged:
        return dtypes
    low = parse_size(opts["min_bytes"]) if opts.get("min_bytes") is not None else min(base.sizes)
    high = parse_size(opts["max_bytes"]) if opts.get("max_bytes") is not None else max(base.sizes)
    factor = opts.get("factor")
    sizes = tuple(size_range(low, high, 2.0 if factor is None else float(factor)))
    return {"sizes": sizes, **dtypes}


_KEYS = ("op", "dtype", "redop", "size_bytes", "in_place", "scope", "group", "world_size")

_EXPORT_LABELS = (
    ("op", "op"),
    ("dtype", "dtype"),
    ("size_bytes", "size_bytes"),
    ("in_place", "in_place"),
    ("scope", "scope"),
    ("ranks", "world_size"),
    ("group", "group"),
)

SPEC = ProbeSpec(
    name="collectives",
    help="Collectives with nccl-tests semantics.\n\n"
    "Example: gpuprof run collectives --gpus 2 --op all_reduce -b 1K -e 64M -f 4",
    params=CollectivesParams,
    suite=suite_collectives,
    options=(
        Option(
            flag="--op",
            dest="ops",
            field="ops",
            parse=_ops,
            help=f"ops, comma-separated, or 'all': {','.join(OPS)}",
        ),
        Option(
            flag="--dtype",
            short="-d",
            dest="dtypes",
            field="dtypes",
            parse=_dtypes,
            help="dtypes: float32,bfloat16,float16 (or nccl-tests' float, half)",
        ),
        Option(flag="--min-bytes", short="-b", help="smallest size, e.g. 8 or 1K"),
        Option(flag="--max-bytes", short="-e", help="largest size, e.g. 1G"),
        Option(flag="--factor", short="-f", type=float, help="size multiplication factor (2)"),
        Option(flag="--sizes", help="explicit size list, e.g. 1K,1M,64M"),
        Option(flag="--redop", field="redop", help="reduce op: sum, max or min"),
        Option(
            flag="--mode",
            dest="modes",
            field="modes",
            parse=_modes,
            type=("both", "in_place", "out_of_place"),
            help="in-place, out-of-place or both where the op offers both",
        ),
        Option(flag="--scopes", field="scopes", parse=csv, help="scopes: intra,global"),
        Option(
            flag="--check", field="check", boolean=True, help="count wrong elements (default on)"
        ),
    ),
    adjust=_sizes,
    count_cases=count_cases,
    case_overhead_s=0.04,
    link_bytes=link_bytes,
    for_job=quick_for_job,
    rank_module="gpuprof.probes.collectives",
    summarize="gpuprof.analysis.bandwidth:summarize_run",
    columns=(
        ("scope", "scope"),
        ("world_size", "n"),
        ("group", "group"),
        ("op", "op"),
        ("size_bytes", "size"),
        ("dtype", "type"),
        ("redop", "redop"),
        ("in_place", "place"),
        ("time_us", "time_us"),
        ("time_us_p99", "p99_us"),
        ("algbw_gbps", "algbw_GB/s"),
        ("busbw_gbps", "busbw_GB/s"),
        ("pct_of_peak", "%link"),
        ("nwrong", "#wrong"),
    ),
    section="gpuprof.reports.sections.collectives:section",
    advice="gpuprof.advice.collectives:findings",
    # busbw alone: time_us is the same number inverted (its verdict is always busbw's)
    metrics=(Metric(column="busbw_gbps", better="higher", keys=_KEYS),),
    ci_devices=("cpu",),  # one GPU has no collective to measure; two gloo ranks on CPU do
    nccl_tests="gpuprof.reports.nccl_tests:nccl_tests_text",
    exports=(
        Export(
            name="collective_busbw_bytes_per_second",
            help="Collective bus bandwidth (nccl-tests busbw), per op, size and scope.",
            column="busbw_gbps",
            scale=1e9,
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="collective_time_seconds",
            help="Median time of one collective, per op, size and scope.",
            column="time_us",
            divisor=1e6,
            labels=_EXPORT_LABELS,
        ),
    ),
)
