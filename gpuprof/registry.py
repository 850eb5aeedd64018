"""The probe registry: one `ProbeSpec` per probe, the only list of probes in gpuprof.

Everything that lists probes is derived from here: the `gpuprof run <probe>` subcommands, the
sweep's `--probes` choices and options, the plan (`plan.json`), `show --table`, the report's
sections, the advice, and the metrics a regression check compares. This module imports
neither torch nor pandas: what needs them (the rank side, the summarizer, the report section,
the advice rules) is named by a `"module:attribute"` reference and imported only when used,
so `show`, `report` and `check` never load torch.

A new probe is its own modules (a spec in `gpuprof/specs/`, the rank side in
`gpuprof/probes/`, analysis, a report section, advice rules) plus one entry in `SPEC_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, ms_to_s, non_negative_int, positive_int

# quick/standard/full: a look at a cluster, larger each; ci: what one device (and, on CPU, two
# gloo ranks) can regress on, with budgets chosen for a small between-run spread
SUITES = ("quick", "standard", "full", "ci")
DEVICES_MEASURED = ("cpu", "cuda")

# The registry: one spec module per probe, in the order a sweep runs them and the report
# shows them. Each module defines `SPEC`.
SPEC_MODULES = (
    "gpuprof.specs.collectives",
    "gpuprof.specs.p2p",
    "gpuprof.specs.memory",
    "gpuprof.specs.compute",
    "gpuprof.specs.ddp",
    "gpuprof.specs.pipeline",
    "gpuprof.specs.sharded",
    "gpuprof.specs.tp",
    "gpuprof.specs.moe",
    "gpuprof.specs.concurrent",
)


@dataclass(frozen=True, kw_only=True)
class Option:
    """One command-line option of a probe, declared once for `gpuprof run`, `gpuprof sweep`
    and `torchrun -m gpuprof.probes.<name>`.

    `field` is the parameter it sets (after `parse`); None means the spec's `adjust` reads
    the raw value (options that combine, like nccl-tests' -b/-e/-f)."""

    flag: str  # "--copy-bytes"
    help: str
    field: str | None = None
    parse: Callable[[Any], Any] | None = None  # raw value -> field value; ValueError if bad
    type: Any = None  # click type of the raw value (None: text)
    short: str | None = None  # "-b"
    dest: str | None = None  # keyword name (default: the flag's words joined by _)
    boolean: bool = False  # --x/--no-x

    @property
    def name(self) -> str:
        """The keyword the command receives the raw value under."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")


# the regression gate's defaults: the smallest change that can count as a regression, and the
# false-alarm rate of one comparison (gpuprof.gate.stats says how both are used; a
# measuring check confirms what it finds with a second run, so its own rate is far lower)
MIN_EFFECT = 0.05
ALPHA = 0.05
# the A/B check's pass: a case passes when its change is shown to be under this slowdown (a
# one-sided bound at 1 - alpha); "within 5% both ways" takes more pairs than a CI job has
PASS_MARGIN = 0.10


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A number a regression check compares: the summary column, which way is better, and
    the summary columns that identify a case across runs."""

    column: str
    better: str  # "lower" or "higher"
    keys: tuple[str, ...]
    # what the summary's `canary` column measures, where the probe records one for its cases
    # (a workload outside the code under test, on the case's resource: `probes._canary`)
    canary: str | None = None
    # key columns added after runs and baselines were made without them, with the value those
    # older cases had (a case keeps its identity across the change)
    key_defaults: tuple[tuple[str, Any], ...] = ()
    # False for a metric that explains a case rather than judges it (a DDP step's forward
    # time beside its samples/s): the A/B check decides each case on its primary metrics and
    # shows the others beside them (`gpuprof.gate.paired`)
    primary: bool = True

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', not {self.better!r}")


@dataclass(frozen=True, kw_only=True)
class Export:
    """One summary column as a Prometheus gauge `gpuprof_<name>`, in base units (bytes per
    second, seconds, FLOP per second, ratios), one sample per summary row it keeps."""

    name: str  # "collective_busbw_bytes_per_second": the unit ends the name
    help: str
    column: str  # the summary column
    # summary unit -> base unit: value x scale / divisor (GB/s -> bytes/s: scale 1e9; us -> s:
    # divisor 1e6, so 80 us is 8e-05 s exactly, not 80 x 1e-6)
    scale: float = 1.0
    divisor: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()  # (label, summary column)
    keep: Callable[[Mapping[str, Any]], bool] | None = None  # which summary rows (default all)


@dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    """Everything gpuprof knows about one probe."""

    name: str
    help: str  # `gpuprof run <name> --help`: what it measures, then an example
    params: type[ProbeParams]
    suite: Callable[[str, str], ProbeParams]  # (suite, device cpu|cuda) -> parameters
    options: tuple[Option, ...] = ()
    # options without a `field`: (suite parameters, raw option values) -> field changes
    adjust: Callable[[ProbeParams, Mapping[str, Any]], dict[str, Any]] | None = None
    # how many cases a job of num_nodes x gpus_per_node runs one after another, and what a
    # case costs beyond its time budget (setup, warmup, check: measured on 2 CPU ranks here)
    count_cases: Callable[[ProbeParams, int, int], int]
    case_overhead_s: float
    # per case, in order: the bytes each node's NIC sends in one iteration (the estimate's
    # network term on a job of num_nodes x gpus_per_node; None: the probe barely uses it)
    link_bytes: Callable[[ProbeParams, int, int], list[float]] | None = None
    # per case, in order: floating-point operations one rank does in one iteration (the
    # estimate's compute term where a model's step outgrows the time budget)
    step_flops: Callable[[ProbeParams, int, int], list[float]] | None = None
    # the suite's preset fitted to the job: (preset, suite, device, num_nodes, gpus_per_node)
    # -> parameters (the quick suite keeps to its time as nodes and ranks grow)
    for_job: Callable[[ProbeParams, str, str, int, int], ProbeParams] | None = None
    # what the probe samples rather than measures whole on a job of num_nodes x gpus_per_node
    # (a line for the plan's estimate; None: everything its parameters name)
    sampled: Callable[[ProbeParams, int, int], str | None] | None = None
    rank_module: str  # the rank side: a module with run(ctx, params, num_nodes, gpus_per_node)
    summarize: str  # "module:function", (run) -> one summary row per case (`gpuprof show`)
    columns: tuple[tuple[str, str], ...]  # (summary column, terminal title)
    section: str  # "module:function", (analyzed run) -> a report Section or None
    advice: str | None = None  # "module:function", (analyzed run) -> findings (text)
    metrics: tuple[Metric, ...] = ()
    exports: tuple[Export, ...] = ()  # its numbers in Prometheus' text format
    # "module:function", (summary, ranks=run.json's ranks) -> text in nccl-tests' output
    # layout, for probes whose summary has nccl-tests' columns (`show --format nccl-tests`,
    # `export nccl-tests`)
    nccl_tests: str | None = None
    # "module:function", (analyzed run) -> rows of the report's overview of where a training
    # step's time goes: label and the % of the step in each OVERVIEW_PARTS part
    overview: str | None = None
    tables: tuple[str, ...] = field(default=())  # run-format tables it writes (default: name)
    ci_devices: tuple[str, ...] = ()  # the devices (cpu, cuda) whose `ci` suite runs it
    # the other suites that run it when --probes is not given (named, it runs in any suite):
    # studies too long for the quick suite's first look join from the standard suite
    suites: tuple[str, ...] = ("quick", "standard", "full")

    @property
    def table_names(self) -> tuple[str, ...]:
        """The parquet tables this probe's records consolidate into."""
        return self.tables or (self.name,)


OVERVIEW_PARTS = ("compute time", "exposed communication", "bubble / wait", "other")

ITERATION_OPTIONS = (
    Option(
        flag="--warmup",
        short="-w",
        dest="warmup_iters",
        field="warmup_iters",
        type=int,
        parse=non_negative_int,
        help="warmup iterations",
    ),
    Option(
        flag="--min-iters",
        field="min_iters",
        type=int,
        parse=positive_int,
        help="fewest timed iterations per case",
    ),
    Option(
        flag="--max-iters",
        field="max_iters",
        type=int,
        parse=positive_int,
        help="most timed iterations per case",
    ),
    Option(
        flag="--budget-ms",
        field="budget_s",
        type=float,
        parse=ms_to_s,
        help="time budget per case (iterations adapt)",
    ),
)

_SPECS: dict[str, ProbeSpec] = {}


def specs() -> dict[str, ProbeSpec]:
    """name -> spec of every registered probe, in sweep order."""
    if not _SPECS:
        for module_name in SPEC_MODULES:
            spec = importlib.import_module(module_name).SPEC
            if not isinstance(spec, ProbeSpec):
                raise TypeError(f"{module_name}.SPEC is not a ProbeSpec")
            _SPECS[spec.name] = spec
    return _SPECS


def names() -> tuple[str, ...]:
    """Every probe name, in sweep order."""
    return tuple(specs())


def get(name: str) -> ProbeSpec:
    """The spec of probe `name`; a UsageError naming the choices otherwise."""
    found = specs().get(name)
    if found is None:
        raise UsageError(f"unknown probe {name!r}", f"choose from {', '.join(names())}")
    return found


def suite_probes(suite: str, device: str) -> tuple[str, ...]:
    """The probes a sweep of `suite` on `device` runs when --probes is not given: those whose
    spec lists the suite, or for the `ci` suite the probes whose spec names the device."""
    if suite != "ci":
        return tuple(name for name, spec in specs().items() if suite in spec.suites)
    return tuple(name for name, spec in specs().items() if device in spec.ci_devices)


def beyond_quick() -> tuple[str, ...]:
    """The probes the standard suite runs and the quick suite does not."""
    quick = suite_probes("quick", "cpu")
    return tuple(p for p in suite_probes("standard", "cpu") if p not in quick)


def table_owner(table: str) -> ProbeSpec | None:
    """The probe whose records make `table` (None for telemetry or an unknown table)."""
    return next((s for s in specs().values() if table in s.table_names), None)


def load(ref: str) -> Any:
    """Import a `"module:attribute"` reference."""
    module_name, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def parse_option(option: Option, raw: Any) -> Any:
    """The field value of one option's raw value; a UsageError naming the option if bad."""
    if option.parse is None:
        return raw
    try:
        return option.parse(raw)
    except ValueError as exc:
        raise UsageError(f"invalid {option.flag} {raw!r}: {exc}", option.help) from None


def preset(
    spec: ProbeSpec, suite: str, device: str, num_nodes: int = 1, gpus_per_node: int = 1
) -> ProbeParams:
    """The probe's parameters in `suite` on `device` for a job of num_nodes x gpus_per_node.
    A probe outside the `ci` suite on every device, named anyway, runs its quick preset."""
    suite = "quick" if suite == "ci" and not spec.ci_devices else suite
    params = spec.suite(suite, device)
    if spec.for_job is not None:
        params = spec.for_job(params, suite, device, num_nodes, gpus_per_node)
    return params


def params_for(
    spec: ProbeSpec,
    suite: str,
    device: str,
    opts: Mapping[str, Any],
    num_nodes: int = 1,
    gpus_per_node: int = 1,
) -> ProbeParams:
    """The probe's parameters: the suite's preset for the device and job, then the options
    given (None = not given; the iteration options apply to every probe)."""
    base = preset(spec, suite, device, num_nodes, gpus_per_node)
    changes: dict[str, Any] = {}
    for option in (*spec.options, *ITERATION_OPTIONS):
        raw = opts.get(option.name)
        if raw is not None and option.field is not None:
            changes[option.field] = parse_option(option, raw)
    if spec.adjust is not None:
        changes.update(spec.adjust(base, opts))
    return replace(base, **changes)  # type: ignore[type-var]  # every params is a dataclass


def all_options() -> tuple[Option, ...]:
    """Every probe's options once (probes that train one model share its declarations: a
    sweep gives them one value), then the iteration options."""
    own = {id(o): o for s in specs().values() for o in s.options}
    return (*own.values(), *ITERATION_OPTIONS)


def option_names() -> tuple[str, ...]:
    """The keyword names of every probe option and the iteration options."""
    return tuple(o.name for o in all_options())


JOB_OVERHEAD_S = 10.0  # launch, rendezvous, describing the job, the report (2 CPU ranks here)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a probe will run in a job: cases one after another, and about how long."""

    probe: str
    cases: int
    seconds: float
    sampled: str | None = None  # what it samples on this job (ProbeSpec.sampled)

    def lines(self) -> list[str]:
        """The plan's comment lines: cases and seconds, and what it samples."""
        head = f"# {self.probe}: {self.cases} cases, about {self.seconds:.0f} s"
        return [head, *([f"#   {self.sampled}"] if self.sampled else [])]


# float32 matmul rate of one CPU rank, for the estimate of a model's step: the compute probe
# on the 2-core machine gpuprof is developed on measures 0.10-0.11 TFLOP/s per rank (n=1024,
# one thread a rank); a training step's other work is slower, so this is a lower bound
CPU_RANK_TFLOPS = 0.1


def estimate(
    spec: ProbeSpec,
    params: ProbeParams,
    num_nodes: int,
    gpus_per_node: int,
    link_gbps: float | None = None,
    rank_tflops: float | None = None,
) -> Estimate:
    """Cases x (time budget + the probe's per-case overhead), plus, on more than one node with
    the link rate known, what the network adds: a case of t seconds per iteration on the link
    runs its warmup, its correctness check (one more iteration) and at least its minimum
    iterations, so it adds (warmup + check) x t and whatever of min_iters x t its budget does
    not cover. Without the link rate, a lower bound. With a rank's compute rate
    (`rank_tflops`), a model's step adds the same way: (warmup + one more) x its time, and
    what of min_iters x its time the budget does not cover."""
    cases = spec.count_cases(params, num_nodes, gpus_per_node)
    seconds = cases * (params.budget_s + spec.case_overhead_s)
    if num_nodes > 1 and link_gbps and spec.link_bytes is not None:
        for nbytes in spec.link_bytes(params, num_nodes, gpus_per_node):
            per_iter = nbytes * 8 / (link_gbps * 1e9)
            seconds += (params.warmup_iters + bool(getattr(params, "check", False))) * per_iter
            seconds += max(0.0, params.min_iters * per_iter - params.budget_s)
    if rank_tflops and spec.step_flops is not None:  # a step longer than its budget allows
        for flops in spec.step_flops(params, num_nodes, gpus_per_node):
            per_iter = flops / (rank_tflops * 1e12)
            seconds += (params.warmup_iters + 1) * per_iter
            seconds += max(0.0, params.min_iters * per_iter - params.budget_s)
    sampled = spec.sampled(params, num_nodes, gpus_per_node) if spec.sampled else None
    return Estimate(probe=spec.name, cases=cases, seconds=seconds, sampled=sampled)
