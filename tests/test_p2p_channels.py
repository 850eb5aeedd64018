"""NCCL's channels for sends across NVLink domains by NCCL version
(gpuprof.predict.p2p_channels), against values worked by hand from NCCL's code, and the NCCL
version a system runs: a system file's, a run's, a published row's."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from gpuprof.errors import UsageError
from gpuprof.machine.systems import PRESETS, System, load_system, nccl_version_in
from gpuprof.predict import nccl
from gpuprof.predict import p2p_channels as p2p
from gpuprof.predict.calibrate import at_gpus
from gpuprof.predict.calibrations import run_system
from gpuprof.predict.published import series_nccl

H100 = PRESETS["dgx-h100"]


def _on(system: System, version: str) -> System:
    return replace(system, nccl=version)


def channels_per_peer(system: System, nodes: int, ranks: int) -> int:
    """p2pnChannelsPerPeer with the ring and NIC rate NCCL's model gives the system."""
    ring, nic = nccl.ring_graph(system, nodes), nccl.nic_bw(system)
    return p2p.channels_per_peer(system, nodes, ranks, ring, nic)


def send_channels(system: System, nodes: int, ranks: int, size: float) -> int:
    ring, nic = nccl.ring_graph(system, nodes), nccl.nic_bw(system)
    return p2p.send_channels(system, nodes, ranks, size, ring, nic)


