"""The tensor-parallel probe: a transformer's MLP and attention split Megatron-style over a
group (`parallelize_module`: the first linear layer column-wise, the second row-wise), per
layer and world size: compute, the activation all_reduces, their bytes against theory, and
whether the link carries them in the compute time.

Theory (docs/methodology.md): a layer split this way all-reduces its output activation
(tokens x hidden) once in forward and its input gradient once in backward; per rank a ring
sends 2 (n-1)/n x the activation's bytes for each, so 4 (n-1)/n x tokens x hidden x 4 bytes
per layer and step (fp32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices, csv, positive_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.ddp import ddp_scopes

LAYERS = ("mlp", "attention")
HEAD = 64  # the width of an attention head


def activation_bytes(tokens: int, hidden: int, dtype_bytes: int = 4) -> float:
    """Bytes of one activation (tokens x hidden)."""
    return float(tokens * hidden * dtype_bytes)


def theory_sent(n: int, tokens: int, hidden: int) -> float:
    """Bytes one rank sends per layer for forward and backward: two all_reduces of the
    activation, 2 (n-1)/n of it each."""
    return 2 * 2 * (n - 1) / n * activation_bytes(tokens, hidden) if n > 1 else 0.0


@dataclass(frozen=True, kw_only=True)
class TPParams(ProbeParams):
    """Each layer kind of width `hidden` on `batch` x `seq` tokens, split over every world
    size (the same tokens on every rank of the group: tensor parallelism splits the layer)."""

    hidden: int = 512
    layers: tuple[str, ...] = LAYERS
    batch: int = 4
    seq: int = 128
    scaling: bool = True
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 100
    budget_s: float = 0.5

    def __post_init__(self) -> None:
        check_choices("tensor-parallel layer", self.layers, LAYERS)
        if self.hidden < 64 or self.hidden % 64:
            raise UsageError("--tp-hidden must be a positive multiple of 64 (64 per head)")
        if min(self.batch, self.seq) < 1:
            raise UsageError("--tp-batch and --tp-seq must be positive")
        self._check_iterations()

    @property
    def tokens(self) -> int:
        """Tokens per step."""
        return self.batch * self.seq

    def check_job(self, num_nodes: int, gpus_per_node: int, device: str) -> None:
        """Attention splits whole heads: a group size that does not divide them skips that
        case (with the reason); none at all is a mistake in the options."""
        heads = self.hidden // HEAD
        sizes = [n for n in group_sizes(num_nodes, gpus_per_node, self.scaling) if n > 1]
        if "attention" in self.layers and sizes and all(heads % n for n in sizes):
            raise UsageError(
                f"attention splits whole heads: {heads} heads (--tp-hidden {self.hidden} / "
                f"{HEAD}) do not divide over {' or '.join(map(str, sizes))} ranks",
                "choose --tp-hidden as 64 x a multiple of the group sizes, or --tp-layers mlp",
            )


def group_sizes(num_nodes: int, gpus_per_node: int, scaling: bool) -> list[int]:
    """The world sizes a job splits the layers over, smallest first."""
    return sorted({s.world_size for s in ddp_scopes(num_nodes, gpus_per_node, scaling)})


def suite_tp(suite: str, device: str) -> TPParams:
    """GPU: Llama-sized layers (4096, 8192 wide), 8 x 2048 tokens; CPU: 512 wide, 512 tokens."""
    if device == "cuda":
        hidden = {"quick": 4096, "standard": 4096, "full": 8192}.get(suite, 4096)
        return TPParams(hidden=hidden, batch=8, seq=2048, budget_s=1.0 if suite == "quick" else 3.0)
    if suite in ("quick", "ci"):
        return TPParams(budget_s=0.3, min_iters=3, warmup_iters=1)
    return TPParams(hidden=1024 if suite == "full" else 512, budget_s=1.0)


def fit_to_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The suite's layers fitted to the job: the attention layer as wide as it must be for its
    heads to split over every group size (512 wide on CPU is 8 heads: 16 ranks need 16, so
    1024 there; 3 ranks need 24, so 1536); the quick suite on more than one node measures the
    MLP only."""
    assert isinstance(params, TPParams)
    if suite == "quick" and num_nodes > 1:
        params = replace(params, layers=params.layers[:1])
    if "attention" in params.layers:
        heads = params.hidden // HEAD
        need = math.lcm(heads, *group_sizes(num_nodes, gpus_per_node, params.scaling))
        params = replace(params, hidden=HEAD * need)
    return params


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every layer kind at every world size."""
    assert isinstance(params, TPParams)
    return len(ddp_scopes(num_nodes, gpus_per_node, params.scaling)) * len(params.layers)


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes each node's NIC sends per round where the group spans nodes (the layer's
    all_reduces, then the same alone: twice the theory)."""
    assert isinstance(params, TPParams)
    out = []
    for spec in ddp_scopes(num_nodes, gpus_per_node, params.scaling):
        crossing = len(spec.members) if spec.num_nodes > 1 else 0
        per_rank = theory_sent(spec.world_size, params.tokens, params.hidden)
        out += [crossing * 2 * per_rank] * len(params.layers)
    return out


