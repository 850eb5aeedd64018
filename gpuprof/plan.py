"""What a sweep measures: suites, per-probe parameters and the sweep plan (no torch here).

Parameters are frozen keyword-only dataclasses; they travel from the launcher to the ranks as
JSON (`plan.json` in the run folder), so the rank side measures exactly what the user asked for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar, cast

from gpuprof.errors import UsageError
from gpuprof.units import parse_size, size_range

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
SCOPES = ("intra", "inter", "rails", "global")
SUITES = ("quick", "standard", "full")
DEVICES = ("auto", "cuda", "cpu")
PROBES = ("collectives", "p2p", "memory", "compute", "ddp", "pipeline")
PIPELINE_SCHEDULES = (
    "GPipe",
    "1F1B",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
)
MULTI_CHUNK_SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble")
P2P_MODES = ("uni", "bidir", "latency")
FULL_PAIRS_MAX_RANKS = 16  # above this, p2p measures pairs in a node plus the rails
MEMORY_KINDS_CUDA = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d")
MEMORY_KINDS_CPU = ("host_copy",)
MEMORY_KINDS = (*MEMORY_KINDS_CUDA, *MEMORY_KINDS_CPU)
COMPUTE_DTYPES = ("float32", "tf32", "bfloat16", "float16", "float8")


DDP_HOOKS = ("allreduce", "fp16", "bf16")
DDP_FLAGS = ("grad_view", "static_graph", "amp")


ParamsT = TypeVar("ParamsT", bound="ProbeParams")


class ProbeParams:
    """What every probe's parameters share: the iteration fields' check and the JSON form
    (`plan.json`: lists come back as tuples)."""

    warmup_iters: int
    min_iters: int
    max_iters: int

    def _check_iterations(self, hint: str | None = None) -> None:
        if self.warmup_iters < 0 or self.min_iters < 1 or self.max_iters < self.min_iters:
            raise UsageError(
                "iteration counts need warmup >= 0 and 1 <= min-iters <= max-iters", hint
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(cast(Any, self))  # every subclass is a dataclass

    @classmethod
    def from_dict(cls: type[ParamsT], data: dict[str, Any]) -> ParamsT:
        """Inverse of to_dict (lists become tuples)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**fields)