# dgx-h100 across nodes: 8 GPUs, one 400 Gbit/s NIC each, which NCCL counts at 48 GB/s (its
# PCIe Gen5 x16); the model's ring search gives 8 channels at 45 GB/s, which ncclTopoPostset
# doubles to 16 (not again: 45 is not over 45), so 16 p2p channels.
# 2.29 (v2.29.2-1 paths.cc): per network peer max(1 NIC, divUp(48, 14)) = 4, then halved while
# 4 x divUp(ranks, 8) > 16: 16 ranks 4, 64 ranks 2, 128 ranks 1.
# 2.28 (v2.28.9-1 paths.cc): 2, halved while 2 x ranks > 16 x 4: 16 ranks 2, 64 and 128 ranks
# 1 (then max with 1 NIC).
# 2 ranks (2 nodes x 1 GPU with its one NIC): one ring channel at 48 GB/s, doubled twice (48
# is over 45): 4 p2p channels; 2.29: 4 (4 x 1 <= 4); 2.28: 2 (2 x 2 <= 4 x 4).
# Before 2.20 (v2.19.4-1): NCCL_NCHANNELS_PER_NET_PEER's 2 at every scale.
@pytest.mark.parametrize(
    ("version", "two", "sixteen", "sixty_four", "one_twenty_eight"),
    [
        ("", 4, 4, 2, 1),
        ("2.29.2", 4, 4, 2, 1),
        ("2.30.7", 4, 4, 2, 1),
        ("2.28.9", 2, 2, 1, 1),
        ("2.27.7", 2, 2, 1, 1),
        ("2.20.5", 2, 2, 1, 1),
        ("2.19.4", 2, 2, 2, 2),
    ],
)
def test_channels_per_peer_follow_nccls_rule_of_the_version(
    version: str, two: int, sixteen: int, sixty_four: int, one_twenty_eight: int
) -> None:
    system = _on(H100, version)
    assert channels_per_peer(at_gpus(system, 1), 2, 2) == two
    got = [channels_per_peer(system, ranks // 8, ranks) for ranks in (16, 64, 128)]
    assert got == [sixteen, sixty_four, one_twenty_eight]


def test_a_gpu_with_several_nics_keeps_one_channel_each_before_2_29() -> None:
    """aws-p5: four 100 Gbit/s EFA NICs a GPU (12.5 GB/s each: four reach its 48 GB/s PCIe);
    the model's ring has 30 channels at 12 GB/s, 60 p2p channels (64 rounded). 2.28 keeps
    max(4 NICs, ...) = 4 at any scale; 2.29 asks divUp(50, 14) = 4, then halves to fit
    divUp(ranks, 8) rounds in 64: 1 at 1,024 ranks."""
    p5 = PRESETS["aws-p5"]
    assert channels_per_peer(_on(p5, "2.28.9"), 2, 16) == 4
    assert channels_per_peer(_on(p5, "2.28.9"), 128, 1024) == 4
    assert channels_per_peer(_on(p5, "2.29.2"), 2, 16) == 4
    assert channels_per_peer(_on(p5, "2.29.2"), 128, 1024) == 1


def test_one_send_is_striped_over_more_channels_as_it_grows() -> None:
    """src/enqueue.cc addP2pToPlan on 16 ranks of dgx-h100 under 2.29: from 1 channel (4
    halved until 16 ranks x it fit 16), doubling while a part exceeds 128 KiB, up to 4."""
    sizes = (1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20)
    assert [send_channels(H100, 2, 16, size) for size in sizes] == [1, 1, 2, 4, 4]
    old = _on(H100, "2.28.9")
    assert [send_channels(old, 2, 16, size) for size in sizes] == [1, 1, 2, 2, 2]


def test_sendrecv_across_nodes_steps_down_where_the_channels_halve() -> None:
    """1 GiB sendrecv on dgx-h100: at most channels x 14 GB/s and the GPU's NIC (48 GB/s).
    2.29: 4, 2, 1 channels at 16, 64, 128 ranks -> 48, 28, 14 GB/s; 2.28: 2, 1, 1 -> 28, 14,
    14 GB/s."""
    size = float(1 << 30)
    for version, want in (("2.29.2", (48.0, 28.0, 14.0)), ("2.28.9", (28.0, 14.0, 14.0))):
        system = _on(H100, version)
        got = [nccl.collective(system, "sendrecv", r, size).busbw_gbps for r in (16, 64, 128)]
        assert got == pytest.approx(want, rel=0.01), version
    inside = nccl.collective(_on(H100, "2.28.9"), "sendrecv", 8, size)
    assert inside.busbw_gbps == pytest.approx(nccl.collective(H100, "sendrecv", 8, size).busbw_gbps)


def test_the_version_a_system_runs() -> None:
    assert _on(H100, "2.28.9+cuda12.9").nccl_release == (2, 28)
    assert _on(H100, "2.29").nccl_release == (2, 29) and H100.nccl_release is None
    with pytest.raises(UsageError, match="nccl"):
        _on(H100, "latest")
    assert nccl_version_in("2.27.7 (per same section)") == "2.27.7"
    assert nccl_version_in("not stated") == "" and nccl_version_in(None) == ""


def test_a_system_file_may_name_its_nccl(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('like = "dgx-h100"\nnccl = "2.28.9"\n', encoding="utf-8")
    assert load_system(str(path)).nccl == "2.28.9"
    path.write_text('like = "dgx-h100"\nnccl = 2.28\n', encoding="utf-8")
    with pytest.raises(UsageError, match="nccl"):
        load_system(str(path))


def test_a_run_predicts_with_the_nccl_it_measured_unless_the_system_names_one(
    tmp_path: Path,
) -> None:
    info = {"hardware": asdict(H100), "versions": {"nccl": "2.28.9+cuda12.9"}}
    got = run_system(info)
    assert got is not None and got.nccl == "2.28.9"
    named = run_system({**info, "hardware": asdict(_on(H100, "2.29.2"))})
    assert named is not None and named.nccl == "2.29.2"
    preset = run_system(info, "dgx-b200")
    assert preset is not None and (preset.name, preset.nccl) == ("dgx-b200", "2.28.9")
    path = tmp_path / "mine.toml"
    path.write_text('like = "dgx-h100"\nnccl = "2.27.7"\n', encoding="utf-8")
    assert run_system(info, str(path)).nccl == "2.27.7"  # type: ignore[union-attr]
    bare = run_system({"hardware": asdict(H100), "versions": {"nccl": None}})
    assert bare is not None and bare.nccl == ""
    assert run_system({"versions": {"nccl": "2.28.9"}}) is None


def test_a_published_series_runs_its_rows_nccl_else_its_calibration_rows() -> None:
    def row(nodes: int, version: str) -> dict[str, str]:
        return {"nodes": str(nodes), "nccl_version": version}

    assert series_nccl([row(2, "2.28.9"), row(8, "2.28.9")], [2]) == "2.28.9"
    assert series_nccl([row(2, "2.28.9"), row(8, "2.29.7")], [2]) == "2.28.9"
    assert series_nccl([row(2, "2.28.9"), row(2, "2.29.7"), row(8, "2.29.7")], [2]) == ""
    assert series_nccl([row(2, ""), row(8, "")], [2]) == ""
