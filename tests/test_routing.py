"""MoE routing plans: every count against a direct computation of the rule it states."""

from __future__ import annotations

import math

import pytest

from gpuprof.errors import UsageError
from gpuprof.specs.routing import Routing, apportion, zipf_weights


def routing(skew: float, **kw: object) -> Routing:
    base: dict[str, object] = {"ranks": 4, "tokens": 1000, "experts": 8, "top_k": 2}
    base.update(kw)
    experts = int(base["experts"])  # type: ignore[call-overload]
    return Routing(weights=tuple(zipf_weights(experts, skew)), **base)  # type: ignore[arg-type]


def test_uniform_routing_is_even() -> None:
    r = routing(0.0)
    assert r.choices == [250] * 8 and r.imbalance() == 1.0 and r.dropped == 0
    assert r.dispatch_tokens() == [[500] * 4] * 4  # 2 experts a rank, 250 tokens each


@pytest.mark.parametrize("skew", [0.3, 0.8, 1.0, 1.2])
def test_zipf_shares_are_the_law_within_one_token(skew: float) -> None:
    r = routing(skew)
    law = [1 / (e + 1) ** skew for e in range(8)]
    exact = [2000 * w / sum(law) for w in law]
    assert sum(r.choices) == 2000
    assert all(abs(c - x) < 1 for c, x in zip(r.choices, exact, strict=True)), r.choices


def test_a_hot_expert_takes_each_token_once_and_its_excess_goes_by_weight() -> None:
    r = routing(3.0)
    assert r.choices[0] == 1000  # every token picks expert 0, none twice
    law = [1 / (e + 1) ** 3.0 for e in range(1, 8)]
    exact = [1000 * w / sum(law) for w in law]  # the other 1000 choices by the others' law
    assert all(abs(c - x) < 1 for c, x in zip(r.choices[1:], exact, strict=True)), r.choices


@pytest.mark.parametrize(("skew", "factor"), [(0.0, 1.0), (1.0, 1.0), (1.0, 1.25), (2.0, 2.0)])
def test_capacity_drops_what_is_over_each_experts_share(skew: float, factor: float) -> None:
    r = routing(skew, capacity_factor=factor)
    cap = math.floor(factor * 1000 * 2 / 8)
    assert r.capacity == cap
    assert r.kept == [min(c, cap) for c in r.choices]
    assert r.dropped == sum(max(c - cap, 0) for c in r.choices)
    sent = r.dispatch_tokens()
    assert all(sum(row) == sum(r.kept) for row in sent)  # every kept token goes somewhere


@pytest.mark.parametrize("placement", ["contiguous", "round_robin"])
def test_dispatch_sends_each_expert_its_tokens_at_its_rank(placement: str) -> None:
    r = routing(1.0, placement=placement)
    owner = [e // 2 if placement == "contiguous" else e % 4 for e in range(8)]
    expect = [sum(c for e, c in enumerate(r.kept) if owner[e] == dst) for dst in range(4)]
    assert r.dispatch_tokens() == [expect] * 4
    received = [4 * x for x in expect]
    assert r.imbalance() == pytest.approx(max(received) / (sum(received) / 4))


def test_hierarchical_dispatch_stays_in_the_node_then_crosses_at_one_local_index() -> None:
    r = routing(1.0, ranks=8, experts=16)
    flat = r.dispatch_tokens()
    intra, inter = r.hierarchical_tokens(gpus_per_node=4)
    for src in range(8):
        for hop in range(8):
            if intra[src][hop]:
                assert hop // 4 == src // 4  # first only inside the node
            if inter[src][hop]:
                assert hop % 4 == src % 4  # then across nodes at the same local index
        assert sum(intra[src]) == sum(flat[src])
    for dst in range(8):
        assert sum(inter[h][dst] for h in range(8)) == sum(flat[s][dst] for s in range(8))


def test_apportion_keeps_the_total_and_the_cap() -> None:
    assert apportion(10, [0.5, 0.5, 0.0], 4) == [4, 4, 2]  # capped: the rest evenly
    assert apportion(7, [1.0, 1.0, 1.0], 3) == [3, 2, 2]
    with pytest.raises(UsageError):
        apportion(10, [1.0, 1.0], 4)


@pytest.mark.parametrize(
    "kw",
    [
        {"experts": 6},  # 6 experts over 4 ranks
        {"top_k": 9},
        {"placement": "random"},
        {"capacity_factor": 0.0},
        {"tokens": 0},
    ],
)
def test_bad_routings_are_usage_errors(kw: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        routing(1.0, **kw)
