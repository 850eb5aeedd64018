"""A mixture-of-experts layer's token routing, as a plan every rank can compute alike: how
many tokens each rank sends each expert, which tokens a capacity factor drops, and the split
sizes of the dispatch (and of the combine, its transpose) between every pair of ranks, flat
or hierarchical. Pure arithmetic: the probe measures what this plan says to send, and the
bytes it says are the theory the measurement is checked against.

The model (every rank routes alike, as a gate with a fixed load per expert does):
- each of `ranks` ranks holds `tokens` tokens and sends each to `top_k` distinct experts of
  `experts`; expert e's share of the choices is w_e, from a Zipf law of exponent `skew`
  (w_e proportional to 1 / (e + 1) ** skew: 0 is uniform, expert 0 the hottest) or from a
  histogram of counts per expert (`weights`);
- a rank's `tokens * top_k` choices are apportioned to experts by largest remainder, no expert
  more than `tokens` (a token picks an expert once): the excess of a hot expert goes to the
  others in proportion to their weights;
- with a capacity factor C, each expert takes at most floor(C * tokens * top_k / experts)
  tokens from each rank (the capacity is computed on each rank's own batch before the
  dispatch, as GShard and Switch Transformer do); the rest are dropped;
- experts are placed contiguously (expert e on rank e // (experts / ranks)) or round-robin
  (e % ranks);
- a dispatch sends each kept token's hidden vector to the rank of its expert (itself
  included: that part is a local copy); the combine sends it back;
- hierarchically (Tutel's 2D all-to-all, `gpus_per_node` ranks a node): first inside the
  node, each token to the rank with its destination's local index, then across nodes between
  the ranks of that local index, so the network carries one exchange per pair of nodes and
  local index instead of one per pair of ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuprof.errors import UsageError

PLACEMENTS = ("contiguous", "round_robin")


def zipf_weights(experts: int, skew: float) -> list[float]:
    """Expert shares under a Zipf law of exponent `skew` (summing to 1)."""
    raw = [1.0 / (e + 1) ** skew for e in range(experts)]
    total = sum(raw)
    return [w / total for w in raw]


def apportion(total: int, weights: list[float], cap: int) -> list[int]:
    """`total` whole units over `weights` by largest remainder, none above `cap`: the shares
    over the cap are capped first (water-filling), and the rest goes to the others in
    proportion to their weights (evenly where they weigh nothing), in one apportionment."""
    if total > cap * len(weights):
        raise UsageError(f"{total} choices do not fit {len(weights)} experts of {cap} each")
    capped: set[int] = set()
    while True:
        free = [i for i in range(len(weights)) if i not in capped]
        rest = total - cap * len(capped)
        mass = sum(weights[i] for i in free)
        share = {i: (weights[i] / mass if mass > 0 else 1 / len(free)) * rest for i in free}
        over = {i for i in free if share[i] > cap}
        if not over:
            break
        capped |= over
    counts = [cap if i in capped else int(share[i]) for i in range(len(weights))]
    remainder = total - sum(counts)
    for i in sorted(free, key=lambda i: (int(share[i]) - share[i], i)):
        if remainder and counts[i] < cap:
            counts[i] += 1
            remainder -= 1
    return counts


@dataclass(frozen=True)
class Routing:
    """One MoE layer's routing on `ranks` ranks."""

    ranks: int
    tokens: int  # per rank
    experts: int
    top_k: int
    weights: tuple[float, ...]  # per expert, summing to 1
    placement: str = "contiguous"
    capacity_factor: float | None = None

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.tokens < 1 or self.experts < 1:
            raise UsageError("ranks, tokens and experts must be positive")
        if not 1 <= self.top_k <= self.experts:
            raise UsageError(f"top-k {self.top_k} must be 1 to the {self.experts} experts")
        if self.experts % self.ranks:
            raise UsageError(
                f"{self.experts} experts do not divide over {self.ranks} ranks",
                "give a multiple of the rank count",
            )
        if self.placement not in PLACEMENTS:
            raise UsageError(f"unknown placement {self.placement!r}", "contiguous or round_robin")
        if self.capacity_factor is not None and self.capacity_factor <= 0:
            raise UsageError("the capacity factor must be positive")

    @property
    def choices(self) -> list[int]:
        """Tokens each rank sends each expert, before any drop (every rank alike)."""
        return apportion(self.tokens * self.top_k, list(self.weights), self.tokens)

    @property
    def capacity(self) -> int | None:
        """Tokens an expert takes from each rank at most (None: no capacity factor)."""
        if self.capacity_factor is None:
            return None
        return max(1, math.floor(self.capacity_factor * self.tokens * self.top_k / self.experts))

    @property
    def kept(self) -> list[int]:
        """Tokens each rank sends each expert after the capacity drops."""
        cap = self.capacity
        return self.choices if cap is None else [min(c, cap) for c in self.choices]

    @property
    def dropped(self) -> int:
        """Tokens each rank drops (choices over capacity)."""
        return sum(self.choices) - sum(self.kept)

    def owner(self, expert: int) -> int:
        """The rank that holds an expert."""
        if self.placement == "round_robin":
            return expert % self.ranks
        return expert // (self.experts // self.ranks)

    def dispatch_tokens(self) -> list[list[int]]:
        """[src][dst]: tokens rank src sends rank dst in the dispatch (flat)."""
        per_rank = [0] * self.ranks
        for expert, count in enumerate(self.kept):
            per_rank[self.owner(expert)] += count
        return [list(per_rank) for _ in range(self.ranks)]  # every rank routes alike

    def hierarchical_tokens(self, gpus_per_node: int) -> tuple[list[list[int]], list[list[int]]]:
        """The two stages of a hierarchical dispatch, [src][dst] tokens each: inside the node
        to the rank with the destination's local index, then across nodes between ranks of
        the same local index (Tutel's 2D all-to-all)."""
        if self.ranks % gpus_per_node:
            raise UsageError(f"{self.ranks} ranks are not whole nodes of {gpus_per_node}")
        flat = self.dispatch_tokens()
        intra = [[0] * self.ranks for _ in range(self.ranks)]
        inter = [[0] * self.ranks for _ in range(self.ranks)]
        for src in range(self.ranks):
            node = src // gpus_per_node
            for dst in range(self.ranks):
                hop = node * gpus_per_node + dst % gpus_per_node
                intra[src][hop] += flat[src][dst]
                inter[hop][dst] += flat[src][dst]
        return intra, inter

    def imbalance(self) -> float:
        """Tokens received by the busiest rank over the mean (1 = balanced)."""
        received = [sum(col) for col in zip(*self.dispatch_tokens(), strict=True)]
        mean = sum(received) / len(received)
        return max(received) / mean if mean else 1.0