def _check_choices(kind: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    if not values:
        raise UsageError(f"no {kind} given", f"choose from {', '.join(allowed)}")
    for value in values:
        if value not in allowed:
            raise UsageError(f"unknown {kind} {value!r}", f"choose from {', '.join(allowed)}")


@dataclass(frozen=True, kw_only=True)
class CollectivesParams(ProbeParams):
    """What the collectives probe measures and how long it may spend on each case."""

    ops: tuple[str, ...] = OPS
    dtypes: tuple[str, ...] = ("float32",)
    sizes: tuple[int, ...] = tuple(size_range(1 << 10, 16 << 20, 4))
    modes: tuple[str, ...] = MODES
    redop: str = "sum"
    scopes: tuple[str, ...] = SCOPES
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 1000
    budget_s: float = 0.1
    check: bool = True

    def __post_init__(self) -> None:
        _check_choices("op", self.ops, OPS)
        _check_choices("dtype", self.dtypes, DTYPES)
        _check_choices("mode", self.modes, MODES)
        _check_choices("scope", self.scopes, SCOPES)
        _check_choices("reduce op", (self.redop,), REDOPS)
        if not self.sizes or min(self.sizes) <= 0:
            raise UsageError("sizes must be positive", "e.g. --sizes 1K,1M,64M")
        self._check_iterations("check --warmup, --min-iters and --max-iters")
        if self.budget_s <= 0:
            raise UsageError("--budget-ms must be positive")


@dataclass(frozen=True, kw_only=True)
class CeilingParams(ProbeParams):
    """Memory copies (`kinds`, `size_bytes`) or matmuls (`dtypes`, `n` = M = N = K): one
    device at a time, each alone (no contention), like nvbandwidth's defaults."""

    kinds: tuple[str, ...] = MEMORY_KINDS_CPU
    dtypes: tuple[str, ...] = ("float32",)
    size_bytes: int = 64 << 20
    n: int = 1024
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 200
    budget_s: float = 0.2

    def __post_init__(self) -> None:
        _check_choices("copy kind", self.kinds, MEMORY_KINDS)
        _check_choices("matmul dtype", self.dtypes, COMPUTE_DTYPES)
        if self.size_bytes <= 0 or self.n <= 0:
            raise UsageError("--size must be positive")
        self._check_iterations()


@dataclass(frozen=True, kw_only=True)
class P2PParams(ProbeParams):
    """Point-to-point: bandwidth at `size_bytes` (uni- and bidirectional) and ping-pong latency
    at `latency_bytes`, for every pair of ranks in rounds of disjoint pairs."""

    modes: tuple[str, ...] = P2P_MODES
    size_bytes: int = 4 << 20
    latency_bytes: int = 8
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 1000
    budget_s: float = 0.1

    def __post_init__(self) -> None:
        _check_choices("p2p mode", self.modes, P2P_MODES)
        if self.size_bytes <= 0 or self.latency_bytes <= 0:
            raise UsageError("p2p sizes must be positive")
        self._check_iterations()


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


def model_shape(params: int, hidden: int = 0, layers: int = 0) -> tuple[int, int]:
    """(hidden, layers) of the synthetic transformer: given, or derived from a parameter count.

    A block has 12 h^2 + 13 h parameters (attention 4 h^2, MLP 8 h^2, biases and norms); the
    hidden size is the widest multiple of 64 that still leaves at least 4 blocks (at most 8192).
    """

    def per_block(h: int) -> int:
        return 12 * h * h + 13 * h

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
class DDPParams(ProbeParams):
    """The DDP micro-benchmark: a synthetic transformer of `model_params` parameters (or
    `hidden` x `layers`), `batch` sequences of `seq` tokens per rank, each variant's steps."""

    model_params: int = 2_000_000
    hidden: int = 0  # 0: derived from model_params
    layers: int = 0
    batch: int = 2
    seq: int = 64
    variants: tuple[str, ...] = ("default", "bucket=1", "hook=fp16", "accum=4")
    scaling: bool = True  # the default variant at every world size (weak scaling)
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.variants:
            raise UsageError("no DDP variant given", "e.g. --ddp-variants default,accum=4")
        for name in self.variants:
            parse_variant(name)
        if min(self.batch, self.seq) < 1 or self.model_params < 1:
            raise UsageError("--batch, --seq and --model-params must be positive")
        if min(self.hidden, self.layers) < 0 or self.hidden % 64:
            raise UsageError("--hidden must be a multiple of 64 and --layers positive")
        self._check_iterations()

    @property
    def shape(self) -> tuple[int, int]:
        """(hidden, layers)."""
        return model_shape(self.model_params, self.hidden, self.layers)


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
        size = {"quick": 125_000_000, "standard": 350_000_000, "full": 1_300_000_000}[suite]
        return DDPParams(
            model_params=size,
            batch=8,
            seq=512,
            variants=variants,
            budget_s=2.0 if suite == "quick" else 5.0,
        )
    size = {"quick": 2_000_000, "standard": 8_000_000, "full": 25_000_000}[suite]
    return DDPParams(model_params=size, budget_s=1.0 if suite == "quick" else 3.0)


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


@dataclass(frozen=True, kw_only=True)
class PipelineParams(ProbeParams):
    """The pipeline micro-benchmark: every rank one stage of `stage_layers` Linear+GELU layers
    of width `hidden` (times its `stage_weights` entry), `chunks` model chunks per rank for
    the multi-chunk schedules (same compute per rank), micro-batches of `mb_rows` rows; each
    schedule at each number of micro-batches (empty: p, 2p and 4p)."""

    schedules: tuple[str, ...] = (
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
    )
    micro_batches: tuple[int, ...] = ()
    hidden: int = 1024
    stage_layers: int = 4
    chunks: int = 2
    mb_rows: int = 64
    stage_weights: tuple[float, ...] = ()
    warmup_iters: int = 1
    min_iters: int = 3
    max_iters: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        _check_choices("pipeline schedule", self.schedules, PIPELINE_SCHEDULES)
        if any(m < 1 for m in self.micro_batches):
            raise UsageError("--micro-batches must be positive, e.g. 4,8,16")
        if min(self.hidden, self.stage_layers, self.mb_rows) < 1 or self.chunks < 2:
            raise UsageError(
                "--pp-hidden, --stage-layers, --mb-rows must be positive and --chunks at least 2"
            )
        if any(w <= 0 for w in self.stage_weights):
            raise UsageError("--stage-weights must be positive, e.g. 1,1,2,1")
        self._check_iterations()

    def micro_batch_counts(self, p: int) -> tuple[int, ...]:
        """The micro-batch sweep for p stages."""
        return self.micro_batches or (p, 2 * p, 4 * p)


def suite_pipeline(suite: str, device: str) -> PipelineParams:
    """GPU stages of 8 layers of 8192 x 8192 on 2048-row micro-batches. CPU: 1024-wide layers
    on 64 rows, 4 per stage in the quick suite (~25 ms of forward and backward per
    micro-batch: gloo's few-ms send/recv still shows in the bubble) and 16 otherwise (~100 ms:
    the schedule, not the transport, shapes the bubble)."""
    budget = 1.0 if suite == "quick" else 3.0
    if device == "cuda":
        return PipelineParams(hidden=8192, stage_layers=8, mb_rows=2048, budget_s=budget)
    return PipelineParams(stage_layers=4 if suite == "quick" else 16, budget_s=budget)


def suite_p2p(suite: str, device: str) -> P2PParams:
    """Pair bandwidth at a size past the latency-bound range: 256 MiB on GPU, 4-16 MiB on CPU."""
    gpu = device == "cuda"
    size = (256 << 20) if gpu else {"quick": 4 << 20, "standard": 16 << 20, "full": 16 << 20}[suite]
    return P2PParams(size_bytes=size, budget_s=0.1 if suite == "quick" else 0.5)


def round_robin(items: list[int]) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair once (the circle method): n-1 rounds for
    even n, n rounds for odd n (one item rests each round)."""
    pool: list[int | None] = list(items) + ([None] if len(items) % 2 else [])
    rounds = []
    for _ in range(len(pool) - 1):
        half = len(pool) // 2
        pairs = [(pool[i], pool[-1 - i]) for i in range(half)]
        rounds.append(
            sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None)
        )
        pool = [pool[0], pool[-1], *pool[1:-1]]
    return rounds


def pair_rounds(num_nodes: int, gpus_per_node: int) -> list[list[tuple[int, int]]]:
    """The p2p schedule: rounds of disjoint pairs, measured one round after another.

    First the pairs inside a node (circle-method rounds, every node at once). Then the pairs
    across nodes, with at most one pair per pair of nodes in a round, so a pair never shares
    its nodes' network link with another pair: up to FULL_PAIRS_MAX_RANKS ranks every such
    pair is measured; beyond, only the rails (local rank r with local rank r, every r at once,
    as each rail has its own NIC on GPU clusters)."""
    g = gpus_per_node
    rounds = [
        [(n * g + a, n * g + b) for n in range(num_nodes) for a, b in local]
        for local in round_robin(list(range(g)))
    ]
    full = num_nodes * g <= FULL_PAIRS_MAX_RANKS
    for nodes in round_robin(list(range(num_nodes))):
        if full:
            rounds += [
                [(i * g + a, j * g + b) for i, j in nodes] for a in range(g) for b in range(g)
            ]
        else:
            rounds.append([(i * g + r, j * g + r) for i, j in nodes for r in range(g)])
    return [pairs for pairs in rounds if pairs]


def suite_memory(suite: str, device: str) -> CeilingParams:
    """Copy sizes that reach the ceiling: 256 MiB-1 GiB on GPU, 64-256 MiB on CPU."""
    gpu = device == "cuda"
    size = (
        {"quick": 256 << 20, "standard": 1 << 30, "full": 1 << 30}[suite]
        if gpu
        else {"quick": 64 << 20, "standard": 256 << 20, "full": 256 << 20}[suite]
    )
    kinds = MEMORY_KINDS_CUDA if gpu else MEMORY_KINDS_CPU
    return CeilingParams(kinds=kinds, size_bytes=size, budget_s=0.2 if suite == "quick" else 1.0)


def suite_compute(suite: str, device: str) -> CeilingParams:
    """Matmul sizes that fill the device: 8192^3 on GPU (REFERENCE.md), 1024-2048 on CPU."""
    gpu = device == "cuda"
    n = 8192 if gpu else {"quick": 1024, "standard": 2048, "full": 2048}[suite]
    # CPUs without bf16 matrix units emulate it ~100x slower than float32: float32 only there
    dtypes = COMPUTE_DTYPES if gpu else ("float32",)
    return CeilingParams(dtypes=dtypes, n=n, budget_s=0.3 if suite == "quick" else 1.0)


def device_scopes(world_size: int) -> list[GroupSpec]:
    """One single-rank group per rank, measured one after another (each device alone)."""
    return [
        GroupSpec(scope="device", world_size=1, num_nodes=1, members=((r,),), names=(f"rank{r}",))
        for r in range(world_size)
    ]


def suite_collectives(suite: str, device: str) -> CollectivesParams:
    """The collectives parameters of a suite; GPUs get larger sizes than CPU/gloo."""
    _check_choices("suite", (suite,), SUITES)
    gpu = device == "cuda"
    if suite == "quick":
        top = parse_size("1G" if gpu else "16M")
        return CollectivesParams(sizes=tuple(size_range(1 << 10, top, 4)), budget_s=0.1)
    if suite == "standard":
        top = parse_size("1G" if gpu else "64M")
        return CollectivesParams(
            sizes=tuple(size_range(8, top, 2)), dtypes=("float32", "bfloat16"), budget_s=0.3
        )
    top = parse_size("4G" if gpu else "256M")
    return CollectivesParams(
        sizes=tuple(size_range(8, top, 2)), dtypes=DTYPES, budget_s=1.0, warmup_iters=5
    )


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """Everything the ranks need to know to run a sweep; written to `plan.json`."""

    num_nodes: int = 1
    gpus_per_node: int = 1
    device: str = "auto"
    suite: str = "quick"
    probes: tuple[str, ...] = PROBES
    collectives: CollectivesParams = field(default_factory=CollectivesParams)
    p2p: P2PParams = field(default_factory=P2PParams)
    memory: CeilingParams = field(default_factory=CeilingParams)
    compute: CeilingParams = field(default_factory=CeilingParams)
    ddp: DDPParams = field(default_factory=DDPParams)
    pipeline: PipelineParams = field(default_factory=PipelineParams)
    case_timeout_s: float = 300.0
    telemetry_hz: float = 10.0  # one sampler per node; 0 turns telemetry off

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise UsageError(f"--nodes must be at least 1, got {self.num_nodes}")
        if self.gpus_per_node < 1:
            raise UsageError(
                f"--gpus must be at least 1, got {self.gpus_per_node}",
                "give the number of ranks per node",
            )
        _check_choices("device", (self.device,), DEVICES)
        _check_choices("probe", self.probes, PROBES)
        if self.case_timeout_s <= 0:
            raise UsageError("--timeout must be positive")
        weights = self.pipeline.stage_weights
        if "pipeline" in self.probes and weights and len(weights) != self.world_size:
            raise UsageError(
                f"--stage-weights has {len(weights)} entries for {self.world_size} stages",
                "give one weight per rank (pipeline stage)",
            )
        if not 0 <= self.telemetry_hz <= 1000:
            raise UsageError(f"--telemetry-hz must be between 0 and 1000, got {self.telemetry_hz}")

    @property
    def world_size(self) -> int:
        """Ranks in the whole job."""
        return self.num_nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepPlan:
        """Inverse of to_dict."""
        fields = dict(data)
        fields["probes"] = tuple(fields["probes"])
        fields["collectives"] = CollectivesParams.from_dict(fields["collectives"])
        if "p2p" in fields:
            fields["p2p"] = P2PParams.from_dict(fields["p2p"])
        for probe in ("memory", "compute"):
            if probe in fields:
                fields[probe] = CeilingParams.from_dict(fields[probe])
        if "ddp" in fields:
            fields["ddp"] = DDPParams.from_dict(fields["ddp"])
        if "pipeline" in fields:
            fields["pipeline"] = PipelineParams.from_dict(fields["pipeline"])
        return cls(**fields)

    def with_device(self, device: str) -> SweepPlan:
        """The same plan with the device resolved (auto -> cuda or cpu)."""
        return replace(self, device=device)


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    """One scope at one world size: the concurrent process groups that measure it.

    `members` lists the ranks of each group; groups of one spec run at the same time (one per
    node for `intra`), so a slow node stands out. `names` label each group in the tables.
    """

    scope: str
    world_size: int
    num_nodes: int
    members: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]


def intra_sizes(gpus_per_node: int, num_nodes: int) -> list[int]:
    """Intra-node world sizes 2, 4, 8, ... and G itself; on one node G is the global scope."""
    sizes = []
    size = 2
    while size < gpus_per_node:
        sizes.append(size)
        size *= 2
    if num_nodes > 1 and gpus_per_node > 1:
        sizes.append(gpus_per_node)
    return sizes


def scope_groups(num_nodes: int, gpus_per_node: int, scopes: tuple[str, ...]) -> list[GroupSpec]:
    """Every group spec a sweep measures, smallest scope first (DESIGN.md section 4)."""
    specs: list[GroupSpec] = []
    if "intra" in scopes:
        for size in intra_sizes(gpus_per_node, num_nodes):
            members = tuple(
                tuple(range(node * gpus_per_node, node * gpus_per_node + size))
                for node in range(num_nodes)
            )
            names = tuple(f"node{node}" for node in range(num_nodes))
            specs.append(
                GroupSpec(scope="intra", world_size=size, num_nodes=1, members=members, names=names)
            )
    if num_nodes > 1 and "inter" in scopes:
        # one rank per node, alone: the cleanest view of the network between nodes
        members = (tuple(node * gpus_per_node for node in range(num_nodes)),)
        specs.append(
            GroupSpec(
                scope="inter",
                world_size=num_nodes,
                num_nodes=num_nodes,
                members=members,
                names=("rail0",),
            )
        )
    if num_nodes > 1 and gpus_per_node > 1 and "rails" in scopes:
        # local rank r of every node, every r at once: a slow NIC (rail) stands out
        members = tuple(
            tuple(node * gpus_per_node + r for node in range(num_nodes))
            for r in range(gpus_per_node)
        )
        names = tuple(f"rail{r}" for r in range(gpus_per_node))
        specs.append(
            GroupSpec(
                scope="rails",
                world_size=num_nodes,
                num_nodes=num_nodes,
                members=members,
                names=names,
            )
        )
    if "global" in scopes:
        world = num_nodes * gpus_per_node
        specs.append(
            GroupSpec(
                scope="global",
                world_size=world,
                num_nodes=num_nodes,
                members=(tuple(range(world)),),
                names=("all",),
            )
        )
    return specs
