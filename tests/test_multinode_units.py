"""Pure pieces of the multi-node path: scopes, preflight, record merging, launch lines."""

from __future__ import annotations

from pathlib import Path

from gpuprof.launch.launchers import node_command
from gpuprof.launch.torchrun import LaunchConfig
from gpuprof.machine.groups import scope_groups
from gpuprof.probes._transfer import merge_chunk
from gpuprof.probes.sweep import preflight
from gpuprof.runs.plan import SweepPlan
from gpuprof.runs.records import shard_path


def test_inter_and_rails_scopes() -> None:
    specs = {s.scope: s for s in scope_groups(3, 2, ("intra", "inter", "rails", "global"))}
    assert specs["inter"].members == ((0, 2, 4),) and specs["inter"].num_nodes == 3
    assert specs["rails"].members == ((0, 2, 4), (1, 3, 5))
    assert specs["rails"].names == ("rail0", "rail1")
    assert specs["intra"].members == ((0, 1), (2, 3), (4, 5))
    assert "inter" not in {s.scope for s in scope_groups(1, 8, ("inter", "rails"))}


def _node(host: str, torch: str = "2.13.0", gpus: int = 8) -> dict[str, object]:
    return {
        "host": host,
        "versions": {
            "torch": torch,
            "cuda": "12.4",
            "nccl": "2.21.5",
            "driver": "550.54",
            "gpuprof": "0.1.0",
        },
        "gpus": [{}] * gpus,
    }


def test_preflight_names_version_and_gpu_mismatches() -> None:
    plan = SweepPlan(num_nodes=2, gpus_per_node=8, device="cuda")
    assert preflight(plan, [_node("a"), _node("b")], 16, 8) == []
    problems = preflight(plan, [_node("a"), _node("b", torch="2.12.0", gpus=4)], 16, 8)
    assert problems == [
        "torch versions differ between nodes: 2.13.0 on a, 2.12.0 on b",
        "b has 4 GPU(s), the sweep asks for 8 per node",
    ]
    shape = preflight(plan, [_node("a"), _node("b")], 12, 6)
    assert shape and "the job has 12 ranks, 6 per node" in shape[0]


def test_merge_chunk_appends_skips_and_repairs(tmp_path: Path) -> None:
    path = shard_path(tmp_path, 3)
    relative = str(path.relative_to(tmp_path))
    merge_chunk(tmp_path, relative, 0, b"a\n")
    merge_chunk(tmp_path, relative, 2, b"b\n")
    assert path.read_bytes() == b"a\nb\n"
    merge_chunk(tmp_path, relative, 0, b"a\n")  # already here (shared filesystem): untouched
    assert path.read_bytes() == b"a\nb\n"
    merge_chunk(tmp_path, relative, 0, b"a\nb\nc\n")  # a resent whole shard replaces the copy
    assert path.read_bytes() == b"a\nb\nc\n"


def test_node_commands_per_launcher(tmp_path: Path) -> None:
    plan = SweepPlan(num_nodes=2, gpus_per_node=4, device="cpu")
    head = node_command(
        plan,
        LaunchConfig(launcher="manual", node_rank=0, master_addr="h0"),
        run_dir=tmp_path / "0001_x",
        out=tmp_path,
    ).argv
    other = node_command(
        plan,
        LaunchConfig(launcher="manual", node_rank=1, master_addr="h0"),
        run_dir=None,
        out=tmp_path,
        handoff=tmp_path / "h",
    ).argv
    assert "--home" in head and "--run-dir" in head and "--out" not in head
    assert "--home" not in other and "--out" in other and "--handoff" in other
    for argv in (head, other):
        assert argv[argv.index("--max-restarts") + 1] == "0"
        assert argv[argv.index("--rdzv-backend") + 1] == "static"


def test_one_rank_is_started_without_torchrun(tmp_path: Path) -> None:
    """A world of one needs no rendezvous: the local launcher starts the rank-side sweep
    itself (torchrun's process costs a second Python and torch import per launch), with the
    same rank arguments and thread setting; --master-port keeps torchrun."""
    plan = SweepPlan(num_nodes=1, gpus_per_node=1, device="cpu")
    solo = node_command(plan, LaunchConfig(launcher="local"), run_dir=tmp_path / "r", out=tmp_path)
    assert solo.solo and solo.argv[1:3] == ["-m", "gpuprof.probes.sweep"]
    assert "torch.distributed.run" not in solo.argv
    assert solo.argv[solo.argv.index("--run-dir") + 1] == str(tmp_path / "r")
    pair = SweepPlan(num_nodes=1, gpus_per_node=2, device="cpu")
    two = node_command(pair, LaunchConfig(launcher="local"), run_dir=tmp_path / "r", out=tmp_path)
    assert not two.solo and solo.argv[1:] == two.argv[two.argv.index("-m", 3) :]
    assert solo.env.keys() == two.env.keys()
    fixed = node_command(plan, LaunchConfig(launcher="local", master_port=29511), run_dir=None,
                         out=tmp_path)  # fmt: skip
    assert not fixed.solo and "torch.distributed.run" in fixed.argv


def test_the_local_launcher_lets_the_store_bind_its_own_port(tmp_path: Path) -> None:
    """A port picked by the launcher and bound later by torchrun can be taken in between by
    another job on a busy machine (EADDRINUSE, seen on CI): without --master-port the local
    launcher hands torchrun port 0 and the c10d store binds a free one itself."""
    plan = SweepPlan(num_nodes=1, gpus_per_node=2, device="cpu")
    argv = node_command(plan, LaunchConfig(launcher="local"), run_dir=None, out=tmp_path).argv
    assert argv[argv.index("--rdzv-backend") + 1] == "c10d"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    fixed = node_command(plan, LaunchConfig(launcher="local", master_port=29511), run_dir=None,
                         out=tmp_path).argv  # fmt: skip
    assert fixed[fixed.index("--master-port") + 1] == "29511"
