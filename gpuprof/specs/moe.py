"""The MoE probe: a mixture-of-experts layer's token dispatch and combine (`all_to_all_single`
with the uneven splits its routing gives), per routing skew, capacity factor, expert
placement and layout (flat, or hierarchical: across nodes first, then inside the node), over
every rank of the job. The routing is `specs.routing`'s plan: the bytes it says each rank
sends are the theory the measured bytes are checked against."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices, csv, positive_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.routing import PLACEMENTS, Routing, zipf_weights

LAYOUTS = ("flat", "hierarchical")
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}


def floats(text: str) -> tuple[float, ...]:
    """'0,0.5,1.2' -> (0.0, 0.5, 1.2); each at least 0."""
    values = tuple(float(p) for p in csv(text))
    if min(values) < 0:
        raise ValueError("values must be at least 0")
    return values


def read_histogram(path: str) -> tuple[float, ...]:
    """Token counts per expert from a file: a JSON list, or numbers separated by commas,
    spaces or new lines; a ValueError saying what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror})") from None
    try:
        values = (
            json.loads(text) if text.lstrip().startswith("[") else text.replace(",", " ").split()
        )
        counts = tuple(float(v) for v in values)
    except (ValueError, TypeError):
        raise ValueError("not a list of token counts per expert") from None
    if not counts or min(counts) < 0 or not sum(counts):
        raise ValueError("token counts must be at least 0, and not all 0")
    return counts


# a model's MoE layer in its Hugging Face config.json, as Mixtral, DeepSeek-V2/V3, Qwen-MoE,
# OLMoE and DBRX (its ffn_config) name them: our field -> the keys, first found wins
CONFIG_KEYS = {
    "experts_total": ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k"),
    "hidden": ("hidden_size", "d_model"),
}
# the options that, given too, keep their own value
CONFIG_FLAGS = {"experts_total": "", "top_k": "moe_top_k", "hidden": "moe_hidden"}


def read_model_config(path: str) -> dict[str, int]:
    """A model's MoE layer (experts, top-k, hidden size) from its config.json; a ValueError
    saying what is missing."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror})") from None
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(config, dict):
        raise ValueError("not a JSON object")
    # the keys at the top, else in one nested section (DBRX's ffn_config, a text_config)
    places = [config, *(v for v in config.values() if isinstance(v, dict))]
    found: dict[str, int] = {}
    for name, keys in CONFIG_KEYS.items():
        for place in places:
            value = next((place[k] for k in keys if k in place), None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                found[name] = value
                break
    missing = [CONFIG_KEYS[k][0] for k in ("experts_total", "top_k") if k not in found]
    if missing:
        raise ValueError(f"no MoE layer in it (no {' or '.join(missing)})")
    return found


@dataclass(frozen=True, kw_only=True)
class MoEParams(ProbeParams):
    """One MoE layer: `tokens` tokens of `hidden` values per rank, each sent to `top_k` of
    `experts_per_rank` x ranks experts (or as many as `histogram` counts), per skew (Zipf
    exponent) or the histogram, capacity factor (0: none), placement and layout."""

    skews: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5)
    histogram: tuple[float, ...] = ()  # token counts per expert (--moe-routing FILE)
    experts_total: int = 0  # the model's experts in all (--moe-config); 0: per rank
    experts_per_rank: int = 2
    top_k: int = 2
    tokens: int = 512
    hidden: int = 256
    dtype: str = "float32"
    capacity_factors: tuple[float, ...] = (0.0, 1.25)
    placements: tuple[str, ...] = ("contiguous",)
    layouts: tuple[str, ...] = LAYOUTS
    warmup_iters: int = 2
    min_iters: int = 5
    max_iters: int = 200
    budget_s: float = 0.25

    def __post_init__(self) -> None:
        check_choices("expert placement", self.placements, PLACEMENTS)
        check_choices("MoE layout", self.layouts, LAYOUTS)
        check_choices("MoE dtype", (self.dtype,), tuple(DTYPES))
        if not self.skews and not self.histogram:
            raise UsageError("give a routing skew (--moe-skew) or a histogram (--moe-routing)")
        if min(self.experts_per_rank, self.top_k, self.tokens, self.hidden) < 1:
            raise UsageError("MoE experts, top-k, tokens and hidden size must be positive")
        if min(self.capacity_factors, default=0) < 0:
            raise UsageError("capacity factors must be at least 0 (0: no capacity)")
        self._check_iterations()

    def experts(self, ranks: int) -> int:
        """Experts on a job of `ranks` ranks."""
        if self.histogram:
            return len(self.histogram)
        return self.experts_total or self.experts_per_rank * ranks

    def routings(self, ranks: int) -> list[tuple[str, Routing]]:
        """Every routing measured, with its label (the skew, or "histogram")."""
        experts = self.experts(ranks)
        if self.histogram:
            total = sum(self.histogram)
            loads = [("histogram", tuple(c / total for c in self.histogram))]
        else:
            loads = [(f"{s:g}", tuple(zipf_weights(experts, s))) for s in self.skews]
        return [
            (
                label,
                Routing(
                    ranks=ranks,
                    tokens=self.tokens,
                    experts=experts,
                    top_k=self.top_k,
                    weights=weights,
                    placement=placement,
                    capacity_factor=factor or None,
                ),
            )
            for label, weights in loads
            for factor in self.capacity_factors
            for placement in self.placements
        ]

    def layouts_for(self, num_nodes: int, gpus_per_node: int) -> tuple[str, ...]:
        """Hierarchical differs from flat only across several nodes of several ranks."""
        several = num_nodes > 1 and gpus_per_node > 1
        return tuple(x for x in self.layouts if x == "flat" or several) or ("flat",)

    def check_job(self, num_nodes: int, gpus_per_node: int, device: str) -> None:
        """Experts must divide over the ranks, and a token's top-k fit them."""
        ranks = num_nodes * gpus_per_node
        experts = self.experts(ranks)
        if experts % ranks:
            given = "--moe-routing" if self.histogram else "--moe-config"
            raise UsageError(
                f"{experts} experts ({given}) do not divide over {ranks} ranks",
                "run on a number of ranks that divides the experts",
            )
        if self.top_k > experts:
            raise UsageError(f"--moe-top-k {self.top_k} is more than the {experts} experts")


