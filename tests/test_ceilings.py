"""Memory and compute ceilings, known peaks and % of peak."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gpuprof import open_run
from gpuprof.advice.ceilings import copy_findings
from gpuprof.analysis.ceilings import summarize_compute, summarize_memory
from gpuprof.machine.groups import device_rounds
from gpuprof.machine.hardware import gpu_peaks, nic_gbps, pcie_x16_gbps, pct_of_peak
from gpuprof.registry import get, preset
from gpuprof.specs.ceilings import count_copies, count_matmuls
from tests.conftest import Gp


@pytest.mark.parametrize(
    ("name", "model", "nvlink"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 450),
        ("NVIDIA H100 PCIe", "H100 PCIe", None),
        ("NVIDIA H200", "H200 SXM", 450),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 300),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", None),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB", 300),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", None),  # once fell to the 40GB entry
        ("NVIDIA H100 NVL", "H100 NVL", 300),  # once got SXM peaks
        ("NVIDIA GH200 480GB", "GH200", 450),  # once got H200's
        ("NVIDIA B200", "B200", 900),
        ("NVIDIA L40S", "L40S", None),
    ],
)
def test_gpu_peaks_lookup(name: str, model: str, nvlink: float | None) -> None:
    peaks = gpu_peaks(name)
    assert peaks is not None and peaks.model == model and peaks.nvlink_gbps == nvlink


def test_unknown_hardware_is_missing_not_guessed() -> None:
    assert gpu_peaks("NVIDIA GeForce GT 710") is None and gpu_peaks(None) is None
    b200 = gpu_peaks("NVIDIA B200")  # its float32 peak is not in the table: missing, never guessed
    assert b200 is not None and b200.tflops and "float32" not in b200.tflops
    assert pct_of_peak(10.0, None) is None
    assert nic_gbps(0) is None and nic_gbps(-1) is None
    assert nic_gbps(400_000) == 50.0 and pcie_x16_gbps(5) == 63.0 and pcie_x16_gbps(None) is None


def _rows(**cols: object) -> pd.DataFrame:
    base = {
        "rank": 0,
        "host": "h",
        "group": "rank0",
        "iteration": [0, 1, 2],
        "time_us": [100.0, 200.0, 300.0],
        "nwrong": 0,
    }
    return pd.DataFrame({**base, **cols})


def test_memory_summary_and_pct_of_peak() -> None:
    frame = _rows(kind="d2d", size_bytes=1 << 30, bytes_moved=2 << 30)
    row = summarize_memory(frame, {0: "NVIDIA H100 80GB HBM3"}).iloc[0]
    assert row["time_us"] == 200.0
    assert row["bandwidth_gbps"] == pytest.approx((2 << 30) / 200e-6 / 1e9)
    assert row["pct_of_peak"] == pytest.approx(100 * row["bandwidth_gbps"] / 3350)
    h2d = summarize_memory(
        _rows(kind="h2d_pinned", size_bytes=1 << 30, bytes_moved=1 << 30),
        {0: "NVIDIA H100 80GB HBM3"},
    ).iloc[0]
    assert h2d["pct_of_peak"] == pytest.approx(100 * h2d["bandwidth_gbps"] / 63.0)
    cpu = summarize_memory(_rows(kind="host_copy", size_bytes=8, bytes_moved=16)).iloc[0]
    assert cpu["pct_of_peak"] is None or pd.isna(cpu["pct_of_peak"])


def test_compute_summary() -> None:
    frame = _rows(dtype="bfloat16", n=8192, flop=2 * 8192**3)
    row = summarize_compute(frame, {0: "NVIDIA H100 80GB HBM3"}).iloc[0]
    assert row["tflops"] == pytest.approx(2 * 8192**3 / 200e-6 / 1e12)
    assert row["pct_of_peak"] == pytest.approx(100 * row["tflops"] / 989.4)


@pytest.mark.gloo("memory")
@pytest.mark.gloo("compute")
def test_memory_and_compute_probes_through_the_cli(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "sweep",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--probes",
        "memory,compute",
        "--copy-bytes",
        "4M",
        "--matmul-n",
        "256",
        "--budget-ms",
        "20",
        "--min-iters",
        "3",
        "--no-report",
    )
    assert result.code == 0, result.err
    mem = gp(
        "show", "latest", "--out", str(tmp_path), "--table", "memory", "--format", "json"
    ).json()
    # host copies alone (one rank of the node at a time) and together (both at once)
    assert [(r["rank"], r["concurrency"], r["kind"], r["nwrong"]) for r in mem] == [
        (0, "alone", "host_copy", 0),
        (0, "together", "host_copy", 0),
        (1, "alone", "host_copy", 0),
        (1, "together", "host_copy", 0),
    ]
    assert all(r["bandwidth_gbps"] > 0 and r["bytes_moved"] == 8 << 20 for r in mem)
    # the record windows say so: alone, the ranks take turns; together, they overlap
    raw = open_run("latest", tmp_path).table("memory")
    spans = raw.groupby(["concurrency", "rank"])[["start_unix_ns", "end_unix_ns"]].first()
    alone, together = spans.loc["alone"], spans.loc["together"]
    assert alone.loc[0, "end_unix_ns"] <= alone.loc[1, "start_unix_ns"]
    assert max(together["start_unix_ns"]) < min(together["end_unix_ns"])
    # each host copy and float32 matmul carries its canary (numpy copies or matmuls between
    # its iterations), kept by a baseline; the canary measures what the case measures, within
    # a factor of a few (numpy against torch on the same core and memory)
    base = tmp_path / "base.json"
    made = gp("baseline", "latest", "--out", str(tmp_path), "-o", str(base))
    assert made.code == 0, made.err
    cases = json.loads(base.read_text())["cases"]
    ratios = {
        (c["probe"], json.dumps(c["key"], sort_keys=True)): c["canaries"][0] / c["medians"][0]
        for c in cases
        if c["probe"] in ("memory", "compute")
    }
    assert len(ratios) == 6 and all(0.2 < r < 5 for r in ratios.values()), ratios
    comp = gp(
        "show", "latest", "--out", str(tmp_path), "--table", "compute", "--format", "json"
    ).json()
    assert {(r["rank"], r["dtype"], r["concurrency"]) for r in comp} == {
        (0, "float32", "together"),
        (1, "float32", "together"),
    }
    assert all(r["tflops"] > 0 and r["pct_of_peak"] is None for r in comp)
    table = gp("show", "latest", "--out", str(tmp_path), "--table", "compute").out
    assert "TFLOP/s" in table.splitlines()[0]


def test_is_this_good_for_8xh100_all_reduce() -> None:
    from gpuprof.advice.collectives import collective_findings
    from gpuprof.analysis.bandwidth import collective_pct_of_peak

    info = {"ranks": [{"rank": 0, "gpu_name": "NVIDIA H100 80GB HBM3"}]}
    summary = pd.DataFrame(
        {
            "op": ["all_reduce"] * 2,
            "num_nodes": [1, 1],
            "world_size": [8, 8],
            "size_bytes": [1 << 20, 1 << 30],
            "busbw_gbps": [100.0, 360.0],
            "scope": ["global", "global"],
        }
    )
    # an H100 node runs all_reduce with NVLink SHARP (NCCL's NVLS): a ring's 360 GB/s is the
    # sign that NVLS is off
    (finding,) = collective_findings(summary, info)
    assert "360 GB/s busbw at 1 GiB" in finding and "76% of the ~476 GB/s NVLS" in finding
    assert "ring speed, not NVLS" in finding
    summary.loc[1, "busbw_gbps"] = 470.0
    assert "as expected" in collective_findings(summary, info)[0]
    a100 = {"ranks": [{"rank": 0, "gpu_name": "NVIDIA A100-SXM4-80GB"}]}
    summary.loc[1, "busbw_gbps"] = 225.0  # no NVLS on A100: the ring is the reference
    assert "97% of the ~232 GB/s ring" in collective_findings(summary, a100)[0]
    summary.loc[1, "busbw_gbps"] = 200.0
    assert "below the reference" in collective_findings(summary, info)[0]
    assert collective_pct_of_peak(summary, info).tolist() == pytest.approx([100 / 4.5, 200 / 4.5])
    assert collective_findings(summary, {"ranks": [{"rank": 0}]}) == []  # CPU: nothing said


@pytest.mark.parametrize("count", [0, 1, 250, 251, 252, 10_000])
@pytest.mark.parametrize("source", [0, 1, 5, 36])
def test_the_check_pattern_is_byte_i_plus_7_source_mod_251(count: int, source: int) -> None:
    """The memory and p2p checks' source data, built from one repeated period: every byte is
    (i + 7 * source) % 251, so a copy from the wrong source or offset shows as wrong bytes."""
    import torch

    from gpuprof.probes._check import byte_pattern, count_wrong

    got = byte_pattern(count, source)
    want = ((torch.arange(count, dtype=torch.int64) + 7 * source) % 251).to(torch.uint8)
    assert got.dtype == torch.uint8 and torch.equal(got, want)
    if count > 1:
        assert count_wrong(got, want) == 0
        assert count_wrong(byte_pattern(count, source + 1), want) == count  # every byte shifts
        bad = want.clone()
        bad[-1] += 1
        assert count_wrong(bad, want) == 1


def test_device_rounds_do_not_grow_with_the_nodes() -> None:
    alone = device_rounds(3, 4, "alone")
    # round r: local rank r of every node, each in a group of its own
    assert [spec.members for spec in alone] == [
        ((0,), (4,), (8,)),
        ((1,), (5,), (9,)),
        ((2,), (6,), (10,)),
        ((3,), (7,), (11,)),
    ]
    assert {spec.scope for spec in alone} == {"device"}
    (together,) = device_rounds(3, 4, "together")
    assert together.scope == "node" and together.members == tuple((r,) for r in range(12))
    for nodes in (2, 128, 1024):
        memory = preset(get("memory"), "quick", "cuda", nodes, 8)
        compute = preset(get("compute"), "quick", "cuda", nodes, 8)
        # 4 host copy kinds alone (8 rounds) and together, d2d together; 5 dtypes together
        assert count_copies(memory, nodes, 8) == 4 * 8 + 5
        assert count_matmuls(compute, nodes, 8) == 5


def test_host_copies_that_share_a_link_are_named() -> None:
    def rows(host: str, alone: float, together: float) -> list[dict[str, object]]:
        return [
            {
                "host": host,
                "rank": r,
                "kind": "h2d_pinned",
                "concurrency": way,
                "bandwidth_gbps": bw,
            }
            for r in range(4)
            for way, bw in (("alone", alone), ("together", together))
        ]

    summary = pd.DataFrame(rows("a", 50.0, 26.0) + rows("b", 50.0, 48.0))
    (finding,) = copy_findings(summary)
    assert finding.startswith("On a, h2d_pinned copies of 4 devices at once get 52%")
    assert "50 -> 26 GB/s per device, 104 GB/s for the node" in finding
    # runs from before `concurrency`, or one way only: nothing to compare, nothing said
    assert copy_findings(summary.drop(columns="concurrency")) == []
    assert copy_findings(summary[summary["concurrency"] == "alone"]) == []
