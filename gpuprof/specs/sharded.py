"""The sharded data-parallel probe: DDP, ZeRO-1 and FSDP (ZeRO-3, with and without resharding
after forward, and with bf16 mixed precision) on the DDP probe's synthetic transformer, each
step broken down, its traffic and memory per rank against theory, with weak scaling.

The theory (per rank, per step; P parameters, n ranks; docs/methodology.md):

- sent bytes, counted as a ring does (an all_reduce of S bytes sends 2 (n-1)/n S per rank, an
  all_gather, reduce_scatter or broadcast (n-1)/n S): DDP 2 (n-1)/n x 4P (fp32 gradients);
  ZeRO-1 the same plus (n-1)/n x 4P (each rank broadcasts the parameters it updated); FSDP
  with resharding 3 (n-1)/n x 4P (parameters gathered for forward and again for backward,
  gradients reduce-scattered), without 2 (n-1)/n x 4P; FSDP bf16 (n-1)/n x (2 + 2 + 4) P
  (bf16 gathers, fp32 reduction).
- memory held between steps (fp32 parameters, gradients and AdamW's two moments: 16 bytes a
  parameter): DDP 16P; ZeRO-1 8P + 8P/n; FSDP 16P/n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuprof.params import ProbeParams, check_choices, csv
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.ddp import (
    MODEL_OPTIONS,
    ModelParams,
    activation_bytes,
    block_params,
    ddp_scopes,
    model_size,
)

# the strategy that shards nothing is the DDP baseline (spelled here once: the registry's rule
# keeps a probe's quoted name to its own modules, and this is a strategy, not the probe)
DDP, ZERO1, FSDP = "ddp", "zero1", "fsdp"
FSDP_NORESHARD, FSDP_BF16 = "fsdp_noreshard", "fsdp_bf16"
STRATEGIES = (DDP, ZERO1, FSDP, FSDP_NORESHARD, FSDP_BF16)
FSDP_STRATEGIES = (FSDP, FSDP_NORESHARD, FSDP_BF16)

# collective -> sent bytes per rank for S bytes on n ranks, as a ring moves them
RING_SENT = {
    "all_reduce": lambda s, n: 2 * (n - 1) / n * s,
    "all_gather": lambda s, n: (n - 1) / n * s,
    "reduce_scatter": lambda s, n: (n - 1) / n * s,
    "broadcast": lambda s, n: (n - 1) / n * s,
}


def sent_bytes(op: str, size: float, n: int) -> float:
    """Bytes one rank sends for a collective of `size` bytes on `n` ranks (ring counting:
    all_gather counts its output, reduce_scatter its input)."""
    return float(RING_SENT[op](size, n)) if n > 1 else 0.0


def theory_sent(strategy: str, n: int, num_params: int) -> float:
    """Bytes one rank sends per step, by the strategy's algorithm."""
    share = (n - 1) / n if n > 1 else 0.0
    p = float(num_params)
    return (
        share
        * {
            DDP: 2 * 4 * p,
            ZERO1: 3 * 4 * p,
            FSDP: 3 * 4 * p,
            FSDP_NORESHARD: 2 * 4 * p,
            FSDP_BF16: (2 + 2 + 4) * p,
        }[strategy]
    )


def theory_memory(strategy: str, n: int, num_params: int) -> float:
    """Bytes of parameters, gradients and AdamW state one rank holds between steps."""
    p = float(num_params)
    if strategy == DDP:
        return 16 * p
    if strategy == ZERO1:
        return 8 * p + 8 * p / n
    return 16 * p / n


def sharded_case_bytes(
    params: ModelParams, strategy: str, n: int, scores: bool, checkpointed: bool = False
) -> int:
    """Memory one rank needs for a case: what the strategy holds between steps
    (`theory_memory`), FSDP's gathered parameters (one block while resharding, all of them
    without), the communication-free twin (the full model's fp32 parameters and gradients,
    and AdamW over what this rank's optimizer holds), the replayed collectives' buffers (one
    per distinct shape: a block's worth) and one micro-batch's activations."""
    p = model_size(params)
    block = 4 * block_params(params.shape[0])
    held = theory_memory(strategy, n, p)
    gathered = 0 if strategy in (DDP, ZERO1) else block if strategy != FSDP_NORESHARD else 4 * p
    shard = p if strategy == DDP else p / n
    twin = 8 * p + 16 * shard
    replay = {DDP: 4 * p, ZERO1: 4 * p + block}.get(strategy, 2 * block)
    acts = activation_bytes(params, scores, checkpointed=checkpointed)
    return int(held + gathered + twin + replay + acts)


def what_fits(
    params: ModelParams,
    n: int,
    scores: bool,
    budget: float,
    strategy: str | None = None,
    own: Callable[[ModelParams, bool], int] | None = None,
) -> list[tuple[str, int]]:
    """What would fit in `budget` bytes a rank when a case does not, with the bytes each
    needs: the sharding strategies other than `strategy` (None: the DDP probe's case, plain
    DDP), and for the case itself (`own(params, checkpointed)`, default this module's
    estimate of `strategy`) the largest smaller batch per rank and activation checkpointing.
    Empty when nothing does."""
    current = strategy or DDP

    def size(model: ModelParams, checkpointed: bool = False) -> int:
        if own is not None:
            return own(model, checkpointed)
        return sharded_case_bytes(model, current, n, scores, checkpointed)

    found = [
        (other, need)
        for other in STRATEGIES
        if other != current and (need := sharded_case_bytes(params, other, n, scores)) <= budget
    ]
    for batch in range(params.batch - 1, 0, -1):
        if (need := size(replace(params, batch=batch))) <= budget:
            found.append((f"--batch {batch}", need))
            break
    if (need := size(params, checkpointed=True)) <= budget:
        found.append(("activation checkpointing", need))
    return found


