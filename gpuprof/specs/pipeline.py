"""The pipeline probe: torch.distributed.pipelining schedules timed per micro-batch, the
measured bubble against theory over a micro-batch sweep, and stage imbalance."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices, csv, floats, ints, positive_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.user_model import MODEL_OPTION, check_model_spec

PIPELINE_SCHEDULES = (
    "GPipe",
    "1F1B",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
)
# stages of the measured pipeline at most: a job's pipeline-parallel degree is a few to 16
# (tensor and data parallelism make up the rest), and a step of m + p - 1 micro-batches over
# every rank of a 1,024-node job would grow with the cluster
MAX_STAGES = 16
MULTI_CHUNK_SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble")


@dataclass(frozen=True, kw_only=True)
class PipelineParams(ProbeParams):
    """The pipeline micro-benchmark: every rank one stage of `stage_layers` Linear+GELU layers
    of width `hidden` (times its `stage_weights` entry), `chunks` model chunks per rank for
    the multi-chunk schedules (same compute per rank), micro-batches of `mb_rows` rows; each
    schedule at each number of micro-batches (empty: mb_factors x p)."""

    schedules: tuple[str, ...] = (
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
    )
    micro_batches: tuple[int, ...] = ()
    mb_factors: tuple[int, ...] = (1, 2, 4)  # without micro_batches: m = factor x p
    hidden: int = 1024
    stage_layers: int = 4
    chunks: int = 2
    mb_rows: int = 64
    stage_weights: tuple[float, ...] = ()
    model: str = ""  # the user's: package.module:factory ("" = Linear+GELU stages)
    max_stages: int = MAX_STAGES  # ranks in the pipeline at most (spread over the job)
    warmup_iters: int = 1
    min_iters: int = 3
    max_iters: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        check_choices("pipeline schedule", self.schedules, PIPELINE_SCHEDULES)
        if any(m < 1 for m in (*self.micro_batches, *self.mb_factors)) or not self.mb_factors:
            raise UsageError("--micro-batches must be positive, e.g. 4,8,16")
        if min(self.hidden, self.stage_layers, self.mb_rows) < 1 or self.chunks < 2:
            raise UsageError(
                "--pp-hidden, --stage-layers, --mb-rows must be positive and --chunks at least 2"
            )
        if any(w <= 0 for w in self.stage_weights):
            raise UsageError("--stage-weights must be positive, e.g. 1,1,2,1")
        if self.model:
            check_model_spec(self.model)
            if self.stage_weights:
                raise UsageError(
                    "--stage-weights weights gpuprof's own stages, not --model's",
                    "split your model's stages as you want them (a third item of the factory)",
                )
        self._check_iterations()

    def check_job(self, num_nodes: int, gpus_per_node: int, device: str) -> None:
        """One stage weight per pipeline stage, when weights are given."""
        stages = len(stage_ranks(num_nodes, gpus_per_node, self.max_stages))
        if self.stage_weights and len(self.stage_weights) != stages:
            raise UsageError(
                f"--stage-weights has {len(self.stage_weights)} entries for {stages} stages",
                "give one weight per pipeline stage (rank of the pipeline)",
            )

    def micro_batch_counts(self, p: int) -> tuple[int, ...]:
        """The micro-batch sweep for p stages: as given, else mb_factors x p."""
        return self.micro_batches or tuple(f * p for f in self.mb_factors)


def stage_ranks(num_nodes: int, gpus_per_node: int, max_stages: int) -> tuple[int, ...]:
    """The ranks of the pipeline, stage by stage: every rank of the job up to `max_stages`,
    else `max_stages` ranks spread evenly over it (so the stages cross nodes as a job's
    pipeline does); the other ranks wait."""
    world = num_nodes * gpus_per_node
    p = min(world, max_stages)
    return tuple(i * world // p for i in range(p))


def suite_pipeline(suite: str, device: str) -> PipelineParams:
    """GPU stages of 8 layers of 8192 x 8192 on 2048-row micro-batches. CPU: 1024-wide layers
    on 64 rows, 4 per stage in the quick suite (~25 ms of forward and backward per
    micro-batch: gloo's few-ms send/recv still shows in the bubble) and 16 otherwise (~100 ms:
    the schedule, not the transport, shapes the bubble). The quick suite, a first look in
    under a minute on CPU, sweeps m = p and 2p (not 4p: the case whose time grows with the
    world size) with half a second per case; the others p, 2p and 4p."""
    quick = suite == "quick"
    budget, factors = (0.5, (1, 2)) if quick else (3.0, (1, 2, 4))
    if device == "cuda":
        return PipelineParams(
            hidden=8192, stage_layers=8, mb_rows=2048, budget_s=budget, mb_factors=factors
        )
    return PipelineParams(stage_layers=4 if quick else 16, budget_s=budget, mb_factors=factors)


def quick_for_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The quick suite beyond 2 stages: m = p only (a step of m micro-batches takes about
    m + p - 1 micro-batch times, so m = 2p grows with the world size); 2 stages keep m = 2p."""
    assert isinstance(params, PipelineParams)
    if suite != "quick" or len(stage_ranks(num_nodes, gpus_per_node, params.max_stages)) <= 2:
        return params
    return replace(params, mb_factors=params.mb_factors[:1])


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every schedule at every micro-batch count, one pipeline (`stage_ranks`)."""
    assert isinstance(params, PipelineParams)
    p = len(stage_ranks(num_nodes, gpus_per_node, params.max_stages))
    return len(params.schedules) * len(params.micro_batch_counts(p))


_KEYS = ("schedule", "p", "m", "v")

SPEC = ProbeSpec(
    name="pipeline",
    help="Pipeline schedules (GPipe, 1F1B, interleaved, zero-bubble): per-micro-batch timeline, "
    "measured bubble against theory over a micro-batch sweep, stage imbalance."
    "\n\nExample: gpuprof run pipeline --gpus 4 --schedules GPipe,1F1B --micro-batches 4,8,16",
    params=PipelineParams,
    suite=suite_pipeline,
    options=(
        MODEL_OPTION,
        Option(
            flag="--schedules",
            field="schedules",
            parse=csv,
            help=f"pipeline schedules: {','.join(PIPELINE_SCHEDULES)}",
        ),
        Option(
            flag="--micro-batches",
            field="micro_batches",
            parse=ints,
            help="pipeline: micro-batch counts, e.g. 4,8,16",
        ),
        Option(
            flag="--pp-hidden",
            field="hidden",
            type=int,
            parse=positive_int,
            help="pipeline: layer width",
        ),
        Option(
            flag="--stage-layers",
            field="stage_layers",
            type=int,
            parse=positive_int,
            help="pipeline: Linear+GELU layers per stage",
        ),
        Option(
            flag="--chunks",
            field="chunks",
            type=int,
            parse=positive_int,
            help="pipeline: chunks per rank (interleaved, V)",
        ),
        Option(
            flag="--mb-rows",
            field="mb_rows",
            type=int,
            parse=positive_int,
            help="pipeline: rows per micro-batch",
        ),
        Option(
            flag="--pp-stages",
            field="max_stages",
            type=int,
            parse=positive_int,
            help=f"pipeline: stages at most (default {MAX_STAGES}; on more ranks, that many "
            "spread evenly over the job)",
        ),
        Option(
            flag="--stage-weights",
            field="stage_weights",
            parse=floats,
            help="pipeline: compute per stage, e.g. 1,1,2,1",
        ),
    ),
    count_cases=count_cases,
    for_job=quick_for_job,
    case_overhead_s=0.3,
    rank_module="gpuprof.probes.pipeline",
    summarize="gpuprof.analysis.pipeline:summarize_run",
    columns=(
        ("schedule", "schedule"),
        ("p", "p"),
        ("m", "m"),
        ("v", "v"),
        ("step_us", "step_us"),
        ("bubble_pct", "bubble%"),
        ("bubble_max_pct", "worst%"),
        ("theory_pct", "theory%"),
        ("simulated_pct", "sim%"),
        ("t_f_us", "T_F_us"),
        ("t_b_us", "T_B_us"),
        ("t_w_us", "T_W_us"),
        ("wait_us", "wait_us"),
        ("imbalance_pct", "imbal%"),
        ("bottleneck_rank", "slowest"),
        ("model_step_us", "model_us"),
        ("model_error_pct", "model_err%"),
        ("clock_error_us", "clock_err_us"),
    ),
    section="gpuprof.reports.sections.pipeline:section",
    advice="gpuprof.advice.pipeline:findings",
    metrics=(
        Metric(column="step_us", better="lower", keys=_KEYS),
        Metric(column="bubble_pct", better="lower", keys=_KEYS, primary=False),
    ),
    tables=("pipeline", "pipeline_timeline"),
    overview="gpuprof.analysis.pipeline:overview",
    exports=(
        Export(
            name="pipeline_bubble_ratio",
            help="Measured pipeline bubble: 1 - busy compute / step, mean over ranks.",
            column="bubble_pct",
            divisor=100,
            labels=(
                ("schedule", "schedule"),
                ("stages", "p"),
                ("micro_batches", "m"),
                ("chunks", "v"),
            ),
        ),
    ),
)
