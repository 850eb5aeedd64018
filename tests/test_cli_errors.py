"""Bad input exits 2 with one line naming the problem, and writes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import Gp


def test_unwritable_out(tmp_path: Path, gp: Gp) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = gp("sweep", "--device", "cpu", "--out", str(blocker / "runs"))
    assert result.code == 2
    assert "is not writable" in result.err and result.err.count("\n") == 1
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["show", "report"])
def test_missing_run(tmp_path: Path, gp: Gp, command: str) -> None:
    for spec in ("latest", "7", str(tmp_path / "nope")):
        result = gp(command, spec, "--out", str(tmp_path))
        assert result.code == 2
        assert "no run" in result.err and result.err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_show_unknown_table(two_rank_run: Path, gp: Gp) -> None:
    result = gp("show", str(two_rank_run), "--table", "telemetry")
    assert result.code == 2 and "'telemetry' is not one of" in result.err


def test_cuda_without_gpu(tmp_path: Path, gp: Gp) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = gp("sweep", "--device", "cuda", "--out", str(tmp_path / "r"))
    assert result.code == 2 and "no CUDA GPU is visible" in result.err


def test_gpus_per_node_is_gpus_as_slurm_spells_it(gp: Gp) -> None:
    plain = gp("sweep", "--gpus", "3", "--suite", "ci", "--dry-run", "--force")
    slurm = gp("sweep", "--gpus-per-node", "3", "--suite", "ci", "--dry-run", "--force")
    assert plain.code == slurm.code == 0, slurm.err
    assert "--nproc-per-node 3" in slurm.out
    assert re.sub(r"--master-port \d+", "", plain.out) == re.sub(
        r"--master-port \d+", "", slurm.out
    )


def test_shell_completion_as_the_readme_says() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "COMP_WORDS": "gpuprof pre", "COMP_CWORD": "1",
           "_GPUPROF_COMPLETE": "bash_complete"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gpuprof"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert "plain,predict" in done.stdout.split(), done.stdout + done.stderr  # click: type,value


def test_a_dry_run_previews_every_launcher_outside_an_allocation(gp: Gp) -> None:
    """Before sbatch, on a login node without GPUs: the srun line and each node's manual
    command, with placeholders for what the allocation fills in."""
    both = gp("sweep", "--nodes", "2", "--gpus", "2", "--suite", "ci", "--dry-run")
    assert both.code == 0, both.err
    assert "srun --nodes 2 --ntasks 2 --ntasks-per-node 1" in both.out
    assert "--rdzv-id JOBID" in both.out and "# node 1" in both.out
    assert "--master-addr NODE0_ADDRESS" in both.out
    slurm = gp("sweep", "--nodes", "2", "--gpus", "2", "--launcher", "slurm", "--dry-run")
    assert slurm.code == 0 and "srun --nodes 2" in slurm.out and "# node 1" not in slurm.out
    gpus = gp("sweep", "--nodes", "2", "--gpus", "8", "--device", "cuda", "--suite", "ci",
              "--dry-run")  # fmt: skip
    assert gpus.code == 0, gpus.err
    assert "--nproc-per-node 8" in gpus.out and "--device cuda" in gpus.out
    # a real launch still needs what the preview stood in for
    real = gp("sweep", "--nodes", "2", "--gpus", "2", "--launcher", "slurm", "--suite", "ci")
    assert real.code == 2 and "outside a Slurm allocation" in real.err


def test_the_estimate_counts_repeats_and_the_models_step(gp: Gp) -> None:
    from gpuprof import registry
    from gpuprof.specs.ddp import DDPParams, model_size

    ten = gp("sweep", "--suite", "ci", "--repeats", "10", "--dry-run").out
    one = float(re.search(r"# in all about (\d+) s", ten).group(1))  # type: ignore[union-attr]
    assert f"# --repeats 10: 10 launches, about {10 * one:.0f} s" in ten
    # a model whose step outgrows the budget: by hand, (warmup + 1) steps and what min_iters
    # steps take beyond the budget, per case
    spec = registry.get("ddp")
    params = DDPParams(model_params=50_000_000, variants=("default",), scaling=False)
    flat = registry.estimate(spec, params, 1, 2)
    timed = registry.estimate(spec, params, 1, 2, rank_tflops=0.1)
    step = 2 * 6 * model_size(params) * params.batch * params.seq / 0.1e12
    per_case = (params.warmup_iters + 1) * step + max(
        0.0, params.min_iters * step - params.budget_s
    )
    assert timed.seconds - flat.seconds == pytest.approx(flat.cases * per_case, rel=1e-9)


def test_a_measurement_prints_json_when_asked(gp: Gp, tmp_path: Path) -> None:
    """--format json: one object per run with stable keys, and no tables or headline."""
    import json

    done = gp("run", "compute", "--matmul-n", "64", "--budget-ms", "20", "--no-telemetry",
              "--format", "json", "--out", str(tmp_path))  # fmt: skip
    assert done.code == 0, done.err
    data = json.loads(done.out)
    keys = {"run", "status", "report", "verdict", "findings", "failures"}
    assert set(data) == keys | {"took_s", "estimated_s"}
    assert data["status"] == "complete" and data["report"].endswith("report.html")
    assert isinstance(data["findings"], list) and data["failures"] == []
    # how long it took against the dry run's estimate, also kept in run.json
    assert data["took_s"] > 0 and data["estimated_s"] > 0
    info = json.loads((Path(data["run"]) / "run.json").read_text())
    assert info["took_s"] == pytest.approx(data["took_s"], abs=0.1)
    assert info["estimated_s"] == pytest.approx(data["estimated_s"], abs=0.1)
    table = gp("run", "compute", "--matmul-n", "64", "--budget-ms", "20", "--no-telemetry",
               "--out", str(tmp_path / "table"))  # fmt: skip
    assert re.search(r"measured in \d+ s; the dry run estimated \d+ s", table.err), table.err
    listed = json.loads(gp("runs", str(tmp_path), "--format", "json").out)
    assert [r["path"] for r in listed] == [data["run"]]


def test_an_old_spelling_still_works_for_one_release_and_says_so(gp: Gp) -> None:
    old = gp("run", "collectives", "-o", "all_reduce", "--suite", "ci", "--dry-run")
    new = gp("run", "collectives", "--op", "all_reduce", "--suite", "ci", "--dry-run")
    assert old.code == new.code == 0, old.err
    assert "gpuprof: note: -o is now --op" in old.err and "note" not in new.err
    first = lambda out: out.splitlines()[0]  # noqa: E731 - the plan's first line
    assert first(old.out) == first(new.out)
    # -o keeps meaning an output file where it always did
    assert "is now" not in gp("report", "nope", "-o", "x.html").err
