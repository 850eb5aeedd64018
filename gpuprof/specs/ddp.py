"""The DDP probe: a synthetic transformer under DistributedDataParallel, each step broken down
(forward, backward, exposed communication, optimizer) per variant, with weak scaling."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.machine.groups import GroupSpec, scope_groups
from gpuprof.params import ProbeParams, csv, positive_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.user_model import MODEL_OPTION, check_model_spec
from gpuprof.units import parse_count

DDP_HOOKS = ("allreduce", "fp16", "bf16")
DDP_FLAGS = ("grad_view", "static_graph", "amp")


def parse_variant(name: str) -> dict[str, Any]:
    """A DDP variant name -> its settings. Parts joined by '+': `default`, `bucket=MB`,
    `grad_view`, `static_graph`, `hook=allreduce|fp16|bf16`, `accum=K`, `amp`."""
    settings: dict[str, Any] = {
        "bucket_cap_mb": 25.0,
        "gradient_as_bucket_view": False,
        "static_graph": False,
        "hook": None,
        "accum": 1,
        "amp": False,
    }
    hint = (
        "variants: default, bucket=MB, grad_view, static_graph, hook=allreduce|fp16|bf16, "
        "accum=K, amp; join with + (e.g. bucket=100+hook=bf16)"
    )
    for part in name.split("+"):
        key, _, value = part.strip().partition("=")
        try:
            if key == "default" and not value:
                continue
            if key == "bucket" and value and float(value) > 0:
                settings["bucket_cap_mb"] = float(value)
            elif key == "accum" and value and int(value) >= 1:
                settings["accum"] = int(value)
            elif key == "hook" and value in DDP_HOOKS:
                settings["hook"] = value
            elif key in DDP_FLAGS and not value:
                flag = {"grad_view": "gradient_as_bucket_view"}.get(key, key)
                settings[flag] = True
            else:
                raise ValueError(part)
        except ValueError:
            raise UsageError(f"unknown DDP variant {name!r} (at {part!r})", hint) from None
    return settings


def block_params(h: int) -> int:
    """Parameters of one block of the synthetic transformer of hidden size h."""
    return 12 * h * h + 13 * h


def model_shape(params: int, hidden: int = 0, layers: int = 0) -> tuple[int, int]:
    """(hidden, layers) of the synthetic transformer: given, or derived from a parameter count.

    A block has 12 h^2 + 13 h parameters (attention 4 h^2, MLP 8 h^2, biases and norms); the
    hidden size is the widest multiple of 64 that still leaves at least 4 blocks (at most 8192).
    """
    per_block = block_params
    if hidden and layers:
        return hidden, layers
    if not hidden:
        hidden = 64
        while hidden < 8192 and 4 * per_block(hidden + 64) <= params:
            hidden += 64
    if not layers:
        layers = max(1, round(params / per_block(hidden)))
    return hidden, layers


@dataclass(frozen=True, kw_only=True)
class ModelParams(ProbeParams):
    """The synthetic transformer of `model_params` parameters (or `hidden` x `layers`) and
    `batch` sequences of `seq` tokens per rank: what `MODEL_OPTIONS` set, for every probe
    that trains it."""

    model_params: int = 2_000_000
    model: str = ""  # the user's: package.module:factory ("" = the synthetic transformer)
    hidden: int = 0  # 0: derived from model_params
    layers: int = 0
    batch: int = 2
    seq: int = 64
    scaling: bool = True  # every world size, one rank alone first (weak scaling)

    def _check_model(self) -> None:
        if min(self.batch, self.seq) < 1 or self.model_params < 1:
            raise UsageError("--batch, --seq and --model-params must be positive")
        if min(self.hidden, self.layers) < 0 or self.hidden % 64:
            raise UsageError("--hidden must be a multiple of 64 and --layers positive")
        if self.model:
            check_model_spec(self.model)
        self._check_iterations()

    @property
    def shape(self) -> tuple[int, int]:
        """(hidden, layers)."""
        return model_shape(self.model_params, self.hidden, self.layers)


def model_size(params: ModelParams) -> int:
    """Parameters of the synthetic transformer: its blocks and the final norm (2 h)."""
    hidden, layers = params.shape
    return layers * block_params(hidden) + 2 * hidden


def activation_bytes(
    params: ModelParams, scores: bool, element_bytes: int = 4, checkpointed: bool = False
) -> int:
    """What one micro-batch's forward keeps for its backward, over every block: per block
    about 18 s b h elements (the norms' inputs and outputs, q/k/v, the attention output and
    projection input, the MLP's 4h input and activation: counted from the block's saved
    tensors), plus the attention scores 2 a s^2 b where the attention kernel materialises
    them (`scores`: the math kernel, as on CPU; not the fused GPU kernels). The same
    accounting as Korthikanti et al. 2022 (arXiv 2205.05198, eq. 1: 34 s b h + 5 a s^2 b bytes
    in 16-bit with dropout), for this block without dropout. `checkpointed`: with activation
    checkpointing per block, each block keeps its input and one block is recomputed at a
    time."""
    hidden, layers = params.shape
    heads = max(1, hidden // 64)
    tokens = params.batch * params.seq
    per_block = 18 * tokens * hidden + (2 * heads * params.seq * tokens if scores else 0)
    if checkpointed:
        return (layers * tokens * hidden + per_block) * element_bytes
    return layers * per_block * element_bytes


def ddp_case_bytes(params: ModelParams, scores: bool, checkpointed: bool = False) -> int:
    """Memory one rank needs for a DDP case: the DDP model and its no-op-hook twin, each with
    fp32 parameters, gradients, AdamW state (2 per parameter) and DDP's flat bucket copy of
    the gradients (5 x 4 bytes a parameter); the replayed buckets (4 bytes a parameter); one
    micro-batch's activations."""
    p = model_size(params)
    return 2 * 20 * p + 4 * p + activation_bytes(params, scores, checkpointed=checkpointed)


