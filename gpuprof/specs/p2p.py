"""The p2p probe: bandwidth (uni- and bidirectional) and latency of every pair of ranks, in
rounds of disjoint pairs, each pair classified by its link."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices, csv
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.units import parse_size

P2P_MODES = ("uni", "bidir", "latency")
FULL_PAIRS_MAX_RANKS = 16  # above this, p2p measures pairs in a node plus the rails


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
        check_choices("p2p mode", self.modes, P2P_MODES)
        if self.size_bytes <= 0 or self.latency_bytes <= 0:
            raise UsageError("p2p sizes must be positive")
        self._check_iterations()


def suite_p2p(suite: str, device: str) -> P2PParams:
    """Pair bandwidth at a size past the latency-bound range: 256 MiB on GPU, 4-16 MiB on CPU."""
    gpu = device == "cuda"
    size = (256 << 20) if gpu else {"quick": 4 << 20, "standard": 16 << 20, "full": 16 << 20}[suite]
    return P2PParams(size_bytes=size, budget_s=0.1 if suite == "quick" else 0.5)


def quick_for_job(
    params: ProbeParams, suite: str, device: str, num_nodes: int, gpus_per_node: int
) -> ProbeParams:
    """The quick suite on more than one node: one warmup and 3 timed iterations at least per
    pair round (most rounds cross the network), and on CPU 1 MiB per transfer (gloo over
    TCP is bandwidth-bound from about 1 MiB)."""
    assert isinstance(params, P2PParams)
    if suite != "quick" or num_nodes == 1:
        return params
    size = params.size_bytes if device == "cuda" else 1 << 20
    return replace(params, size_bytes=size, warmup_iters=1, min_iters=3)


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


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every mode in every round of pairs (the pairs of a round at the same time)."""
    assert isinstance(params, P2PParams)
    return len(params.modes) * len(pair_rounds(num_nodes, gpus_per_node))


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case (mode x round): bytes the busiest node's NIC sends per iteration: the size for
    each of its cross-node pairs (bidir: both ends send; latency: negligible)."""
    assert isinstance(params, P2PParams)
    out: list[float] = []
    for mode in params.modes:
        for pairs in pair_rounds(num_nodes, gpus_per_node):
            sends = [0] * num_nodes
            for a, b in pairs:
                if a // gpus_per_node != b // gpus_per_node and mode != "latency":
                    sends[a // gpus_per_node] += 1
                    if mode == "bidir":
                        sends[b // gpus_per_node] += 1
            out.append(float(max(sends) * params.size_bytes))
    return out


_KEYS = ("mode", "rank_a", "rank_b", "size_bytes")

_PAIR_LABELS = (
    ("rank_a", "rank_a"),
    ("rank_b", "rank_b"),
    ("host", "host_a"),
    ("host_b", "host_b"),
    ("link_class", "link_class"),
)

SPEC = ProbeSpec(
    name="p2p",
    help="Bandwidth (uni- and bidirectional) and latency of every pair of ranks, classified by "
    "link.\n\nExample: gpuprof run p2p --gpus 8 --p2p-bytes 256M",
    params=P2PParams,
    suite=suite_p2p,
    options=(
        Option(
            flag="--p2p-bytes",
            field="size_bytes",
            parse=parse_size,
            help="p2p: bandwidth message size, e.g. 64M",
        ),
        Option(
            flag="--p2p-modes", field="modes", parse=csv, help=f"p2p modes: {','.join(P2P_MODES)}"
        ),
    ),
    count_cases=count_cases,
    link_bytes=link_bytes,
    for_job=quick_for_job,
    case_overhead_s=0.03,
    rank_module="gpuprof.probes.p2p",
    summarize="gpuprof.analysis.p2p:summarize_run",
    columns=(
        ("mode", "mode"),
        ("rank_a", "a"),
        ("rank_b", "b"),
        ("host_a", "host_a"),
        ("host_b", "host_b"),
        ("link_class", "link"),
        ("size_bytes", "size"),
        ("time_us", "time_us"),
        ("bw_gbps", "GB/s"),
        ("latency_us", "lat_us"),
        ("pct_of_class", "%class"),
        ("flagged", "flag"),
        ("nwrong", "#wrong"),
    ),
    section="gpuprof.reports.sections.p2p:section",
    advice="gpuprof.advice.p2p:findings",
    metrics=(
        Metric(column="bw_gbps", better="higher", keys=_KEYS),
        Metric(column="latency_us", better="lower", keys=_KEYS),
    ),
    exports=(
        Export(
            name="p2p_bandwidth_bytes_per_second",
            help="Point-to-point bandwidth of a pair of ranks (uni or bidirectional).",
            column="bw_gbps",
            scale=1e9,
            labels=(*_PAIR_LABELS, ("mode", "mode")),
            keep=lambda r: r["mode"] != "latency",
        ),
        Export(
            name="p2p_latency_seconds",
            help="Point-to-point one-way latency of a pair of ranks (ping-pong / 2).",
            column="latency_us",
            divisor=1e6,
            labels=_PAIR_LABELS,
            keep=lambda r: r["mode"] == "latency",
        ),
    ),
)