def suite_moe(suite: str, device: str) -> MoEParams:
    """GPU: a Mixtral/DeepSeek-sized layer (4096 tokens of 4096 bf16 values a rank, top-2,
    8 experts a rank); CPU: 512 tokens of 256 float32 values, top-2, 2 experts a rank."""
    if device == "cuda":
        return MoEParams(
            tokens=4096, hidden=4096, dtype="bfloat16", experts_per_rank=8, budget_s=0.5
        )
    if suite in ("quick", "ci"):
        return MoEParams(skews=(0.0, 1.0), capacity_factors=(0.0,), budget_s=0.15)
    return MoEParams()


def _model_config(base: ProbeParams, opts: Mapping[str, Any]) -> dict[str, Any]:
    """--moe-config: the model's experts, top-k and hidden size, where --moe-top-k and
    --moe-hidden do not say otherwise."""
    path = opts.get("moe_config")
    if path is None:
        return {}
    try:
        found = read_model_config(str(path))
    except ValueError as exc:
        raise UsageError(
            f"invalid --moe-config {path!r}: {exc}", "a Hugging Face config.json"
        ) from None
    return {
        k: v for k, v in found.items() if not CONFIG_FLAGS[k] or opts.get(CONFIG_FLAGS[k]) is None
    }


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every routing (skew or histogram x capacity x placement) in every layout."""
    assert isinstance(params, MoEParams)
    loads = 1 if params.histogram else len(params.skews)
    per_layout = loads * len(params.capacity_factors) * len(params.placements)
    return per_layout * len(params.layouts_for(num_nodes, gpus_per_node))


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case: bytes the busiest node's NIC sends per iteration, dispatch and combine (every
    rank routes alike, so every node sends the same)."""
    assert isinstance(params, MoEParams)
    ranks = num_nodes * gpus_per_node
    if params.experts(ranks) % ranks:
        return []
    width = params.hidden * DTYPES[params.dtype]
    out = []
    # both layouts send each crossing token over the network once each way
    for _ in params.layouts_for(num_nodes, gpus_per_node):
        for _, routing in params.routings(ranks):
            sent = routing.dispatch_tokens()
            crossing = sum(
                sent[src][dst]
                for src in range(gpus_per_node)
                for dst in range(ranks)
                if dst // gpus_per_node != 0
            )
            out.append(float(2 * crossing * width))
    return out


