"""A 2-node x 2-rank sweep over an emulated cluster: namespaces, a shaped link, manual launcher,
each node writing to its own folder (no shared filesystem)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.analysis.bandwidth import summarize_collectives
from gpuprof.analysis.health import attribute, case_windows
from gpuprof.analysis.summary import summarize_run
from gpuprof.cli import main
from tests.cluster import emulated_cluster, manual_sweep_argv, unavailable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.skipif(unavailable() is not None, reason=str(unavailable())),
]
RATE_MBIT = 200


def manual_sweep(cluster, tmp_path: Path, extra: list[str], gpus: int = 2) -> list[int]:  # type: ignore[no-untyped-def]
    """`gpuprof sweep --launcher manual` on every node of the cluster, each its own --out."""
    procs = []
    for node in range(cluster.nodes):
        out = tmp_path / f"n{node}"
        extra_node = ["--timeout", "60", *extra]
        argv = manual_sweep_argv(cluster.nodes, gpus, node, cluster.addr(0), 29555, out, extra_node)
        procs.append(cluster.popen(node, argv, tmp_path / f"node{node}.log"))
    return [p.wait(timeout=600) for p in procs]


def logs(tmp_path: Path, nodes: int) -> dict[int, str]:
    return {n: (tmp_path / f"node{n}.log").read_text()[-2000:] for n in range(nodes)}


def test_two_node_sweep_matches_iperf3(tmp_path: Path) -> None:
    with emulated_cluster(2, f"{RATE_MBIT}mbit") as cluster:
        iperf = cluster.iperf3_mbytes_per_s(0, 1)
        codes = manual_sweep(
            cluster,
            tmp_path,
            [
                "--op",
                "sendrecv,broadcast",
                "--sizes",
                "64K,8M",
                "--budget-ms",
                "5",
                "--min-iters",
                "3",
                "--warmup",
                "1",
            ],
        )
    logs = {n: (tmp_path / f"node{n}.log").read_text()[-2000:] for n in range(2)}
    assert codes == [0, 0], logs
    run = open_run("latest", tmp_path / "n0")
    frame = run.table("collectives")
    assert set(frame["rank"]) == {0, 1, 2, 3}  # node 1's records reached node 0
    assert set(frame["host"]) == {"node0", "node1"}
    summary = summarize_collectives(frame)
    scopes = {
        (s, n, g)
        for s, n, g in zip(summary["scope"], summary["world_size"], summary["group"], strict=True)
    }
    assert scopes == {
        ("intra", 2, "node0"),
        ("intra", 2, "node1"),
        ("inter", 2, "rail0"),
        ("rails", 2, "rail0"),
        ("rails", 2, "rail1"),
        ("global", 4, "all"),
    }
    assert (summary["nwrong"] == 0).all()
    big = summary[summary["size_bytes"] == 8 << 20]
    print(f"\niperf3 {iperf:.2f} MB/s on a {RATE_MBIT} Mbit/s tbf link")
    for op in ("sendrecv", "broadcast"):
        inter = big[(big["scope"] == "inter") & (big["op"] == op)]["busbw_gbps"].item() * 1e3
        intra = big[(big["scope"] == "intra") & (big["op"] == op)]["busbw_gbps"].min() * 1e3
        print(
            f"{op}: inter busbw {inter:.2f} MB/s ({inter / iperf:.3f} of iperf3), "
            f"intra {intra:.1f} MB/s"
        )
        assert abs(inter / iperf - 1) <= 0.15
        assert intra > 2 * inter
    # telemetry: each node's NIC counted what the inter-node cases had to send
    attributed = attribute(case_windows(frame), run.table("telemetry"))
    inter = attributed[
        (attributed["scope"] == "inter")
        & (attributed["expected_tx_bytes"] > 0)
        & attributed["case_id"].str.endswith(str(8 << 20))
    ]
    for rec in inter.to_dict("records"):
        print(
            f"NIC bytes {rec['host']} {rec['case_id']}: {rec['nic_tx_bytes'] / 1e6:.1f} MB sent, "
            f"{rec['expected_tx_bytes'] / 1e6:.1f} MB expected, ratio {rec['nic_ratio']:.3f}"
        )
    assert len(inter) == 3  # sendrecv from both nodes, broadcast from node 0
    assert ((inter["nic_ratio"] - 1).abs() <= 0.20).all()
    # node 1 kept its own shards as a backup
    backup = next((tmp_path / "n1").iterdir())
    assert sorted(p.name for p in (backup / "ranks").glob("*.jsonl")) == [
        "rank-00002.jsonl",
        "rank-00003.jsonl",
    ]

    # p2p: pairs inside a node are local, across nodes network at the shaped rate
    pairs = summarize_run(run, "p2p")
    uni = pairs[pairs["mode"] == "uni"]
    classes = {
        (a // 2 == b // 2): c
        for a, b, c in zip(uni["rank_a"], uni["rank_b"], uni["link_class"], strict=True)
    }
    assert classes == {True: "local", False: "network"}
    network = uni[uni["link_class"] == "network"]["bw_gbps"] * 1e3
    shaped = RATE_MBIT / 8
    print(
        f"p2p network pairs: {', '.join(f'{v:.2f}' for v in network)} MB/s "
        f"(shaped {shaped:.1f} MB/s)"
    )
    assert ((network / shaped - 1).abs() <= 0.15).all()
    # (local pairs share 2 cores with 4 ranks here: too noisy to judge each other)
    assert not pairs[pairs["link_class"] == "network"]["flagged"].any()


def test_slow_link_is_flagged(tmp_path: Path) -> None:
    with emulated_cluster(3, f"{RATE_MBIT}mbit", f"1-2:{RATE_MBIT // 2}mbit", mesh=True) as cluster:
        codes = manual_sweep(
            cluster,
            tmp_path,
            [
                "--probes",
                "p2p",
                "--p2p-bytes",
                "4M",
                "--p2p-modes",
                "uni,bidir",
                "--budget-ms",
                "5",
                "--min-iters",
                "3",
                "--warmup",
                "1",
            ],
            gpus=1,
        )
    assert codes == [0, 0, 0], logs(tmp_path, 3)
    run = open_run("latest", tmp_path / "n0")
    pairs = summarize_run(run, "p2p")
    for rec in pairs.to_dict("records"):
        print(
            f"{rec['mode']} {rec['rank_a']}-{rec['rank_b']}: {rec['bw_gbps'] * 1e3:.2f} MB/s, "
            f"{rec['pct_of_class']:.0f}% of class, flagged={rec['flagged']}"
        )
    flagged = {(r["rank_a"], r["rank_b"]) for r in pairs[pairs["flagged"]].to_dict("records")}
    assert flagged == {(1, 2)}
    assert "Pair 1-2" in (run.path / "report.html").read_text()


def test_ddp_advice_names_the_slow_inter_node_link(tmp_path: Path) -> None:
    """DDP over 2 emulated nodes joined by a 200 Mbit/s link: communication between nodes is
    exposed, and the advice says so for the inter scope, with its share of the step."""
    from gpuprof.advice.ddp import ddp_findings

    with emulated_cluster(2, f"{RATE_MBIT}mbit") as cluster:
        codes = manual_sweep(
            cluster,
            tmp_path,
            [
                "--probes",
                "ddp",
                "--no-telemetry",
                "--hidden",
                "128",
                "--layers",
                "2",
                "--batch",
                "2",
                "--seq",
                "32",
                "--ddp-variants",
                "default,accum=4",
                "--budget-ms",
                "1000",
                "--min-iters",
                "4",
                "--warmup",
                "1",
            ],
        )
    assert codes == [0, 0], logs(tmp_path, 2)
    run = open_run(next((tmp_path / "n0").iterdir()))
    summary = summarize_run(run, "ddp")
    scopes = set(zip(summary["scope"], summary["world_size"], strict=True))
    assert scopes == {("single", 1), ("intra", 2), ("inter", 2), ("global", 4)}
    findings = ddp_findings(summary)
    inter = [f for f in findings if f.startswith("DDP inter-node (one rank per node) n=2")]
    assert inter and "exposed communication is" in inter[0] and "% of the step" in inter[0]
    row = summary[summary["scope"] == "inter"].iloc[0]
    intra = summary[summary["scope"] == "intra"]
    assert row["exposed_pct"] > max(20, intra["exposed_pct"].max())
    print("\n".join(findings))
    print(
        summary[
            [
                "scope",
                "world_size",
                "group",
                "case_id",
                "step_us",
                "exposed_pct",
                "overlap_log_pct",
                "overlap_ab_pct",
                "efficiency",
            ]
        ].to_string()
    )


def test_two_nodes_with_one_host_name(tmp_path: Path) -> None:
    """Cloned VMs: both nodes call themselves `twin`. Each node keeps its own telemetry file
    (keyed by node rank), the records tell the nodes apart, and pairs across them are
    network pairs."""
    with emulated_cluster(2, f"{RATE_MBIT}mbit") as cluster:
        cluster.host_name = "twin"
        codes = manual_sweep(
            cluster,
            tmp_path,
            ["--probes", "p2p", "--p2p-bytes", "1M", "--p2p-modes", "uni", "--budget-ms", "5",
             "--min-iters", "3", "--warmup", "1"],
            gpus=1,
        )  # fmt: skip
    assert codes == [0, 0], logs(tmp_path, 2)
    run = open_run("latest", tmp_path / "n0")
    assert run.status == "complete"
    assert sorted(p.name for p in (run.path / "telemetry").iterdir()) == [
        "node-0.jsonl",
        "node-1.jsonl",
    ]
    telemetry = run.table("telemetry")
    assert set(telemetry["node_rank"]) == {0, 1}
    assert set(telemetry["host"]) == {"twin-n0", "twin-n1"}
    assert [n["host"] for n in run.info["nodes"]] == ["twin", "twin"]  # the real names kept
    pairs = summarize_run(run, "p2p")
    assert set(pairs["link_class"]) == {"network"}


def test_check_flags_a_slower_link_on_the_cases_that_cross_it(tmp_path: Path) -> None:
    """A baseline of 6 runs at 200 Mbit/s, a check at 120 (40% less): the scopes that cross
    the link (inter, global) regress; the intra-node ones, over loopback, get wider thresholds
    (they move with the machine's noise). Not rails: its two groups share the link at once and
    split it unevenly from run to run, so each alone is noise-bound. 40%, not 20%: the global
    1 MiB case spends about a quarter of its time off the link (loopback hops, CPU), so a 20%
    cut moved it by 15.4% against a 15.6% threshold in one CI run. The gate's detection rates
    at 10% and 20% are measured by benchmarks/gate_rates.py (the fault hook), not asserted
    here; the README keeps one measured 20% link cut."""
    plan = [
        "--probes", "collectives", "--op", "all_reduce", "--sizes", "1M,4M", "--suite", "ci",
        "--scopes", "intra,inter,global", "--budget-ms", "300", "--min-iters", "5",
        "--no-report", "--no-telemetry",
    ]  # fmt: skip
    folders = [tmp_path / f"base{i}" for i in range(6)] + [tmp_path / "slow"]
    with emulated_cluster(2, f"{RATE_MBIT}mbit") as cluster:
        for folder in folders:
            if folder.name == "slow":
                cluster.reshape(f"{RATE_MBIT * 6 // 10}mbit")
            folder.mkdir()
            assert manual_sweep(cluster, folder, plan) == [0, 0], logs(folder, 2)
    runs = [str(open_run("latest", tmp_path / f"base{i}" / "n0").path) for i in range(6)]
    assert main(["baseline", *runs, "-o", str(tmp_path / "base.json")]) == 0
    slow = open_run("latest", tmp_path / "slow" / "n0").path
    report = tmp_path / "check.json"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["check", "--baseline", str(tmp_path / "base.json"), "--run", str(slow),
                     "--format", "json"])  # fmt: skip
    report.write_text(buffer.getvalue())
    cases = json.loads(buffer.getvalue())["cases"]
    for case in cases:
        print(
            f"{case['verdict']:12} {case['change_pct']:+6.1f}% "
            f"(threshold {case['threshold_pct']:.1f}%) {case['case']}"
        )
    assert code == 1
    assert {c["key"]["scope"] for c in cases} == {"intra", "inter", "global"}
    crossing = [c for c in cases if c["key"]["scope"] != "intra"]
    intra = [c for c in cases if c["key"]["scope"] == "intra"]
    assert len(crossing) == 4 and all(c["verdict"] == "regression" for c in crossing)
    # link-bound: each moved by most of the link's 40% (inter: all of it; global: a part of
    # its time is loopback and CPU, about 33% expected at 1 MiB)
    assert all(-50 < c["change_pct"] < -20 for c in crossing), crossing
    # loopback is CPU-bound noise on 2 busy cores (the whole intra scope once moved by -25%
    # in one run while the link cases moved by exactly -20%): its thresholds are the wide
    # ones, and its verdicts are not asserted
    assert min(c["threshold_pct"] for c in intra) > max(c["threshold_pct"] for c in crossing)


def test_predict_holds_for_node_counts_it_did_not_fit(tmp_path: Path) -> None:
    """Fit all_reduce on 2 nodes (one rank each), predict 3, measure 3: the busbw of every size
    of at least 1 MiB within 15% (the acceptance goal; measured here about 1-4%)."""
    from gpuprof.predict.collectives import links_for, predict_collective
    from gpuprof.predict.fits import fit_collectives

    plan = [
        "--probes", "collectives", "--op", "all_reduce", "--sizes", "1K,8K,64K,256K,1M,4M",
        "--scopes", "global", "--budget-ms", "200", "--min-iters", "5", "--warmup", "2",
        "--no-report", "--no-telemetry",
    ]  # fmt: skip
    summaries = {}
    for nodes in (2, 3):
        folder = tmp_path / f"nodes{nodes}"
        folder.mkdir()
        with emulated_cluster(nodes, f"{RATE_MBIT}mbit") as cluster:
            assert manual_sweep(cluster, folder, plan, gpus=1) == [0] * nodes, logs(folder, nodes)
        summaries[nodes] = summarize_run(open_run("latest", folder / "n0"), "collectives")
    fits, _ = fit_collectives(summaries[2])
    links = links_for(fits, "all_reduce", "float32")
    held = summaries[3][summaries[3]["size_bytes"] >= 1 << 20]
    assert not held.empty
    for size, busbw in zip(held["size_bytes"], held["busbw_gbps"], strict=True):
        got = predict_collective(links, "all_reduce", 3, 1, float(size), "gloo")
        print(f"3 nodes, {size} B: predicted {got.busbw_gbps:.4f} GB/s, measured {busbw:.4f}")
        assert abs(got.busbw_gbps / busbw - 1) < 0.15


def test_fsdp_nic_bytes_match_its_accounting(tmp_path: Path) -> None:
    """FSDP between 2 emulated nodes (one rank each): the bytes each node's NIC sent during
    the case (telemetry) against what the probe accounted per step, times the steps that
    communicate (a settling and an accounted step, then per round the step and its replay).
    ProcessGroupGloo runs reduce_scatter_tensor as an all_reduce of the whole buffer and a copy
    of its chunk (reduce_scatter_tensor_coalesced in ProcessGroupGloo.cpp; twice the ring's
    bytes, as measured per op on this link), so the expectation counts it so; the ring theory
    (NCCL's) is printed beside."""
    from gpuprof.analysis.sharded import summarize_sharded

    with emulated_cluster(2, f"{RATE_MBIT}mbit") as cluster:
        codes = manual_sweep(
            cluster,
            tmp_path,
            [
                # a small tp case after it, so the sampler's counters outlast the FSDP window
                "--probes",
                "sharded,tp",
                "--tp-layers",
                "mlp",
                "--tp-hidden",
                "64",
                "--tp-batch",
                "1",
                "--tp-seq",
                "8",
                "--strategies",
                "fsdp",
                "--no-scaling",
                "--hidden",
                "128",
                "--layers",
                "2",
                "--batch",
                "2",
                "--seq",
                "32",
                "--budget-ms",
                "1500",
                "--min-iters",
                "4",
                "--warmup",
                "1",
            ],
            gpus=1,
        )
    assert codes == [0, 0], logs(tmp_path, 2)
    run = open_run(next((tmp_path / "n0").iterdir()))
    frame = run.table("sharded")
    (row,) = summarize_sharded(frame).to_dict("records")
    assert row["num_nodes"] == 2 and abs(row["sent_ratio"] - 1) <= 0.10
    windows = attribute(case_windows(frame), run.table("telemetry"))
    assert len(windows) == 2  # one window per node
    for rec in windows.to_dict("records"):
        mine = frame[frame["host"] == rec["host"]].iloc[0]
        rounds = max(1, int(mine["warmup_iters"])) + int(frame["iteration"].max()) + 1
        steps = 2 + 2 * rounds
        gloo = mine["sent_all_gather_bytes"] + 2 * mine["sent_reduce_scatter_bytes"]
        expected, theory = steps * gloo, steps * mine["theory_sent_bytes"]
        ratio = rec["nic_tx_bytes"] / expected
        print(
            f"\n{rec['host']}: NIC sent {rec['nic_tx_bytes'] / 1e6:.2f} MB in {steps} "
            f"communicating steps; accounted with gloo's reduce_scatter {expected / 1e6:.2f} MB "
            f"(ratio {ratio:.3f}); ring theory {theory / 1e6:.2f} MB "
            f"(ratio {rec['nic_tx_bytes'] / theory:.3f})"
        )
        assert abs(ratio - 1) <= 0.20


def test_per_node_probes_run_on_every_node_at_once_and_sampled_p2p_names_a_slow_node(
    tmp_path: Path,
) -> None:
    """4 emulated nodes x 1 rank, node 2's link at a quarter of the others': memory and
    compute run on every node at the same time (each case's window on the 4 nodes overlaps;
    the shape of the run is the single-node one, per rank), and p2p sampled to the ring's 2
    rounds of node pairs (4 of the 6 pairs) still names node 2: slow with both its partners,
    which are fine with the others."""
    with emulated_cluster(4, f"{RATE_MBIT}mbit", f"2:{RATE_MBIT // 4}mbit") as cluster:
        codes = manual_sweep(
            cluster,
            tmp_path,
            [
                "--probes",
                "memory,compute,p2p",
                "--copy-bytes",
                "4M",
                "--matmul-n",
                "256",
                "--p2p-bytes",
                "2M",
                "--p2p-modes",
                "uni",
                "--p2p-node-rounds",
                "2",
                # each case lasts half a second: the nodes start a round together (a barrier)
                # but not each case, and on a busy 2-core machine their starts spread by up
                # to about 180 ms; a case of a few ms could end before another node's began.
                # --max-iters lifts the ceilings' cap of 200 iterations (a 4 MB copy's 200
                # took 150 ms in CI, less than the spread: the budget must decide the length);
                # three warm-up iterations size the count by the median of the last two (with
                # one, the first touch of the buffers sized the first case to a handful of
                # iterations, and it ended in CI before another node's began)
                "--budget-ms",
                "500",
                "--min-iters",
                "3",
                "--max-iters",
                "100000",
                "--warmup",
                "3",
            ],
            gpus=1,
        )
    assert codes == [0, 0, 0, 0], logs(tmp_path, 4)
    run = open_run("latest", tmp_path / "n0")
    for probe in ("memory", "compute"):
        table = run.table(probe)
        spans = table.groupby(["concurrency", "case_id", "rank"])[["start_unix_ns", "end_unix_ns"]]
        for (way, case), windows in spans.first().groupby(level=[0, 1]):
            starts, ends = windows["start_unix_ns"], windows["end_unix_ns"]
            shortest = (ends - starts).min() / 1e6
            print(f"{probe} {case}: starts within {(starts.max() - starts.min()) / 1e6:.0f} ms, "
                  f"the shortest lasts {shortest:.0f} ms")  # fmt: skip
            assert len(windows) == 4, (probe, case)  # every node measured it
            assert starts.max() < ends.min(), (probe, way, case)  # all 4 at the same time
    memory = summarize_run(run, "memory")
    assert sorted(zip(memory["rank"], memory["concurrency"], strict=True)) == [
        (r, way) for r in range(4) for way in ("alone", "together")
    ]
    pairs = summarize_run(run, "p2p")
    measured = sorted(zip(pairs["rank_a"], pairs["rank_b"], strict=True))
    assert measured == [(0, 1), (0, 3), (1, 2), (2, 3)]  # the ring: (0, 2) and (1, 3) left out
    for rec in pairs.to_dict("records"):
        print(f"p2p {rec['rank_a']}-{rec['rank_b']}: {rec['bw_gbps'] * 1e3:.2f} MB/s")
    flagged = sorted(zip(*(pairs[pairs["flagged"]][c] for c in ("rank_a", "rank_b")), strict=True))
    assert flagged == [(1, 2), (2, 3)]
    report = (run.path / "report.html").read_text()
    assert "Node 2 (node2) is slow with 2 of its 2 partner nodes (node 1, node 3)" in report
