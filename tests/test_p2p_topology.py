"""p2p schedule, analysis and classification; topology from a fake NVML."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest

from gpuprof.analysis.p2p import flag_outliers, link_class, summarize_p2p, topology_links
from gpuprof.machine.fake_nvml import FakeNVML
from gpuprof.machine.topology import format_topology, gpu_topology
from gpuprof.specs.p2p import pair_rounds
from tests.conftest import Gp


@pytest.mark.parametrize(("nodes", "gpus"), [(1, 2), (1, 5), (2, 2), (3, 1), (2, 8), (4, 4)])
def test_pair_rounds_cover_every_pair_once_without_sharing_links(nodes: int, gpus: int) -> None:
    rounds = pair_rounds(nodes, gpus)
    pairs = sorted(p for r in rounds for p in r)
    assert pairs == list(itertools.combinations(range(nodes * gpus), 2))
    for r in rounds:
        assert len({rank for pair in r for rank in pair}) == 2 * len(r)  # disjoint
        crossing = [(a // gpus, b // gpus) for a, b in r if a // gpus != b // gpus]
        assert len(crossing) == len(set(crossing))  # one pair per node link


def test_large_worlds_measure_nodes_and_rails() -> None:
    rounds = pair_rounds(4, 8)
    assert len(rounds) == 7 + 3
    assert rounds[-1][:2] == [(0, 8), (1, 9)]


def _frame(rows: list[tuple[int, int, str, float]]) -> pd.DataFrame:
    """(rank_a, rank_b, mode, time_us) -> records of both ranks, 2 iterations each."""
    out = []
    for a, b, mode, t in rows:
        for rank in (a, b):
            for it in range(2):
                out.append(
                    {
                        "group": "round0",
                        "mode": mode,
                        "size_bytes": 1_000_000,
                        "rank_a": a,
                        "rank_b": b,
                        "rank": rank,
                        "host": f"h{rank // 2}",
                        "iteration": it,
                        "time_us": t + (10 if rank == b else 0),
                        "nwrong": 0,
                    }
                )
    return pd.DataFrame(out)


def test_summary_uses_the_slower_rank_and_flags_a_slow_pair() -> None:
    frame = _frame(
        [
            (0, 2, "uni", 90),
            (1, 3, "uni", 90),
            (0, 3, "uni", 90),
            (1, 2, "uni", 290),
            (0, 1, "uni", 10),
            (0, 1, "latency", 20),
        ]
    )
    summary = summarize_p2p(frame, {})
    row = summary[(summary["rank_a"] == 0) & (summary["rank_b"] == 2)].iloc[0]
    assert row["time_us"] == 100 and row["bw_gbps"] == pytest.approx(10.0)
    assert row["link_class"] == "network"
    assert set(summary[summary["flagged"]].apply(lambda r: (r.rank_a, r.rank_b), axis=1)) == {
        (1, 2)
    }
    lat = summary[summary["mode"] == "latency"].iloc[0]
    assert lat["latency_us"] == 15 and pd.isna(lat["bw_gbps"]) and not lat["flagged"]
    assert (
        summary[(summary["rank_a"] == 0) & (summary["rank_b"] == 1)].iloc[0]["link_class"]
        == "local"
    )


def test_summary_counts_a_rank_s_wrong_elements_once() -> None:
    # nwrong is a record's count, on each of its 2 iteration rows: 3 wrong, not 6
    frame = _frame([(0, 1, "uni", 10)])
    frame.loc[frame["rank"] == 1, "nwrong"] = 3
    assert summarize_p2p(frame, {}).iloc[0]["nwrong"] == 3


def test_flag_rule_is_relative_to_the_class_median() -> None:
    frame = pd.DataFrame(
        {
            "link_class": ["nvlink"] * 3 + ["network"] * 2,
            "mode": ["uni"] * 5,
            "bw_gbps": [400.0, 390.0, 270.0, 40.0, 45.0],
        }
    )
    flagged = flag_outliers(frame)["flagged"].tolist()
    assert flagged == [False, False, True, False, False]  # 270 < 0.7 x 390


def test_topology_from_fake_nvml_and_link_classes() -> None:
    nvml = FakeNVML.dgx(4)
    nvml.gpus[3].nvlinks = []  # GPU 3 lost its NVLinks: PCIe (across NUMA) to the others
    for gpu in nvml.gpus[:3]:
        gpu.nvlinks = [b for b in gpu.nvlinks if b != nvml.gpus[3].bus_id]
    topo = gpu_topology(nvml, ["eth0"])
    assert topo["matrix"][0][1] == "NV6" and topo["matrix"][0][0] == "X"
    assert topo["matrix"][0][3] == "SYS" and topo["matrix"][2][3] == "NODE"
    assert "GPU0  X" in format_topology(topo)
    info = {"nodes": [{"host": "h", "topology": topo}]}
    links = topology_links(info)
    ranks = [{"host": "h", "pci_bus_id": bus} for bus in topo["gpus"]]
    assert link_class(ranks[0], ranks[1], links) == "nvlink"
    assert link_class(ranks[0], ranks[3], links) == "pcie"
    assert link_class(ranks[0], {"host": "other"}, links) == "network"


def test_env_shows_the_fake_topology(gp: Gp, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_FAKE_NVML", "8xNVIDIA H100 80GB HBM3")
    out = gp("env").out
    assert "GPU7" in out and "NV2" in out and "NVIDIA H100 80GB HBM3" in out
    info = json.loads(gp("env", "--format", "json").out)
    assert len(info["node"]["topology"]["gpus"]) == 8


@pytest.mark.gloo("p2p")
def test_p2p_through_the_cli(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run",
        "p2p",
        "--gpus",
        "3",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--p2p-bytes",
        "256K",
        "--budget-ms",
        "5",
        "--min-iters",
        "3",
    )
    assert result.code == 0, result.err
    rows = gp("show", "latest", "--out", str(tmp_path), "--table", "p2p", "--format", "json").json()
    assert {(r["rank_a"], r["rank_b"]) for r in rows} == {(0, 1), (0, 2), (1, 2)}
    assert {r["mode"] for r in rows} == {"uni", "bidir", "latency"}
    assert all(r["nwrong"] == 0 and r["link_class"] == "local" for r in rows)
    html = next(tmp_path.glob("*/report.html")).read_text()
    assert "p2p uni: one direction" in html


GOLDEN = Path(__file__).parent / "data" / "p2p-mesh-slow-link"


def test_golden_mesh_run_classifies_and_flags(tmp_path: Path) -> None:
    """A recorded 3-node emulated run (one rank per node, links of 200 Mbit/s except 1-2 at
    100 Mbit/s): every pair is network, and only the slow pair is flagged."""
    import shutil

    from gpuprof import open_run
    from gpuprof.analysis.summary import summarize_run

    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN, run_dir)
    run = open_run(run_dir)
    summary = summarize_run(run, "p2p")
    assert set(summary["link_class"]) == {"network"}
    uni = summary[summary["mode"] == "uni"].set_index(["rank_a", "rank_b"])
    assert uni.loc[(1, 2), "flagged"] and not uni.loc[(0, 1), "flagged"]
    assert uni.loc[(1, 2), "bw_gbps"] == pytest.approx(uni.loc[(0, 1), "bw_gbps"] / 2, rel=0.15)
    assert summary["nwrong"].sum() == 0


@pytest.mark.parametrize("nodes", [18, 33, 128, 1024])
def test_many_nodes_sample_node_pairs_in_rounds_that_do_not_grow(nodes: int) -> None:
    from gpuprof.specs.p2p import NODE_ROUNDS, node_pair_rounds, ring_rounds

    rounds = node_pair_rounds(nodes)
    assert len(rounds) == NODE_ROUNDS and rounds == node_pair_rounds(nodes)  # every rank agrees
    for index, r in enumerate(rounds):
        flat = [n for pair in r for n in pair]
        assert len(flat) == len(set(flat))  # disjoint: no node's link carries two pairs
        # every node paired (one rests on an odd count), but the odd ring's closing pair
        assert len(r) == (1 if nodes % 2 and index == 2 else nodes // 2)
    # the ring first: every node meets both neighbours
    ring = {p for r in ring_rounds(nodes) for p in r}
    assert ring == {(i, i + 1) for i in range(nodes - 1)} | {(0, nodes - 1)}
    assert ring <= {p for r in rounds for p in r}
    # then other partners: each node meets NODE_ROUNDS - 1 or more different nodes
    met: dict[int, set[int]] = {}
    for a, b in (p for r in rounds for p in r):
        met.setdefault(a, set()).add(b)
        met.setdefault(b, set()).add(a)
    assert min(len(m) for m in met.values()) >= NODE_ROUNDS - 3
    # the rails of every round, 8 GPUs a node: as many p2p rounds at 1,024 nodes as at 18
    assert len(pair_rounds(nodes, 8)) == len(pair_rounds(18, 8)) == 7 + NODE_ROUNDS
    assert len(pair_rounds(nodes, 8, node_rounds=0)) == 7 + nodes - 1 + nodes % 2


def test_a_node_slow_with_every_partner_is_named() -> None:
    from gpuprof.advice.p2p import slow_node_findings

    rows = []
    for a, b in [(0, 1), (2, 3), (1, 2), (0, 3), (0, 2), (1, 3)]:
        slow = 2 in (a, b)
        rows.append(
            {"mode": "uni", "link_class": "network", "node_a": a, "node_b": b,
             "host_a": f"h{a}", "host_b": f"h{b}", "flagged": slow}
        )  # fmt: skip
    (finding,) = slow_node_findings(pd.DataFrame(rows))
    assert finding.startswith("Node 2 (h2) is slow with 3 of its 3 partner nodes (node 0, node 1")
    assert "which are not slow with any other node" in finding
    # one slow path between two nodes is a pair finding, not a node's
    one = pd.DataFrame([{**r, "flagged": (r["node_a"], r["node_b"]) == (1, 2)} for r in rows])
    assert slow_node_findings(one) == []