_KEYS = ("scope", "world_size", "group", "case_id")

_EXPORT_LABELS = (("layer", "case_id"), ("scope", "scope"), ("ranks", "world_size"))

SPEC = ProbeSpec(
    name="tp",
    help="Tensor parallelism (Megatron-style, parallelize_module): an MLP and an attention "
    "layer split column-/row-wise over every world size: time per layer for compute and for "
    "the activation all_reduces, their bytes against theory, strong-scaling efficiency."
    "\n\nExample: gpuprof run tp --gpus 8 --tp-hidden 8192 --tp-batch 8 --tp-seq 2048",
    params=TPParams,
    suite=suite_tp,
    options=(
        Option(
            flag="--tp-hidden",
            field="hidden",
            type=int,
            parse=positive_int,
            help="tp: layer width (a multiple of 64: 64 per attention head)",
        ),
        Option(
            flag="--tp-layers",
            field="layers",
            parse=csv,
            help=f"tp: layer kinds: {','.join(LAYERS)}",
        ),
        Option(
            flag="--tp-batch",
            field="batch",
            type=int,
            parse=positive_int,
            help="tp: sequences per step",
        ),
        Option(
            flag="--tp-seq",
            field="seq",
            type=int,
            parse=positive_int,
            help="tp: tokens per sequence",
        ),
    ),
    count_cases=count_cases,
    link_bytes=link_bytes,
    for_job=fit_to_job,
    case_overhead_s=0.5,
    rank_module="gpuprof.probes.tp",
    summarize="gpuprof.analysis.tp:summarize_run",
    columns=(
        ("scope", "scope"),
        ("world_size", "n"),
        ("group", "group"),
        ("case_id", "layer"),
        ("layer_us", "layer_us"),
        ("compute_us", "compute_us"),
        ("exposed_comm_us", "exposed_us"),
        ("comm_only_us", "comm_only_us"),
        ("comm_vs_compute", "comm/compute"),
        ("sent_bytes", "sent"),
        ("sent_ratio", "/theory"),
        ("speedup", "speedup"),
        ("efficiency", "eff"),
    ),
    section="gpuprof.reports.sections.tp:section",
    advice="gpuprof.advice.tp:findings",
    suites=("standard", "full"),  # a study beyond the quick suite's first look (or named)
    metrics=(Metric(column="layer_us", better="lower", keys=_KEYS),),
    exports=(
        Export(
            name="tp_layer_seconds",
            help="Tensor-parallel layer, forward + backward (slowest rank, median).",
            column="layer_us",
            divisor=1e6,
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="tp_allreduce_seconds",
            help="The tensor-parallel layer's activation all_reduces alone, back to back.",
            column="comm_only_us",
            divisor=1e6,
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="tp_efficiency_ratio",
            help="Tensor-parallel efficiency: speedup over one rank / ranks.",
            column="efficiency",
            labels=_EXPORT_LABELS,
        ),
    ),
)