@dataclass(frozen=True, kw_only=True)
class DDPParams(ModelParams):
    """The DDP micro-benchmark: each variant's steps on the synthetic transformer."""

    variants: tuple[str, ...] = ("default", "bucket=1", "hook=fp16", "accum=4")
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.variants:
            raise UsageError("no DDP variant given", "e.g. --ddp-variants default,accum=4")
        for name in self.variants:
            parse_variant(name)
        self._check_model()


def suite_ddp(suite: str, device: str) -> DDPParams:
    """A GPU suite trains a 350M-1.3B model; CPU keeps to a few million parameters."""
    if device == "cuda":
        variants = (
            "default",
            "bucket=5",
            "bucket=100",
            "grad_view",
            "static_graph",
            "hook=fp16",
            "hook=bf16",
            "accum=4",
            "amp",
        )
        size = {
            "quick": 125_000_000,
            "standard": 350_000_000,
            "full": 1_300_000_000,
            "ci": 125_000_000,
        }[suite]
        return DDPParams(
            model_params=size,
            batch=8,
            seq=512,
            variants=("default",) if suite == "ci" else variants,
            budget_s={"quick": 2.0, "ci": 3.0}.get(suite, 5.0),
        )
    size = {"quick": 2_000_000, "standard": 8_000_000, "full": 25_000_000, "ci": 2_000_000}[suite]
    if suite == "quick":  # a first look in under a minute: 3 rounds of half a second
        return DDPParams(model_params=size, budget_s=0.5, min_iters=3, warmup_iters=1)
    if suite == "ci":  # one variant: the step at one rank alone and at the job's ranks
        return DDPParams(model_params=size, variants=("default",), budget_s=1.5, min_iters=8)
    return DDPParams(model_params=size, budget_s=3.0)


