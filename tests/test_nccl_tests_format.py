"""`gpuprof show --format nccl-tests` / `gpuprof export nccl-tests` read by the parsers that
read nccl-tests: Microsoft superbench's (superbench/benchmarks/micro_benchmarks/
cuda_nccl_bw_performance.py: the block between the "out-of-place" and "Out of bounds values"
lines, columns found by name in the header, whitespace-split rows), FlagPerf's (the last field
of the "# Avg bus bandwidth" line), and a row regular expression of the kind scripts use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.analysis.summary import summarize_run
from gpuprof.reports.nccl_tests import _float, rank_lines
from tests.conftest import Gp

ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$"
)
AVG = re.compile(r"^# Avg bus bandwidth\s+:\s+([\d.e+-]+)")


def superbench_rows(block: str, in_place: bool) -> list[tuple[int, float, float, float]]:
    """superbench's parsing, step for step: (size, time, algbw, busbw) per row."""
    content = block.splitlines()
    start = next(i for i, line in enumerate(content) if "out-of-place" in line)
    end = next(i for i, line in enumerate(content) if "Out of bounds values" in line)
    content = content[start + 1 : end]
    header = next(line for line in content if "time" in line and "busbw" in line)
    names = re.sub(r" +", " ", header[1:].strip(" ")).split(" ")
    size_index = names.index("size")

    def index(name: str) -> int:
        if in_place:
            return -1 - list(reversed(names)).index(name)
        return names.index(name) - len(names)

    rows = []
    for line in content:
        fields = re.sub(r" +", " ", line.strip(" ")).split(" ")
        if not fields or not re.match(r"\d+", fields[0]):
            continue
        rows.append(
            (
                int(fields[size_index]),
                float(fields[index("time")]),
                float(fields[index("algbw")]),
                float(fields[index("busbw")]),
            )
        )
    return rows


def printed_within(value: float, width: int) -> float:
    """Half a unit of the last digit nccl-tests prints of `value` in `width` characters (2
    decimals, fewer where they do not fit: 15643.684 us prints as 15643.7), with a margin."""
    decimals = next((d for d in (2, 1) if len(f"{value:.{d}f}") <= width), 0)
    return 0.6 * 10.0**-decimals


def test_nccl_tests_layout_reads_back_with_their_parsers(two_rank_run: Path, gp: Gp) -> None:
    result = gp("show", str(two_rank_run), "--format", "nccl-tests")
    assert result.code == 0, result.err
    blocks = result.out.strip().split("\n\n")
    summary = summarize_run(open_run(two_rank_run), "collectives")
    assert len(blocks) == summary.groupby(["op", "dtype", "scope", "world_size"]).ngroups
    for block in blocks:
        program = re.search(r"Collective test starting: (\w+)_perf", block)
        assert program is not None
        op = {"alltoall": "all_to_all"}.get(program.group(1), program.group(1))
        mine = summary[summary["op"] == op]
        for in_place in (False, True):
            rows = superbench_rows(block, in_place)
            assert [r[0] for r in rows] == sorted(mine["size_bytes"].unique())
            measured = mine[mine["in_place"] == in_place]
            if measured.empty:  # the place torch does not offer repeats the other one
                measured = mine
            for size, time_us, _, busbw in rows:
                row = measured[measured["size_bytes"] == size]
                slowest, lowest = float(row["time_us"].max()), float(row["busbw_gbps"].min())
                assert time_us == pytest.approx(slowest, abs=printed_within(slowest, 7))
                assert busbw == pytest.approx(lowest, abs=printed_within(lowest, 6))
        lines = block.splitlines()
        data = [line for line in lines if line[:1] != "#"]
        assert data and all(ROW.match(line) for line in data), data
        # nccl-tests' column widths (its "    N/A" is one character narrower than "  %6g")
        assert all(len(line) == 52 + 2 * 33 - line.count("N/A") for line in data)
        avg = [AVG.match(line) for line in lines if line.startswith("# Avg bus bandwidth")]
        assert len(avg) == 1 and avg[0] is not None
        assert float(lines[[ln.startswith("# Avg") for ln in lines].index(True)].split()[-1]) >= 0
        assert any(line.startswith("# Out of bounds values : 0 OK") for line in lines)


def test_export_writes_the_same_text(two_rank_run: Path, gp: Gp, tmp_path: Path) -> None:
    shown = gp("show", str(two_rank_run), "--format", "nccl-tests").out
    target = tmp_path / "perf.txt"
    assert gp("export", "nccl-tests", str(two_rank_run), "-o", str(target)).code == 0
    assert target.read_text() == shown
    wrong = gp("show", str(two_rank_run), "--table", "p2p", "--format", "nccl-tests")
    assert wrong.code == 2 and "--format nccl-tests is for --table collectives" in wrong.err


def test_nccl_tests_option_names_are_understood(gp: Gp, tmp_path: Path) -> None:
    reduction = gp("run", "collectives", "-o", "sum", "--out", str(tmp_path))
    assert (
        reduction.code == 2 and "nccl-tests' -o is the reduction: use --redop sum" in reduction.err
    )
    dry = gp("run", "collectives", "-d", "half,float", "--dry-run", "--out", str(tmp_path))
    assert dry.code == 0, dry.err
    from gpuprof import registry

    params = registry.params_for(registry.get("collectives"), "quick", "cpu", {"dtypes": "half"})
    assert params.dtypes == ("float16",)  # type: ignore[attr-defined]


def test_numbers_keep_nccl_tests_widths_with_fewer_decimals() -> None:
    """getFloatStr (nccl-tests src/util.cu): 2 decimals where they fit, then 1, then none."""
    assert _float(188.694, 7) == " 188.69"
    assert _float(15643.684, 7) == "15643.7"
    assert _float(1234567.4, 7) == "1234567"
    assert _float(1295.41, 6) == "1295.4"
    for value, width in ((188.694, 7), (15643.684, 7), (1295.41, 6), (3.14159, 6)):
        assert abs(float(_float(value, width)) - value) <= printed_within(value, width)


def test_rank_lines_are_nccl_tests_own() -> None:
    """src/common.cu's `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s`,
    read back by the import's rank pattern; a rank on no GPU writes no lines (nccl-tests runs
    on GPUs only)."""
    gpu = {"rank": 1, "host": "node7", "device": "cuda:3", "pid": 4321}
    gpu |= {"gpu_name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:1D:00.0"}
    first = gpu | {"rank": 0, "device": "cuda:0", "pci_bus_id": "0x07"}
    assert rank_lines([gpu, first]) == [
        "#  Rank  0 Group  0 Pid   4321 on      node7 device  0 [0x07] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid   4321 on      node7 device  3 [0000:1d:00] NVIDIA H100 80GB HBM3",
    ]
    cpu = {"rank": 0, "host": "node0", "device": "cpu", "pid": 12}
    assert rank_lines([gpu, cpu]) == []
