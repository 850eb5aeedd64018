"""`gpuprof env`, launcher detection and the environment allow-list."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuprof.machine.env import REDACTED, captured_env, detect_launcher
from tests.conftest import Gp


def test_env_json(gp: Gp) -> None:
    result = gp("env", "--format", "json")
    assert result.code == 0
    info = json.loads(result.out)
    assert info["versions"]["torch"] and info["versions"]["python"]
    assert info["node"]["cpu"]["logical_cores"] >= 1
    assert any(nic["name"] == "lo" for nic in info["node"]["nics"])


def test_env_table_says_how_it_will_run(gp: Gp) -> None:
    out = gp("env").out
    assert "torch" in out and "nic" in out


def test_launcher_detection_order() -> None:
    assert detect_launcher({"TORCHELASTIC_RUN_ID": "x", "SLURM_JOB_ID": "1"}) == "torchrun"
    assert detect_launcher({"SLURM_JOB_ID": "1"}) == "slurm"
    assert detect_launcher({}) == "local"


def test_captured_env_allow_list_and_redaction() -> None:
    kept = captured_env(
        {
            "NCCL_ALGO": "Ring",
            "OMP_NUM_THREADS": "4",
            "HOME": "/root",
            "PATH": "/bin",
            "NCCL_IB_PASSWORD": "hunter2",
            "TORCH_NCCL_API_TOKEN": "abc",
            "MASTER_ADDR": "10.0.0.1",
            "CUDA_VISIBLE_DEVICES": "0,1",
            # not known to matter for performance: not recorded at all, secret or not
            "TORCH_HUB_PAT": "ghp_secret",
            "NVIDIA_API_PASS": "secret",
            "TORCH_HOME": "/cache",
            "AWS_SECRET_ACCESS_KEY": "secret",
            # allowed prefixes, secret-looking names: the name is kept, the value is not
            "NCCL_SOME_PAT": "x",
            "GLOO_SIGNING_CERT": "y",
        }
    )
    assert kept == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_SIGNING_CERT": REDACTED,
        "MASTER_ADDR": "10.0.0.1",
        "NCCL_ALGO": "Ring",
        "NCCL_IB_PASSWORD": REDACTED,
        "NCCL_SOME_PAT": REDACTED,
        "OMP_NUM_THREADS": "4",
        "TORCH_NCCL_API_TOKEN": REDACTED,
    }


def test_local_checks() -> None:
    from gpuprof.machine.node import local_checks

    lo = {"name": "lo", "up": True}
    eth = {"name": "eth0", "up": True}
    cpu_build = {"cuda": None, "nccl": None}
    assert local_checks(cpu_build, {"gpus": [], "nics": [lo, eth]}) == []
    problems = local_checks({"cuda": "12.4", "nccl": None}, {"gpus": [], "nics": [lo]})
    assert "NVML sees no GPU" in problems[0] and "only single-node" in problems[1]
    assert (
        "torch has no CUDA (a CPU build?)"
        in local_checks(cpu_build, {"gpus": [{}], "nics": [eth]})[0]
    )


def test_env_exits_1_and_says_which_check_failed(gp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML (the fake, 8 GPUs) sees GPUs that this CPU build of torch cannot use."""
    monkeypatch.setenv("GPUPROF_FAKE_NVML", "hgx-h100")
    result = gp("env")
    assert result.code == 1
    assert "preflight  NVML sees 8 GPU(s) but torch has no CUDA (a CPU build?)" in result.out
    assert result.err.startswith("gpuprof: 1 check(s) failed: NVML sees 8 GPU(s)")
    cuda = gp("sweep", "--device", "cuda", "--dry-run", "--out", "/nonexistent/x")
    assert cuda.code == 2 and "torch has no CUDA (a CPU build?)" in cuda.err
