"""`--model package.module:factory`: the user's own model in the ddp and sharded probes (real
2-rank gloo runs), and what a user gets when the factory is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.runs.store import Run
from tests.conftest import Gp

EXAMPLE = "examples.own_model.mlp:build"
# the example's parameters: 4 residual blocks (a norm, fc 512->2048, fc 2048->512) and a head
WIDTH, CLASSES = 512, 100
EXAMPLE_PARAMS = 4 * (2 * WIDTH + WIDTH * 4 * WIDTH + 4 * WIDTH + 4 * WIDTH * WIDTH + WIDTH)
EXAMPLE_PARAMS += WIDTH * CLASSES + CLASSES
FAST = ["--device", "cpu", "--gpus", "2", "--no-telemetry", "--budget-ms", "50"]
FAST += ["--min-iters", "2", "--warmup", "1"]


def measure(gp: Gp, out: Path, probe: str, model: str, *args: str) -> Run:
    """`gpuprof run PROBE` on 2 CPU ranks with `--model`; the run it wrote."""
    result = gp("run", probe, *FAST, "--model", model, *args, "--out", out, "--format", "json")
    assert result.code == 0, result.err
    return open_run(json.loads(result.out)["run"])


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "expected package.module:function"),
        ("nosuch.module:build", "cannot find nosuch.module"),
        ("examples.own_model.mlp:nope", "defines no 'nope'"),
    ],
)
def test_a_bad_model_is_refused_before_launch(gp: Gp, tmp_path: Path, spec: str, says: str) -> None:
    result = gp("run", "ddp", *FAST, "--model", spec, "--out", tmp_path)
    assert result.code == 2 and says in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing launched, nothing written


@pytest.mark.gloo("ddp")
def test_ddp_trains_the_users_model(gp: Gp, tmp_path: Path) -> None:
    run = measure(gp, tmp_path, "ddp", EXAMPLE, "--ddp-variants", "default")
    rows = run.table("ddp")
    assert set(rows["model"]) == {EXAMPLE}
    assert set(rows["num_params"]) == {EXAMPLE_PARAMS}  # the user's model, not ours
    assert set(rows["samples_per_step"]) == {32}  # its batch's leading dimension
    assert set(rows["world_size"]) == {1, 2}


@pytest.mark.gloo("sharded")
def test_sharded_strategies_train_the_users_model(gp: Gp, tmp_path: Path) -> None:
    run = measure(gp, tmp_path, "sharded", EXAMPLE, "--strategies", "ddp,fsdp", "--no-scaling")
    rows = run.table("sharded")
    assert set(rows["num_params"]) == {EXAMPLE_PARAMS}
    # the bytes each rank sends match theory for the user's parameter count
    ratio = rows["sent_bytes"] / rows["theory_sent_bytes"]
    assert ratio.between(0.99, 1.01).all(), ratio


def test_a_factory_that_returns_the_wrong_thing_skips_its_cases(gp: Gp, tmp_path: Path) -> None:
    result = gp(
        "run",
        "ddp",
        *FAST,
        "--model",
        "tests.models.bad:wrong_return",
        "--ddp-variants",
        "default",
        "--out",
        tmp_path,
        "--format",
        "json",
    )
    run = open_run(json.loads(result.out)["run"])
    reasons = {s["reason"] for s in run.info["skipped"]}
    assert reasons == {
        "--model tests.models.bad:wrong_return: the factory returned int; expected "
        "(nn.Module, make_batch) where make_batch(device) returns one micro-batch"
    }


@pytest.mark.gloo("pipeline")
def test_pipeline_splits_the_users_model_evenly(gp: Gp, tmp_path: Path) -> None:
    run = measure(
        gp,
        tmp_path,
        "pipeline",
        "examples.own_model.mlp:build_sequential",
        "--schedules",
        "GPipe,Interleaved1F1B",
        "--micro-batches",
        "2",
    )
    rows = run.table("pipeline")
    assert set(rows["model"]) == {"examples.own_model.mlp:build_sequential"}
    assert set(rows["mb_rows"]) == {32}
    # 5 modules (4 blocks and the head) in 2 stages (GPipe) or 4 chunks (Interleaved, v=2)
    held = rows.groupby(["case_id", "rank"])["chunk_layers"].first()
    assert held["GPipe.m2"].sum() == 5 and held["Interleaved1F1B.m2"].sum() == 5


def test_stages_split_evenly_by_parameters() -> None:
    from torch import nn

    from gpuprof.probes._model import split_by_parameters

    sizes = [8] * 6 + [64]  # Linear(8, 8) x 6 (72 each), Linear(8, 64) (576)
    model = nn.Sequential(*(nn.Linear(8, n) if n == 64 else nn.Linear(8, 8) for n in sizes))
    parts = split_by_parameters(model, 3)
    held = [sum(p.numel() for p in part.parameters()) for part in parts]
    assert held == [216, 216, 576]  # the largest stage as small as a split can make it
    with pytest.raises(Exception, match="at least 9 modules"):
        split_by_parameters(model, 9)


def test_the_ci_suite_takes_the_users_model(gp: Gp, tmp_path: Path) -> None:
    plan = gp(
        "sweep",
        "--suite",
        "ci",
        "--device",
        "cpu",
        "--model",
        EXAMPLE,
        "--dry-run",
        "--out",
        tmp_path,
    )
    assert plan.code == 0, plan.err
    assert "# ddp:" in plan.out + plan.err
    bad = gp(
        "sweep", "--suite", "ci", "--model", "nosuch.module:build", "--dry-run", "--out", tmp_path
    )
    assert bad.code == 2 and "cannot find nosuch.module" in bad.err