def quick_for_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The quick suite on more than one node, where every variant's case at the job's size
    all-reduces over the network: the first variant and the 16-bit gradient hooks only
    (the variant that halves the bytes on the wire)."""
    assert isinstance(params, DDPParams)
    if suite != "quick" or num_nodes == 1:
        return params
    keep = [v for v in params.variants[1:] if parse_variant(v)["hook"] in ("fp16", "bf16")]
    return replace(params, variants=(params.variants[0], *keep))


def ddp_scopes(num_nodes: int, gpus_per_node: int, scaling: bool) -> list[GroupSpec]:
    """Weak scaling: one rank alone (n=1), each node's 2, 4, .. G ranks, one rank per node,
    and every rank; without scaling, every rank only."""
    world = num_nodes * gpus_per_node
    specs = []
    if scaling and world > 1:
        specs.append(
            GroupSpec(scope="single", world_size=1, num_nodes=1, members=((0,),), names=("rank0",))
        )
        specs += scope_groups(num_nodes, gpus_per_node, ("intra", "inter"))
    return specs + scope_groups(num_nodes, gpus_per_node, ("global",))


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """The first variant at every weak-scaling world size, every variant at the largest."""
    assert isinstance(params, DDPParams)
    scopes = ddp_scopes(num_nodes, gpus_per_node, params.scaling)
    return len(scopes) - 1 + len(params.variants)


def step_flops(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: one rank's FLOPs in a round: the DDP step and its no-op-hook twin, each
    forward and backward about 6 x parameters x tokens (x the accumulation steps)."""
    assert isinstance(params, DDPParams)
    scopes = ddp_scopes(num_nodes, gpus_per_node, params.scaling)
    variants = [params.variants[0]] * (len(scopes) - 1) + list(params.variants)
    tokens = params.batch * params.seq
    return [2 * 6 * model_size(params) * tokens * int(parse_variant(v)["accum"]) for v in variants]


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes each node's NIC sends per round, where the group spans nodes: a round
    all-reduces the gradients twice (the DDP step and the communication-only step), as a
    ring: 2 x (n-1)/n x gradient bytes each (2-byte gradients with a 16-bit hook)."""
    assert isinstance(params, DDPParams)
    scopes = ddp_scopes(num_nodes, gpus_per_node, params.scaling)
    cases = [(spec, params.variants[0]) for spec in scopes[:-1]]
    cases += [(scopes[-1], variant) for variant in params.variants]
    out = []
    for spec, variant in cases:
        hook = parse_variant(variant)["hook"]
        grad_bytes = params.model_params * (2 if hook in ("fp16", "bf16") else 4)
        crossing = len(spec.members) if spec.num_nodes > 1 else 0
        n = spec.world_size
        out.append(crossing * 2 * 2 * (n - 1) / n * grad_bytes)
    return out


# the synthetic transformer and its batch: one declaration, shared with the probes that train
# the same model (a sweep gives them one model)
MODEL_OPTIONS = (
    MODEL_OPTION,
    Option(
        flag="--model-params",
        field="model_params",
        parse=parse_count,
        help="model: synthetic transformer size, e.g. 10M, 350M, 1.3B",
    ),
    Option(
        flag="--hidden",
        field="hidden",
        type=int,
        parse=positive_int,
        help="model: hidden size (multiple of 64)",
    ),
    Option(
        flag="--layers",
        field="layers",
        type=int,
        parse=positive_int,
        help="model: transformer blocks",
    ),
    Option(
        flag="--batch",
        field="batch",
        type=int,
        parse=positive_int,
        help="model: sequences per rank per micro-batch",
    ),
    Option(
        flag="--seq", field="seq", type=int, parse=positive_int, help="model: tokens per sequence"
    ),
    Option(
        flag="--scaling",
        field="scaling",
        boolean=True,
        help="model: weak scaling over world sizes (one rank alone, each scope)",
    ),
)

_KEYS = ("scope", "world_size", "group", "case_id")

_EXPORT_LABELS = (("variant", "case_id"), ("scope", "scope"), ("ranks", "world_size"))

SPEC = ProbeSpec(
    name="ddp",
    help="A DDP training step broken down (forward, backward, exposed communication, optimizer) "
    "by DDP's logging data and by A/B runs, per variant, with weak scaling over world sizes."
    "\n\nExample: gpuprof run ddp --gpus 8 --model-params 350M --ddp-variants "
    "default,bucket=100,hook=bf16,accum=4",
    params=DDPParams,
    suite=suite_ddp,
    options=(
        *MODEL_OPTIONS,
        Option(
            flag="--ddp-variants",
            field="variants",
            parse=csv,
            help="ddp: variants, the first also at every world size: default, bucket=MB, "
            "grad_view, static_graph, hook=allreduce|fp16|bf16, accum=K, amp (join with +)",
        ),
    ),
    count_cases=count_cases,
    link_bytes=link_bytes,
    step_flops=step_flops,
    for_job=quick_for_job,
    case_overhead_s=1.7,  # building the model, its twin and warmup steps
    rank_module="gpuprof.probes.ddp",
    summarize="gpuprof.analysis.ddp:summarize_run",
    columns=(
        ("scope", "scope"),
        ("world_size", "n"),
        ("group", "group"),
        ("case_id", "variant"),
        ("step_us", "step_us"),
        ("forward_us", "fwd_us"),
        ("backward_compute_us", "bwd_us"),
        ("exposed_comm_us", "exposed_us"),
        ("optimizer_us", "optim_us"),
        ("sum_pct", "sum%"),
        ("comm_us", "comm_us"),
        ("overlap_log_pct", "overlap%log"),
        ("comm_only_us", "comm_only_us"),
        ("comm_cost_ab_us", "cost_ab_us"),
        ("overlap_ab_pct", "overlap%ab"),
        ("headroom_pct", "noop%"),
        ("samples_per_s", "samples/s"),
        ("efficiency", "eff"),
    ),
    section="gpuprof.reports.sections.ddp:section",
    advice="gpuprof.advice.ddp:findings",
    metrics=(
        # samples/s alone: the step time is the same number inverted
        Metric(
            column="samples_per_s",
            better="higher",
            keys=_KEYS,
            canary="the core's speed (on CPU, a numpy matmul and copy right after each DDP step)",
        ),
        Metric(column="forward_us", better="lower", keys=_KEYS, primary=False),
        Metric(column="backward_compute_us", better="lower", keys=_KEYS, primary=False),
        Metric(column="optimizer_us", better="lower", keys=_KEYS, primary=False),
    ),
    ci_devices=("cpu", "cuda"),
    overview="gpuprof.analysis.ddp:overview",
    exports=(
        Export(
            name="ddp_scaling_efficiency_ratio",
            help="DDP weak-scaling efficiency: samples/s(n) / (n x samples/s(1)).",
            column="efficiency",
            labels=_EXPORT_LABELS,
        ),
        Export(
            name="ddp_step_seconds",
            help="DDP training step (slowest rank, median).",
            column="step_us",
            divisor=1e6,
            labels=_EXPORT_LABELS,
        ),
    ),
)
