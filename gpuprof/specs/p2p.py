"""The p2p probe: bandwidth (uni- and bidirectional) and latency of every pair of ranks, in
rounds of disjoint pairs, each pair classified by its link; on many nodes, a sample of the
node pairs that still meets every node several times (`node_pair_rounds`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuprof.errors import UsageError
from gpuprof.params import ProbeParams, check_choices, csv, non_negative_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.units import parse_size

P2P_MODES = ("uni", "bidir", "latency")
FULL_PAIRS_MAX_RANKS = 16  # above this, p2p measures pairs in a node plus the rails
# rounds of node pairs measured across nodes: every pair of nodes up to NODE_ROUNDS + 1 nodes
# (n - 1 rounds cover them, the circle method); beyond, NODE_ROUNDS rounds, each node with a
# different partner in each: the ring's two (three for an odd count) then random matchings
NODE_ROUNDS = 16


@dataclass(frozen=True, kw_only=True)
class P2PParams(ProbeParams):
    """Point-to-point: bandwidth at `size_bytes` (uni- and bidirectional) and ping-pong latency
    at `latency_bytes`, for every pair of ranks in rounds of disjoint pairs."""

    modes: tuple[str, ...] = P2P_MODES
    size_bytes: int = 4 << 20
    latency_bytes: int = 8
    node_rounds: int = NODE_ROUNDS  # rounds of node pairs at most (0: every pair of nodes)
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
    return P2PParams(size_bytes=size, budget_s={"quick": 0.1, "standard": 0.25}.get(suite, 0.5))


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


def circle_round(items: list[int], k: int) -> list[tuple[int, int]]:
    """Round k of the circle method: the first item fixed, the others turned k places, item i
    paired with item n - 1 - i (an odd count: one item rests each round)."""
    pool: list[int | None] = list(items) + ([None] if len(items) % 2 else [])
    tail = pool[1:]
    k %= len(tail)
    pool = [pool[0], *tail[len(tail) - k :], *tail[: len(tail) - k]]
    pairs = [(pool[i], pool[-1 - i]) for i in range(len(pool) // 2)]
    return sorted((min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None)


def round_robin(items: list[int]) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair once (the circle method): n-1 rounds for
    even n, n rounds for odd n (one item rests each round)."""
    count = len(items) - 1 + len(items) % 2
    return [circle_round(items, k) for k in range(count)] if len(items) > 1 else []


def ring_rounds(num_nodes: int) -> list[list[tuple[int, int]]]:
    """The ring's pairs (node i with i + 1, and the last with the first) as rounds of disjoint
    pairs: two rounds for an even count, three for an odd one."""
    n = num_nodes
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    even = [(i, i + 1) for i in range(0, n - 1, 2)]
    odd = [(i, i + 1) for i in range(1, n - 1, 2)]
    last = (0, n - 1)
    if n % 2 == 0:
        return [even, [*odd, last]]
    return [even, odd, [last]]


def node_pair_rounds(num_nodes: int, most: int = NODE_ROUNDS) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint node pairs. Every pair of nodes (the circle method, n - 1 rounds)
    when that is at most `most` rounds (or `most` is 0); else `most` rounds: the ring's, so
    every node meets both neighbours, then rounds of the circle method spread over its n - 1
    (each a perfect matching, no pair twice among them), so each node meets about `most`
    different partners. A slow node (NIC, cable, switch port) is in every one of its pairs;
    a slow path between two particular nodes is found when the sample meets it."""
    every = num_nodes - 1 + num_nodes % 2  # the circle method's rounds
    nodes = list(range(num_nodes))
    if most == 0 or every <= most:
        return round_robin(nodes)
    rounds = ring_rounds(num_nodes)[:most]
    more = most - len(rounds)
    rounds += [circle_round(nodes, j * every // more) for j in range(more)]
    return rounds


def pair_rounds(
    num_nodes: int, gpus_per_node: int, node_rounds: int = NODE_ROUNDS
) -> list[list[tuple[int, int]]]:
    """The p2p schedule: rounds of disjoint pairs, measured one round after another.

    First the pairs inside a node (circle-method rounds, every node at once). Then the pairs
    across nodes, round by round of node pairs (`node_pair_rounds`: every pair of nodes, or a
    sample of `node_rounds` rounds on many nodes), with at most one pair per pair of nodes in a
    round, so a pair never shares its nodes' network link with another pair: up to
    FULL_PAIRS_MAX_RANKS ranks every such pair is measured; beyond, only the rails (local rank r
    with local rank r, every r at once, as each rail has its own NIC on GPU clusters). The
    number of rounds does not grow with the node count beyond `node_rounds`."""
    g = gpus_per_node
    rounds = [
        [(n * g + a, n * g + b) for n in range(num_nodes) for a, b in local]
        for local in round_robin(list(range(g)))
    ]
    full = num_nodes * g <= FULL_PAIRS_MAX_RANKS
    for nodes in node_pair_rounds(num_nodes, node_rounds):
        if full:
            rounds += [
                [(i * g + a, j * g + b) for i, j in nodes] for a in range(g) for b in range(g)
            ]
        else:
            rounds.append([(i * g + r, j * g + r) for i, j in nodes for r in range(g)])
    return [pairs for pairs in rounds if pairs]


def sampled_note(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> str | None:
    """What p2p leaves out on this many nodes, for the plan's estimate (None: every pair)."""
    assert isinstance(params, P2PParams)
    measured = node_pair_rounds(num_nodes, params.node_rounds)
    every = num_nodes * (num_nodes - 1) // 2
    met = len({p for r in measured for p in r})
    if met == every:
        return None
    return (
        f"p2p across nodes: {len(measured)} rounds of node pairs, {met:,} of the {every:,} pairs "
        f"of nodes (every node with {min(len(measured), num_nodes - 1)} partners; "
        "--p2p-node-rounds 0 for every pair)"
    )


def count_cases(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> int:
    """Every mode in every round of pairs (the pairs of a round at the same time)."""
    assert isinstance(params, P2PParams)
    return len(params.modes) * len(pair_rounds(num_nodes, gpus_per_node, params.node_rounds))


def link_bytes(params: ProbeParams, num_nodes: int, gpus_per_node: int) -> list[float]:
    """Per case (mode x round): bytes the busiest node's NIC sends per iteration: the size for
    each of its cross-node pairs (bidir: both ends send; latency: negligible)."""
    assert isinstance(params, P2PParams)
    out: list[float] = []
    for mode in params.modes:
        for pairs in pair_rounds(num_nodes, gpus_per_node, params.node_rounds):
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
        Option(
            flag="--p2p-node-rounds",
            field="node_rounds",
            type=int,
            parse=non_negative_int,
            help=f"p2p: rounds of node pairs across nodes at most (default {NODE_ROUNDS}; "
            "0: every pair of nodes)",
        ),
    ),
    count_cases=count_cases,
    sampled=sampled_note,
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