@dataclass(frozen=True, kw_only=True)
class ShardedParams(ModelParams):
    """The same synthetic transformer and batch under each strategy, at every world size."""

    strategies: tuple[str, ...] = (DDP, ZERO1, FSDP)
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        check_choices("strategy", self.strategies, STRATEGIES)
        self._check_model()


def suite_sharded(suite: str, device: str) -> ShardedParams:
    """GPU: 125M-1.3B parameters, every strategy; CPU: a few million parameters, the three
    strategies that differ most in the quick suite."""
    if device == "cuda":
        sizes = {"quick": 125_000_000, "standard": 350_000_000, "full": 1_300_000_000}
        return ShardedParams(
            model_params=sizes.get(suite, 125_000_000),
            batch=8,
            seq=512,
            strategies=STRATEGIES,
            budget_s=2.0 if suite in ("quick", "ci") else 5.0,
        )
    if suite in ("quick", "ci"):
        return ShardedParams(model_params=2_000_000, budget_s=0.5, min_iters=3, warmup_iters=1)
    size = {"standard": 8_000_000, "full": 25_000_000}[suite]
    return ShardedParams(model_params=size, strategies=STRATEGIES, budget_s=2.0)


def quick_for_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The quick suite on more than one node, where every case at the job's size crosses the
    network: the unsharded baseline and FSDP only."""
    assert isinstance(params, ShardedParams)
    if suite != "quick" or num_nodes == 1:
        return params
    keep = tuple(s for s in params.strategies if s in (DDP, FSDP)) or params.strategies[:1]
    return replace(params, strategies=keep)


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every strategy at every weak-scaling world size."""
    assert isinstance(params, ShardedParams)
    scopes = ddp_scopes(num_nodes, gpus_per_node, params.scaling)
    return len(scopes) * len(params.strategies)


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes each node's NIC sends per round where the group spans nodes (the step
    and its communication replayed alone: twice the theory)."""
    assert isinstance(params, ShardedParams)
    out = []
    for spec in ddp_scopes(num_nodes, gpus_per_node, params.scaling):
        crossing = len(spec.members) if spec.num_nodes > 1 else 0
        for strategy in params.strategies:
            per_rank = theory_sent(strategy, spec.world_size, params.model_params)
            out.append(crossing * 2 * per_rank)
    return out


_KEYS = ("scope", "world_size", "group", "case_id")

_EXPORT_LABELS = (("strategy", "case_id"), ("scope", "scope"), ("ranks", "world_size"))

SPEC = ProbeSpec(
    name="sharded",
    help="DDP, ZeRO-1 and FSDP (resharding or not, bf16 mixed precision) on one synthetic "
    "transformer: step breakdown (compute by a communication-free twin, exposed communication "
    "by difference), bytes sent and memory per rank against theory, samples/s and weak "
    "scaling per world size."
    "\n\nExample: gpuprof run sharded --gpus 8 --model-params 1.3B --strategies "
    "ddp,zero1,fsdp,fsdp_noreshard",
    params=ShardedParams,
    suite=suite_sharded,
    options=(
        *MODEL_OPTIONS,
        Option(
            flag="--strategies",
            field="strategies",
            parse=csv,
            help=f"sharded: data-parallel strategies: {','.join(STRATEGIES)}",
        ),
    ),
    count_cases=count_cases,
    link_bytes=link_bytes,
    for_job=quick_for_job,
    case_overhead_s=1.5,  # building the model, its twin, two untimed steps
    rank_module="gpuprof.probes.sharded",
    summarize="gpuprof.analysis.sharded:summarize_run",
    columns=(
        ("scope", "scope"),
        ("world_size", "n"),
        ("group", "group"),
        ("case_id", "strategy"),
        ("step_us", "step_us"),
        ("forward_us", "fwd_us"),
        ("backward_us", "bwd_us"),
        ("optimizer_us", "optim_us"),
        ("exposed_comm_us", "exposed_us"),
        ("sum_pct", "sum%"),
        ("comm_only_us", "comm_only_us"),
        ("hidden_pct", "hidden%"),
        ("sent_bytes", "sent"),
        ("sent_ratio", "/theory"),
        ("memory_bytes", "held"),
        ("memory_ratio", "/theory"),
        ("samples_per_s", "samples/s"),
        ("efficiency", "eff"),
    ),
    section="gpuprof.reports.sections.sharded:section",
    advice="gpuprof.advice.sharded:findings",
    suites=("standard", "full"),  # a study beyond the quick suite's first look (or named)
    metrics=(Metric(column="samples_per_s", better="higher", keys=_KEYS),),
    exports=(
        Export(
            name="sharded_step_seconds",
            help="Sharded data-parallel training step per strategy (slowest rank, median).",
            column="step_us",
            divisor=1e6,
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="sharded_memory_held_bytes",
            help="Parameters, gradients and optimizer state one rank holds, per strategy.",
            column="memory_bytes",
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="sharded_sent_bytes",
            help="Bytes one rank's collectives send in one step, per strategy.",
            column="sent_bytes",
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="sharded_scaling_efficiency_ratio",
            help="Weak-scaling efficiency of a strategy: samples/s(n) / (n x samples/s(1)).",
            column="efficiency",
            labels=_EXPORT_LABELS,
        ),
    ),
)
