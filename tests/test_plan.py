import pytest

from gpuprof.errors import UsageError
from gpuprof.machine.groups import intra_sizes, scope_groups
from gpuprof.runs.plan import SweepPlan
from gpuprof.specs.collectives import CollectivesParams, suite_collectives


def test_intra_sizes_single_node_leaves_the_full_node_to_global() -> None:
    assert intra_sizes(8, 1) == [2, 4]
    assert intra_sizes(2, 1) == []
    assert intra_sizes(8, 2) == [2, 4, 8]
    assert intra_sizes(6, 2) == [2, 4, 6]


def test_scope_groups_run_every_node_at_once() -> None:
    specs = scope_groups(2, 4, ("intra", "global"))
    assert [(s.scope, s.world_size) for s in specs] == [("intra", 2), ("intra", 4), ("global", 8)]
    assert specs[0].members == ((0, 1), (4, 5))
    assert specs[0].names == ("node0", "node1")
    assert specs[-1].members == (tuple(range(8)),)
    assert specs[-1].num_nodes == 2


def test_plan_round_trips_through_json() -> None:
    plan = SweepPlan(
        gpus_per_node=4, device="cpu", params={"collectives": suite_collectives("standard", "cpu")}
    )
    assert SweepPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ops": ("all_reduce", "gather")}, "unknown op 'gather'"),
        ({"dtypes": ("float64",)}, "unknown dtype"),
        ({"scopes": ("galaxy",)}, "unknown scope"),
        ({"redop": "prod"}, "unknown reduce op"),
        ({"min_iters": 0}, "iteration counts"),
    ],
)
def test_params_reject_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CollectivesParams(**kwargs)  # type: ignore[arg-type]


def test_plan_rejects_zero_gpus() -> None:
    with pytest.raises(UsageError, match="--gpus must be at least 1"):
        SweepPlan(gpus_per_node=0)


def test_gpu_suites_reach_larger_sizes() -> None:
    assert max(suite_collectives("quick", "cuda").sizes) > max(
        suite_collectives("quick", "cpu").sizes
    )
