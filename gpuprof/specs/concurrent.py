"""The concurrent probe: two collectives started at once on two process groups (two
communicators over every rank of the job, as a data-parallel group and an expert-parallel
group both spanning the nodes), each one's time beside the other against its time alone: the
contention a real training step sees when a MoE dispatch and a gradient all_reduce, or an
all_reduce and a sharded layer's all_gather, share links.

A pair is "a+b". The ops: all_reduce and all_gather (nccl-tests' sizes: the all_reduce's
buffer, the all_gather's output), all_to_all (equal splits of the size) and dispatch (a MoE
dispatch: all_to_all_single with the uneven splits `specs.routing`'s plan gives at the skew
`--concurrent-skew`, each rank's buffer about the size)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, csv, finite
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.moe import DTYPES
from gpuprof.units import bus_factor, parse_size_list

OPS = ("all_reduce", "all_gather", "all_to_all", "dispatch")
EXPERTS_PER_RANK, TOP_K = 2, 2  # the dispatch's routing: top-2 over 2 experts a rank


def pairs(text: str) -> tuple[str, ...]:
    """'all_reduce+dispatch,all_reduce+all_gather' -> the pairs, each two known ops."""
    out = csv(text)
    for pair in out:
        ops = pair.split("+")
        if len(ops) != 2 or any(op not in OPS for op in ops):
            raise ValueError(f"{pair!r} is not two of {', '.join(OPS)} joined by '+'")
    return out


def non_negative(text: str) -> float:
    """A Zipf exponent: at least 0."""
    value = finite(float(text))
    if value < 0:
        raise ValueError("must be at least 0")
    return value


@dataclass(frozen=True, kw_only=True)
class ConcurrentParams(ProbeParams):
    """Each pair at each size (bytes per rank of each collective), the dispatch routed at
    `skew`, tokens of `hidden` values of `dtype`."""

    pairs: tuple[str, ...] = ("all_reduce+dispatch", "all_reduce+all_gather")
    sizes: tuple[int, ...] = (1 << 20, 4 << 20)
    skew: float = 0.0
    hidden: int = 1024
    dtype: str = "float32"
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 100
    budget_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.pairs:
            raise UsageError("no concurrent pair given", f"pairs of {', '.join(OPS)}")
        pairs(",".join(self.pairs))  # raises on an unknown op (params from a plan, too)
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}", f"choose from {', '.join(DTYPES)}")
        if not self.sizes or min(self.sizes) < 1 or self.hidden < 1:
            raise UsageError("concurrent sizes and the hidden size must be positive")
        self._check_iterations()

    def ops(self, pair: str) -> tuple[str, str]:
        """The pair's two ops."""
        a, b = pair.split("+")
        return a, b

    def elements(self, op: str, size: int, ranks: int) -> int:
        """Elements of the op's buffer: the size in whole elements, a multiple of the rank
        count for the ops that split it (all_gather's output, all_to_all's chunks)."""
        count = max(1, size // DTYPES[self.dtype])
        if op in ("all_gather", "all_to_all"):
            count = max(ranks, count - count % ranks)
        return count

    def tokens(self, size: int) -> int:
        """The dispatch's tokens per rank: its buffer (tokens x top-k x hidden) about the
        size."""
        return max(1, size // (TOP_K * self.hidden * DTYPES[self.dtype]))


def suite_concurrent(suite: str, device: str) -> ConcurrentParams:
    """GPU: 64 MiB and 256 MiB (a DDP bucket's range and a large layer's, bandwidth-bound on
    every fabric), bf16 tokens of 4096; CPU: 1 and 4 MiB."""
    if device == "cuda":
        return ConcurrentParams(
            sizes=(64 << 20, 256 << 20), hidden=4096, dtype="bfloat16", budget_s=0.5
        )
    return ConcurrentParams()


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every pair at every size."""
    assert isinstance(params, ConcurrentParams)
    return len(params.pairs) * len(params.sizes)


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes each node's NIC sends in one round (each op alone, then both
    together), the ops taken as rings over every rank (a dispatch as an all_to_all)."""
    assert isinstance(params, ConcurrentParams)
    if num_nodes < 2:
        return [0.0] * count_cases(params, num_nodes, gpus_per_node)
    ranks = num_nodes * gpus_per_node
    out = []
    for pair in params.pairs:
        factors = [
            bus_factor("all_to_all" if op == "dispatch" else op, ranks) for op in params.ops(pair)
        ]
        for size in params.sizes:
            out.append(2.0 * gpus_per_node * size * sum(factors))
    return out


def _sizes(base: ProbeParams, opts: Mapping[str, Any]) -> dict[str, Any]:
    text = opts.get("concurrent_sizes")
    return {} if text is None else {"sizes": tuple(parse_size_list(text))}


_KEYS = ("pair", "size_bytes", "skew", "dtype", "world_size", "num_nodes")

SPEC = ProbeSpec(
    name="concurrent",
    help="Two collectives at once on two process groups (every rank in each): each one's "
    "time beside the other against alone, the fair share of one shared link beside it, and "
    "what running them together saves over one after the other. Pairs of all_reduce, "
    "all_gather, all_to_all and dispatch (a MoE dispatch, uneven splits).\n\nExample: "
    "gpuprof run concurrent --gpus 8 --concurrent-pairs all_reduce+dispatch "
    "--concurrent-sizes 64M,256M",
    params=ConcurrentParams,
    suite=suite_concurrent,
    options=(
        Option(
            flag="--concurrent-pairs",
            field="pairs",
            parse=pairs,
            help=f"concurrent: pairs of {', '.join(OPS)} joined by '+', e.g. "
            "all_reduce+dispatch,all_reduce+all_gather",
        ),
        Option(
            flag="--concurrent-sizes",
            help="concurrent: bytes per rank of each collective, e.g. 1M,64M",
        ),
        Option(
            flag="--concurrent-skew",
            field="skew",
            parse=non_negative,
            help="concurrent: the dispatch's routing skew (Zipf exponent; 0: equal splits "
            "but for the experts' remainders)",
        ),
    ),
    adjust=_sizes,
    count_cases=count_cases,
    link_bytes=link_bytes,
    case_overhead_s=0.2,
    rank_module="gpuprof.probes.concurrent",
    summarize="gpuprof.analysis.concurrent:summarize_run",
    columns=(
        ("pair", "pair"),
        ("size_bytes", "size"),
        ("a_alone_us", "A alone"),
        ("a_beside_us", "A beside"),
        ("a_slowdown", "A x"),
        ("b_alone_us", "B alone"),
        ("b_beside_us", "B beside"),
        ("b_slowdown", "B x"),
        ("a_fair_share", "A fair x"),
        ("saving_pct", "saved%"),
        ("nwrong", "#wrong"),
    ),
    section="gpuprof.reports.sections.concurrent:section",
    advice="gpuprof.advice.concurrent:findings",
    suites=("standard", "full"),
    metrics=(
        Metric(column="a_beside_us", better="lower", keys=_KEYS),
        Metric(column="b_beside_us", better="lower", keys=_KEYS),
    ),
    exports=(
        Export(
            name="concurrent_slowdown_ratio",
            help="A collective's time beside another on a second process group over its time "
            "alone (slowest rank, median): 1 is no contention.",
            column="a_slowdown",
            labels=(("pair", "pair"), ("size_bytes", "size_bytes")),
        ),
    ),
)