_KEYS = ("skew", "capacity_factor", "placement", "layout", "experts", "top_k", "tokens", "hidden")

SPEC = ProbeSpec(
    name="moe",
    help="Mixture-of-experts token dispatch and combine (all_to_all_single with the uneven "
    "splits a routing gives) per routing skew (Zipf exponent) or a routing histogram, "
    "capacity factor, expert placement and layout (flat, or hierarchical across nodes then "
    "inside them): time per rank, the slowest rank's wait, bytes against theory, dropped "
    "tokens.\n\nExample: gpuprof run moe --gpus 8 --moe-skew 0,1,1.5 --capacity-factor 0,1.25",
    params=MoEParams,
    suite=suite_moe,
    options=(
        Option(
            flag="--moe-skew",
            field="skews",
            parse=floats,
            help="moe: Zipf exponents of the experts' load, e.g. 0,0.5,1 (0: uniform)",
        ),
        Option(
            flag="--moe-routing",
            field="histogram",
            parse=read_histogram,
            help="moe: a file of token counts per expert (JSON list or numbers): the routing "
            "a real gate gave, instead of --moe-skew",
        ),
        Option(
            flag="--moe-config",
            help="moe: your model's config.json (Hugging Face: Mixtral, DeepSeek, Qwen-MoE, "
            "...): its experts, top-k and hidden size",
        ),
        Option(
            flag="--moe-experts-per-rank",
            field="experts_per_rank",
            type=int,
            parse=positive_int,
            help="moe: experts on each rank",
        ),
        Option(flag="--moe-top-k", field="top_k", type=int, parse=positive_int, help="moe: top-k"),
        Option(
            flag="--moe-tokens",
            field="tokens",
            type=int,
            parse=positive_int,
            help="moe: tokens per rank and layer",
        ),
        Option(
            flag="--moe-hidden",
            field="hidden",
            type=int,
            parse=positive_int,
            help="moe: values per token (the model's hidden size)",
        ),
        Option(flag="--moe-dtype", field="dtype", help=f"moe: {', '.join(DTYPES)}"),
        Option(
            flag="--capacity-factor",
            field="capacity_factors",
            parse=floats,
            help="moe: capacity factors, e.g. 0,1.25 (0: no capacity; tokens over it dropped)",
        ),
        Option(
            flag="--moe-placement",
            field="placements",
            parse=csv,
            help=f"moe: expert placement: {','.join(PLACEMENTS)}",
        ),
        Option(flag="--moe-layout", field="layouts", parse=csv, help=f"moe: {','.join(LAYOUTS)}"),
    ),
    adjust=_model_config,
    count_cases=count_cases,
    link_bytes=link_bytes,
    case_overhead_s=0.1,
    rank_module="gpuprof.probes.moe",
    summarize="gpuprof.analysis.moe:summarize_run",
    columns=(
        ("skew", "skew"),
        ("capacity_factor", "cap"),
        ("placement", "placement"),
        ("layout", "layout"),
        ("dispatch_us", "dispatch_us"),
        ("combine_us", "combine_us"),
        ("wait_pct", "wait%"),
        ("imbalance", "imbal"),
        ("max_sent_bytes", "sent max"),
        ("sent_ratio", "/theory"),
        ("dropped", "dropped"),
        ("busbw_gbps", "busbw"),
        ("nwrong", "#wrong"),
    ),
    section="gpuprof.reports.sections.moe:section",
    nccl_tests="gpuprof.reports.sections.moe:nccl_tests",
    advice="gpuprof.advice.moe:findings",
    suites=("standard", "full"),
    metrics=(
        Metric(column="dispatch_us", better="lower", keys=_KEYS),
        Metric(column="combine_us", better="lower", keys=_KEYS),
    ),
    exports=(
        Export(
            name="moe_dispatch_seconds",
            help="MoE token dispatch (all_to_all_single, uneven splits): slowest rank, median.",
            column="dispatch_us",
            divisor=1e6,
            labels=(("skew", "skew"), ("capacity_factor", "capacity_factor"), ("layout", "layout")),
        ),
        Export(
            name="moe_combine_seconds",
            help="MoE token combine (the dispatch's reverse): slowest rank, median.",
            column="combine_us",
            divisor=1e6,
            labels=(("skew", "skew"), ("capacity_factor", "capacity_factor"), ("layout", "layout")),
        ),
    ),
)
