"""`gpuprof import nccl-tests` on real logs as published (tests/data/nccl-tests: each file's
first line names its source, the second what is special about it), on broken ones, and the
round trip through `gpuprof export nccl-tests`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from gpuprof import open_run
from gpuprof.analysis.summary import summarize_run
from gpuprof.units import bus_factor
from tests.conftest import Gp

LOGS = Path(__file__).parent / "data" / "nccl-tests"
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w*)\s+(-?\d+)?\s*(.*)$")

# file: (op, nodes, GPUs per node, cases, versions) as read by hand from each log
EXPECTED = {
    "01_superbench_alltoall_pre2.13_c0_NA_g8.txt": ("all_to_all", 1, 8, 58, {}),
    "02_superbench_allgather_pre2.13_noredop_ncclinfo.txt": ("all_gather", 1, 8, 58, {}),
    "03_superbench_broadcast_pre2.13_root_column.txt": ("broadcast", 1, 8, 64, {}),
    "05_oci_a100_2nodes_v2.13_hexbusid.txt": ("all_reduce", 2, 8, 2, {}),
    "06_nccltests331_sendrecv_t2_ncclinfo_v2.16.txt": (
        "sendrecv",
        1,
        2,
        58,
        {"nccl": "2.22.3+cuda12.2"},
    ),
    "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt": (
        "all_reduce",
        2,
        8,
        64,
        {"nccl": "2.26.2+cuda12.8"},
    ),
    "08_nccl2441_v2.18.3_newest_2nodes_stepbytes.txt": (
        "all_reduce",
        2,
        2,
        22,
        {"nccl_tests": "2.18.3", "nccl": "2.30.5"},
    ),
    "09_rocm5571_rccl-tests_2nodes_R9700.txt": (
        "all_reduce",
        2,
        1,
        50,
        {"rccl_tests": "develop:33cc4df"},
    ),
}


# logs that print no rank lines: the shape given (nodes, GPUs per node; the p5 log's busbw /
# algbw, 483.35 / 276.2 = 1.75, is nccl-tests' all_reduce factor of 8 ranks: one p5)
SHAPED = {
    "04_awsome_awsbatch_p5_mpirun_tagoutput_prefix.txt": ("all_reduce", (1, 8)),
    "11_azureml_v100_2nodes_pre2.13_error_column.txt": ("all_reduce", (2, 8)),
    "13_awsome_p4de_srun_label_prefix_partial.txt": ("all_reduce", (2, 8)),
}


def _import(gp: Gp, out: Path, *args: str | Path) -> list[Path]:
    got = gp("import", "nccl-tests", *args, "--out", out)
    assert got.code == 0, got.err
    return [Path(line) for line in got.out.split()]


def _rows(text: str) -> list[tuple[str, ...]]:
    """The data rows of nccl-tests output: the case columns and the places' fields."""
    found = []
    for line in text.splitlines():
        line = re.sub(r"^(\[\d+,\d+\]<stdout>:|\s*\d+:\s)", "", line)
        if line.startswith("#") or not line.strip() or not line.split()[0].isdigit():
            continue
        found.append(tuple(line.split()))
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_logs_of_every_vintage_become_runs(gp: Gp, tmp_path: Path, name: str) -> None:
    op, nodes, gpus, cases, versions = EXPECTED[name]
    (run_dir,) = _import(gp, tmp_path, LOGS / name)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["source"] == "nccl-tests" and info["status"] == "complete"
    assert (info["num_nodes"], info["gpus_per_node"], info["world_size"]) == (
        nodes,
        gpus,
        nodes * gpus,
    )
    assert len(info["ranks"]) == nodes * gpus and len(info["nodes"]) == nodes
    assert {k: info["versions"][k] for k in versions} == versions
    summary = summarize_run(open_run(run_dir), "collectives")
    assert set(summary["op"]) == {op} and len(summary) == cases
    # every size the log printed (0 bytes aside), both places where it printed both
    sizes = {int(r[0]) for r in _rows((LOGS / name).read_text()) if int(r[0]) > 0}
    assert set(summary["size_bytes"]) == sizes


def _as_ranks(lines: list[str], ranks: int) -> str:
    """Log 07's all_reduce lines as a job of `ranks` would have printed them: each row's busbw
    its algbw x nccl-tests' factor 2(n-1)/n (the import checks the two agree)."""
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) == 13 and fields[0].isdigit():
            for alg, bus in ((6, 7), (10, 11)):
                fields[bus] = f"{float(fields[alg]) * bus_factor('all_reduce', ranks):.2f}"
            line = "  ".join(fields)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_a_log_without_rank_lines_takes_the_shape_given(gp: Gp, tmp_path: Path, name: str) -> None:
    """Published excerpts behind launcher prefixes (Open MPI's `[1,0]<stdout>:`, srun -l's
    `0: `) and an old `error` column print no ranks: the shape is given."""
    log = LOGS / name
    refused = gp("import", "nccl-tests", log, "--out", tmp_path)
    assert refused.code == 2 and "give --nodes and --gpus" in refused.err
    assert not list(tmp_path.iterdir())
    op, (nodes, gpus) = SHAPED[name]
    wrong = gp("import", "nccl-tests", log, "--out", tmp_path, "--nodes", "3", "--gpus", "5")
    assert wrong.code == 2 and "is nccl-tests' bus factor of" in wrong.err  # not 15 ranks
    (run_dir,) = _import(gp, tmp_path, log, "--nodes", str(nodes), "--gpus", str(gpus))
    summary = summarize_run(open_run(run_dir), "collectives")
    rows = [r for r in _rows(log.read_text()) if int(r[0]) > 0]
    assert len(summary) == 2 * len(rows) and set(summary["world_size"]) == {nodes * gpus}
    assert set(summary["op"]) == {op}


def test_a_run_that_crashed_in_its_first_row_has_nothing_to_keep(gp: Gp, tmp_path: Path) -> None:
    """nccl-tests issue 355: the first row breaks off with 'Test CUDA failure'."""
    log = LOGS / "12_nccltests355_alltoall_v2.17.6_2nodes_crash_midrow.txt"
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 2 and "crash_midrow.txt:29:" in got.err and "0 row(s) kept" in got.err
    assert not (tmp_path / "runs").exists()


def test_the_newest_columns_per_iteration_timestamp_and_cputime(gp: Gp, tmp_path: Path) -> None:
    """nccl-tests 2.19's -I (i_min i_max i_p99 i_cv% after each place), 2.17.6's -S (a date
    and time after the row) and -C 1 (`cputime`), written with its printf formats
    (src/util.cu: header `# %10s  %12s  %8s  %6s  %6s  %7s  %6s  ...`, rows `%12li  %12li
    %8s  %6s  %6i` then `  %7s  %6s  %6s  %6g` and `  %7s  %7s  %7s  %7s` per place)."""
    head = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}".format
    place = ["cputime", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"]
    lines = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 1 iters: 5 "
        "agg iters: 1 validation: 1 graph: 0 unalign: 0",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid   10 on a device  0 [0000:19:00] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid   11 on b device  0 [0000:19:00] NVIDIA H100 80GB HBM3",
        "#",
        head("size", "count", "type", "redop", "root") + "  " + "  ".join(place * 2)
        + " " * 10 + "timestamp",
    ]  # fmt: skip
    for size, time in ((8, 21.5), (1024, 23.25)):
        body = f"  {time:7.2f}  {0.0:6.2f}  {0.0:6.2f}  {0:6g}  {20.1:7.2f}  {30.2:7.2f}"
        body += f"  {29.9:7.2f}  {3.1:7.2f}"
        lines.append(f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
                     + body + body + "  2026-11-27 09:00:00")  # fmt: skip
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("\n".join(lines) + "\n# Out of bounds values : 0 OK\n")
    (run_dir,) = _import(gp, tmp_path / "runs", log)
    summary = summarize_run(open_run(run_dir), "collectives")
    assert sorted(summary["time_us"]) == [21.5, 21.5, 23.25, 23.25]
    assert set(summary["nwrong"]) == {0} and set(summary["world_size"]) == {2}


@pytest.mark.parametrize(
    "name",
    [
        "05_oci_a100_2nodes_v2.13_hexbusid.txt",
        "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt",
        "03_superbench_broadcast_pre2.13_root_column.txt",
        "06_nccltests331_sendrecv_t2_ncclinfo_v2.16.txt",
    ],
)
def test_export_gives_back_the_imported_rows(gp: Gp, tmp_path: Path, name: str) -> None:
    (run_dir,) = _import(gp, tmp_path, LOGS / name)
    exported = gp("export", "nccl-tests", run_dir)
    assert exported.code == 0, exported.err
    original = [r for r in _rows((LOGS / name).read_text()) if int(r[0]) > 0]
    again = _rows(exported.out)
    assert len(again) == len(original)
    for old, new in zip(original, again, strict=True):
        # size, count, type as printed; each place's time as printed, its bandwidths as
        # nccl-tests computes them from it (2 decimals), #wrong (an old `error` column: N/A)
        assert new[:3] == old[:3]
        for place in (0, 1):
            o, n = old[len(old) - 8 + 4 * place :], new[len(new) - 8 + 4 * place :]
            assert float(n[0]) == float(o[0])
            for i in (1, 2):
                assert float(n[i]) == pytest.approx(float(o[i]), abs=0.011, rel=0.002)
            assert n[3] == o[3] or (o[3] == "N/A" and n[3] == "N/A")
        if len(old) == len(new) == 13:  # size count type redop root: the reduction as printed
            assert new[3] == old[3]


@pytest.mark.parametrize(
    "name",
    [
        "05_oci_a100_2nodes_v2.13_hexbusid.txt",
        "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt",
        "08_nccl2441_v2.18.3_newest_2nodes_stepbytes.txt",
    ],
)
def test_the_export_imports_back_as_the_same_job(gp: Gp, tmp_path: Path, name: str) -> None:
    """The export writes the ranks as nccl-tests does, so importing it needs no --nodes or
    --gpus: the same hosts, devices and GPUs, the same times."""
    (first,) = _import(gp, tmp_path / "a", LOGS / name)
    exported = tmp_path / "all_reduce_perf.log"
    assert gp("export", "nccl-tests", first, "-o", exported).code == 0
    assert "# Using devices" in exported.read_text()
    (again,) = _import(gp, tmp_path / "b", exported)
    old, new = (json.loads((d / "run.json").read_text()) for d in (first, again))
    for key in ("num_nodes", "gpus_per_node", "world_size", "nodes"):
        assert new[key] == old[key]
    keep = ("rank", "host", "device", "pid", "gpu_name")
    assert [{k: r[k] for k in keep} for r in new["ranks"]] == [
        {k: r[k] for k in keep} for r in old["ranks"]
    ]
    columns = ["size_bytes", "in_place", "time_us", "nwrong"]
    before, after = (summarize_run(open_run(d), "collectives")[columns] for d in (first, again))
    pd.testing.assert_frame_equal(after, before)


def test_a_truncated_log_keeps_its_complete_rows_and_names_the_line(gp: Gp, tmp_path: Path) -> None:
    text = (LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt").read_text()
    lines = text.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1048576 "))
    log = tmp_path / "all_reduce_cut.log"
    log.write_text("".join(lines[:cut]) + lines[cut][:40])  # the last row breaks off
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 0
    assert f"{log}:{cut + 1}:" in got.err and "stopped there" in got.err
    run = open_run(Path(got.out.strip()))
    assert run.info["status"] == "partial"
    sizes = sorted(set(summarize_run(run, "collectives")["size_bytes"]))
    assert sizes[-1] == 524288 and len(sizes) == 17  # 8 B .. 512 KiB, every row before the cut


def test_a_log_cut_between_rows_is_partial_and_names_its_last_row(gp: Gp, tmp_path: Path) -> None:
    """A log that ends after a whole row, before nccl-tests' closing lines (`# Out of bounds
    values`, `# Avg bus bandwidth`), did not finish its test: partial, with a warning naming
    its last row, not a complete run of the sizes it got to."""
    lines = (LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt").read_text()
    lines = lines.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1048576 "))
    log = tmp_path / "all_reduce_cut.log"
    log.write_text("".join(lines[:cut]))  # the last line a whole 512 KiB row
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 0 and f"{log}:{cut}: the test ends without nccl-tests' closing" in got.err
    run = open_run(Path(got.out.strip()))
    assert run.info["status"] == "partial"
    assert max(summarize_run(run, "collectives")["size_bytes"]) == 524288


def test_a_foreign_line_inside_a_table_stops_it_there(gp: Gp, tmp_path: Path) -> None:
    text = (LOGS / "05_oci_a100_2nodes_v2.13_hexbusid.txt").read_text()
    row = next(line for line in text.splitlines() if line.lstrip().startswith("10737418240"))
    log = tmp_path / "mixed.log"
    log.write_text(text.replace(row, row + "\n  4096  1024  float  sum  -1  oops  0.1 0.1 0\n"))
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 0 and "stopped there, 2 row(s) kept" in got.err


def test_cycles_and_repeated_tests_keep_every_time(gp: Gp, tmp_path: Path) -> None:
    """`-N 3` prints each size three times; a second log of the same job adds its times."""
    text = (LOGS / "05_oci_a100_2nodes_v2.13_hexbusid.txt").read_text()
    row = next(line for line in text.splitlines() if line.lstrip().startswith("10737418240"))
    slower = row.replace("90330", "91000")
    log = tmp_path / "all_reduce_n3.log"
    log.write_text(text.replace(row, "\n".join([row, slower, slower])))
    (run_dir,) = _import(gp, tmp_path / "runs", log, LOGS / "05_oci_a100_2nodes_v2.13_hexbusid.txt")
    frame = open_run(run_dir).table("collectives")
    out_of_place = frame[~frame["in_place"]]
    assert sorted(out_of_place["time_us"]) == [90330.0, 90330.0, 91000.0, 91000.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hello world\nthis is not a log\n", "line 1: 'hello world'"),
        ("", "0 line(s), none of them a test's column header"),
        (
            (LOGS / "10_nccltests294_nonmpi_build_interleaved_avg0.txt").read_text(),
            "line 3: '134217728",
        ),
        ("\x7fELF\x02\x01\x01\x00\x00\x00\n", "line 1: not text,"),  # not its bytes escaped
    ],
)
def test_not_a_log_is_one_line_and_writes_nothing(
    gp: Gp, tmp_path: Path, content: str, message: str
) -> None:
    log = tmp_path / "x.log"
    log.write_text(content)
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 2 and message in got.err and "is not nccl-tests output" in got.err
    assert len(got.err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_bad_second_log_writes_nothing(gp: Gp, tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text("no\n")
    good = LOGS / "05_oci_a100_2nodes_v2.13_hexbusid.txt"
    got = gp("import", "nccl-tests", good, bad, "--out", tmp_path / "runs")
    assert got.code == 2 and not (tmp_path / "runs").exists()
    missing = gp("import", "nccl-tests", tmp_path / "nothing.log", "--out", tmp_path / "runs")
    assert missing.code == 2 and "cannot read" in missing.err


def test_logs_of_two_shapes_make_two_runs_and_every_command_reads_them(
    gp: Gp, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    lines = log.read_text().splitlines()  # its first host's 8 ranks alone: one node of 8
    one_node = [line for line in lines if not ("Rank " in line and "bm-h100-02" in line)]
    (tmp_path / "one_node.log").write_text(_as_ranks(one_node, 8))
    two, one = _import(gp, out, log, tmp_path / "one_node.log", "--hardware", "dgx-h100")
    assert json.loads((two / "run.json").read_text())["hardware"]["name"] == "dgx-h100"
    for args in (("show", two), ("report", two), ("compare", two, one, "-o", tmp_path / "c.html")):
        got = gp(*args)
        assert got.code == 0, (args, got.err)
    # the report's scaling section: the calibrated curve, its band, the measured point and
    # other H100 clusters' published all_reduce at the same size
    page = (two / "report.html").read_text()
    assert "band (held-out error)" in page and "published (same system)" in page
    assert "calibrated by what this run measured" in page
    assert "gpuprof measured nothing here" in page and "None logical cores" not in page
    assert "p10-p90 of the iterations" not in page  # one printed mean a size: no spread drawn
    assert "(when it was measured, the log does not say)" in page
    assert "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt: all_reduce (32 rows" in page
    predicted = gp("predict", two, "--nodes", "2,4,16", "--sizes", "8,32M,1G", "--format", "json")
    assert predicted.code == 0, predicted.err
    rows = json.loads(predicted.out)["collectives"]
    measured = [r for r in rows if r["op"] == "all_reduce" and r["source"].startswith("measured")]
    assert {(r["nodes"], r["size_bytes"]) for r in measured} == {
        (2, s) for s in (8, 32 << 20, 1 << 30)
    }
    larger = [r for r in rows if r["op"] == "all_reduce" and r["nodes"] > 2]
    assert len(larger) == 6 and all(r["source"] == "2x8 + dgx-h100" for r in larger)
    assert all(r["terms"].startswith("latency x") for r in larger)


def test_trend_baseline_and_check_read_imported_runs(gp: Gp, tmp_path: Path) -> None:
    """Two imports of one log make a baseline; a log whose 1 MiB and larger times are 1.3x
    is a regression of exactly those cases (exit 1); the same log again passes."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    out = tmp_path / "runs"
    runs = [_import(gp, out, log)[0] for _ in range(3)]
    slow = tmp_path / "all_reduce_slow.log"
    lines = []
    for line in log.read_text().splitlines():
        fields = line.split()
        if len(fields) == 13 and fields[0].isdigit() and int(fields[0]) >= 1 << 20:
            fields[5], fields[9] = (f"{1.3 * float(fields[i]):.1f}" for i in (5, 9))
            line = "  ".join(fields)
        lines.append(line)
    slow.write_text("\n".join(lines) + "\n")
    (slower,) = _import(gp, out, slow)
    assert gp("trend", *runs, slower, "-o", tmp_path / "trend.html").code == 0
    base = tmp_path / "base.json"
    made = gp("baseline", runs[0], runs[1], "-o", base)
    assert made.code == 0 and "when they were measured is not known" in made.out  # not "2 min"
    same = gp("check", "--baseline", base, "--run", runs[2])
    assert same.code == 0 and "regression" not in same.out.splitlines()[-1]
    worse = gp("check", "--baseline", base, "--run", slower)
    assert worse.code == 1 and worse.out.splitlines()[-1] == "34 same, 30 regression"


def test_a_second_run_calibrates_the_node_counts_nearest_it(gp: Gp, tmp_path: Path) -> None:
    """`--calibrate-with`: a test at 2 nodes (the run) and, made from it, one at 4 nodes (its
    rank lines taken out, the shape given): a 4-node prediction comes back as that
    measurement, 8 from the 4-node one; a run that is not there is refused in one line."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    out = tmp_path / "runs"
    (two,) = _import(gp, out, log, "--hardware", "dgx-h100")
    lines = [line for line in log.read_text().splitlines() if "Rank " not in line]
    (tmp_path / "all_reduce_4n.log").write_text(_as_ranks(lines, 32))
    (four,) = _import(gp, out, tmp_path / "all_reduce_4n.log", "--hardware", "dgx-h100",
                      "--nodes", "4", "--gpus", "8")  # fmt: skip
    got = gp("predict", two, "--calibrate-with", four, "--nodes", "2,4,8", "--sizes", "1G",
             "--format", "json")  # fmt: skip
    assert got.code == 0, got.err
    rows = {r["nodes"]: r for r in json.loads(got.out)["collectives"] if r["op"] == "all_reduce"}
    assert rows[2]["source"] == "measured 2x8" and rows[4]["source"] == "measured 4x8"
    assert rows[8]["source"] == "4x8 + dgx-h100"
    assert rows[4]["time_us"] == rows[2]["time_us"]  # the same printed time
    notes = json.loads(got.out)["notes"]
    assert any(f"{two.name} (nccl-tests) at 2 node(s)" in n and f"{four.name}" in n for n in notes)
    assert any("measured across nodes at 2 and 4 nodes" in n for n in notes)
    refused = gp("predict", two, "--calibrate-with", "nowhere", "--nodes", "4")
    assert refused.code == 2


def test_a_run_inside_one_node_predicts(gp: Gp, tmp_path: Path) -> None:
    """A log of one node (no network crossed) imported with --hardware: predict works and says
    the network comes from the preset (its notes once failed on a run with no count across
    nodes)."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    lines = [line for line in log.read_text().splitlines() if "Rank " not in line]
    (tmp_path / "all_reduce_1n.log").write_text(_as_ranks(lines, 8))
    (one,) = _import(gp, tmp_path / "runs", tmp_path / "all_reduce_1n.log", "--hardware",
                     "dgx-h100", "--nodes", "1", "--gpus", "8")  # fmt: skip
    got = gp("predict", one, "--nodes", "1,4", "--sizes", "1M", "--format", "json")
    assert got.code == 0, got.err
    notes = json.loads(got.out)["notes"]
    assert any("crossed no network" in n for n in notes)
    # one GPU moves nothing: time 0, as the preset says (it once divided by that 0, and the
    # report, which draws one node's curve from one GPU up, failed with it)
    got = gp("predict", one, "--nodes", "1", "--gpus", "1", "--sizes", "1M", "--format", "json")
    assert got.code == 0, got.err
    assert {row["time_us"] for row in json.loads(got.out)["collectives"]} == {0.0}
    got = gp("report", one)
    assert got.code == 0 and (one / "report.html").is_file(), got.err


def test_an_all_to_all_under_another_name_says_how_to_name_it(gp: Gp, tmp_path: Path) -> None:
    """all_gather and alltoall print alike and old logs have no test line: the file's name
    decides, and a name that does not says what to call it; nothing is written."""
    text = (LOGS / "01_superbench_alltoall_pre2.13_c0_NA_g8.txt").read_text()
    (tmp_path / "job-142998.out").write_text(text)
    got = gp("import", "nccl-tests", tmp_path / "job-142998.out", "--out", tmp_path / "runs")
    assert got.code == 2 and "name the file after its test" in got.err
    assert len(got.err.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
    (tmp_path / "alltoall_perf.log").write_text(text)
    (run_dir,) = _import(gp, tmp_path / "runs", tmp_path / "alltoall_perf.log")
    assert set(summarize_run(open_run(run_dir), "collectives")["op"]) == {"all_to_all"}


def test_a_slow_size_of_a_real_log_is_a_finding_and_noise_is_not(gp: Gp, tmp_path: Path) -> None:
    """NVIDIA/nccl issue 2441's log: 1,000,000 B took 2.2x the time of 1,100,000 B in both
    places, the report says so first; the noisy log 07 (one place's outliers at 8 B and
    256 B, the other place smooth) has no slow size."""
    (slow,) = _import(gp, tmp_path / "a", LOGS / "08_nccl2441_v2.18.3_newest_2nodes_stepbytes.txt")
    page = (tmp_path / "slow.html").as_posix()
    written = gp("report", slow, "-o", page)
    assert written.code == 0 and written.out.strip() == page  # the path alone on stdout
    assert written.err.startswith("One finding: ") and "\n- all_reduce over 4 ranks" in written.err
    text = Path(page).read_text()
    assert (
        "First finding: all_reduce over 4 ranks on 2 node(s): 1,000,000 B takes 2.2x the time "
        "of the larger 1,100,000 B (343.6 against 153.0 us): the smaller size is slow" in text
    )
    assert "NCCL_DEBUG_SUBSYS=TUNING" in text
    # how the numbers were measured: nccl-tests' times, not gpuprof's warmup and median
    assert "gpuprof measured nothing here" in text and "warmup iteration" not in text
    assert "torch.distributed offers" not in text and "algbw = size / time" in text
    from gpuprof.advice.collectives import findings
    from gpuprof.analysis.summary import Analyzed

    (noisy,) = _import(
        gp, tmp_path / "b", LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    )
    assert not [f for f in findings(Analyzed(open_run(noisy))) if "the time of" in f]


def test_a_slow_size_at_nccls_switch_names_the_choice_to_force() -> None:
    """Where the run names its system, the finding says what NCCL's model picks on each side:
    on Polaris at 2 x 4 GPUs it changes from tree/LL to ring/LL between 64 and 128 KiB, where
    alcf-nccl-tests measured 78.5 and 370.8 us."""
    import pandas as pd

    from gpuprof.advice.collectives import step_findings
    from gpuprof.machine.systems import load_system

    step = {
        "op": "all_reduce", "dtype": "float32", "redop": "sum", "scope": "global",
        "group": "all", "world_size": 8, "num_nodes": 2, "size_small": 65536.0,
        "size_large": 131072.0, "time_small": 78.5, "time_large": 370.8,
        "ratio": 370.8 / 78.5, "kind": "jump",
    }  # fmt: skip
    (text,) = step_findings(pd.DataFrame([step]), {"backend": "nccl"}, load_system("polaris"))
    assert text.startswith(
        "all_reduce over 8 ranks on 2 node(s): 128 KiB takes 4.7x the time of 64 KiB (370.8 "
        "against 78.5 us), more than 2x the bytes explain."
    )
    assert "NCCL's model on polaris picks tree/LL at 64 KiB and ring/LL at 128 KiB" in text
    assert "again with NCCL_ALGO=Tree NCCL_PROTO=LL;" in text
    # Polaris is Slingshot: the settings that moved such steps on CSCS Alps (its study)
    assert "FI_CXI_DEFAULT_CQ_SIZE=131072" in text and "NCCL_CROSS_NIC=1" in text
    (ib,) = step_findings(pd.DataFrame([step]), {"backend": "nccl"}, load_system("abci-a"))
    assert "FI_CXI" not in ib  # InfiniBand: no libfabric
    # said once, with the largest step
    two = pd.DataFrame([step, dict(step, size_small=8192.0, size_large=16384.0, ratio=2.0)])
    first, second = step_findings(two, {"backend": "nccl"}, load_system("polaris"))
    assert "FI_CXI_DEFAULT_CQ_SIZE" in first and "FI_CXI" not in second
    assert "On Slingshot: the settings above." in second
    # the same step where NCCL's model keeps its choice (8 KiB -> 16 KiB: tree/LL on both)
    kept = dict(step, size_small=8192.0, size_large=16384.0)
    (text,) = step_findings(pd.DataFrame([kept]), {"backend": "nccl"}, load_system("polaris"))
    assert "picks tree/LL on both sides: look below NCCL" in text and "NCCL_ALGO=" not in text
    # a gloo run: nothing about NCCL
    (text,) = step_findings(pd.DataFrame([step]), {"backend": "gloo"}, None)
    assert text.endswith("Run it again to see whether it repeats.")
    # inside one node: no network to look at, no Slingshot settings
    one = dict(kept, world_size=4, num_nodes=1)
    (text,) = step_findings(pd.DataFrame([one]), {"backend": "nccl"}, load_system("polaris"))
    assert "its transport in the node" in text and "FI_CXI" not in text
    # a shape the summary cannot say (no node count): the finding without NCCL's choice
    for nodes in (0, float("nan")):
        bad = dict(step, num_nodes=nodes)
        (text,) = step_findings(pd.DataFrame([bad]), {"backend": "nccl"}, load_system("polaris"))
        assert "forced to see which choice is slow" in text
    # past the three named, the rest listed
    many = [dict(step, size_small=float(1 << k), size_large=float(2 << k), ratio=r)
            for k, r in zip(range(10, 15), (5.0, 4.0, 3.0, 2.5, 2.2), strict=True)]  # fmt: skip
    found = step_findings(pd.DataFrame(many), {"backend": "gloo"}, None)
    assert len(found) == 3 and found[-1].endswith(
        "Also slow: all_reduce 8 KiB -> 16 KiB on 2 node(s) 2.5x, all_reduce 16 KiB -> "
        "32 KiB on 2 node(s) 2.2x."
    )


# NVIDIA/nccl issue 1453 (NCCL 2.21, MPICH's -prepend-rank, NCCL_DEBUG_SUBSYS=TUNING): its
# lines as quoted there; nccl-tests prints a row in pieces (src/common.cu: the case's columns,
# then each place's time once measured), NCCL's per-call lines land between them
INFO_1453 = (
    "[0] h100clust-worker-1:497888:497888 [0] NCCL INFO {b} Bytes -> Algo {a} proto {p} "
    "time 25.259054"
)
HEAD_1453 = [
    "[0] # nThread 1 nGpus 1 minBytes 256 maxBytes 524288 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0",
    "[0] #",
    "[0] # Using devices",
    "[0] #  Rank  0 Group  0 Pid 497888 on h100clust-worker-1 device  0 [0xa4] "
    "NVIDIA H100 80GB HBM3",
    "[0] #  Rank  1 Group  0 Pid 496763 on h100clust-worker-32 device  0 [0xa4] "
    "NVIDIA H100 80GB HBM3",
    "[0] #" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
    "[0] #       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "[0] #        (B)    (elements)" + " " * 31 + "(us)  (GB/s)  (GB/s)            (us)  (GB/s)"
    "  (GB/s)",
]


def _log_1453(rows: list[tuple[int, int, int, float, float]]) -> str:
    """The log of rows (size, algo, proto, out-of-place us, in-place us), each broken by
    three per-call lines before each place's time."""
    lines = list(HEAD_1453)
    for size, algo, proto, out, inp in rows:
        info = INFO_1453.format(b=size, a=algo, p=proto)
        lines.append(f"[0] {size:12d}  {size // 4:12d}     float     sum      -1{info}")
        lines += [info] * 2
        lines.append(f"[0]  {out:7.2f}    0.00    0.01      0{info}")
        lines += [info] * 2
        lines.append(f"[0]  {inp:7.2f}    0.00    0.01      0")
    return "\n".join([*lines, "[0] # Out of bounds values : 0 OK", ""])


def test_rows_broken_by_nccls_lines_are_joined_and_keep_nccls_choice(
    gp: Gp, tmp_path: Path
) -> None:
    log = tmp_path / "all_reduce_1453.log"
    rows = [(256, 0, 0, 61.90, 62.05), (65536, 0, 0, 70.0, 71.0), (131072, 1, 0, 400.0, 405.0)]
    log.write_text(_log_1453(rows))
    (run,) = _import(gp, tmp_path / "runs", log)
    summary = summarize_run(open_run(run), "collectives")
    got = sorted(zip(summary["size_bytes"], summary["in_place"], summary["time_us"], strict=True))
    assert got == [
        (256, False, 61.90), (256, True, 62.05), (65536, False, 70.0), (65536, True, 71.0),
        (131072, False, 400.0), (131072, True, 405.0),
    ]  # fmt: skip
    info = json.loads((run / "run.json").read_text())
    assert info["num_nodes"] == 2 and info["status"] == "complete"
    assert info["imported"][0]["tests"][0]["nccl_choices"] == {
        "256": ["tree/LL"], "65536": ["tree/LL"], "131072": ["ring/LL"],
    }  # fmt: skip
    from gpuprof.advice.collectives import findings
    from gpuprof.analysis.summary import Analyzed

    (step,) = [f for f in findings(Analyzed(open_run(run))) if "the time of" in f]
    assert step.startswith("all_reduce over 2 ranks on 2 node(s): 128 KiB takes 5.7x the time")
    assert "NCCL chose (its TUNING lines) tree/LL at 64 KiB and ring/LL at 128 KiB" in step
    assert "again with NCCL_ALGO=Tree NCCL_PROTO=LL;" in step
    # predict calibrates each size against what NCCL ran it with, and says so
    (known,) = _import(gp, tmp_path / "hw", log, "--hardware", "dgx-h100")
    notes = gp("predict", known, "--nodes", "4", "--sizes", "64K").out
    assert "NCCL's own algorithm at 3 size(s), its TUNING lines)" in notes  # every size
    # a log without them: the algorithm at its sizes is the model's, and the notes say so
    plain = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    (other,) = _import(gp, tmp_path / "plain", plain, "--hardware", "dgx-h100")
    notes = gp("predict", other, "--nodes", "4", "--sizes", "64K").out
    assert "at the measured sizes too the algorithm is the model's pick" in notes
    # the log ends inside a row: the rows before it kept, the line named
    cut = log.read_text().rsplit("[0]   405.00", 1)[0]
    log.write_text(cut)
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "cut")
    assert got.code == 0 and "the row breaks off" in got.err


@pytest.mark.parametrize(
    ("line", "choice"),
    [
        ("h:1:1 [0] NCCL INFO 4096 Bytes -> Algo 0 proto 0 time 25.874907", "tree/LL"),  # 2.20-2.22
        (
            "h:1:1 [0] NCCL INFO AllGather: 8192 Bytes -> Algo 6 proto 2 time 9.1",
            "pat/Simple",
        ),  # 2.23
        (
            "h:1:1 [0] NCCL INFO AllReduce: 33554432 Bytes -> Algo NVLS_TREE proto SIMPLE "
            "channel{Lo..Hi}={0..15}",
            "nvls_tree/Simple",
        ),  # 2.24 on (src/collectives.cc ncclAlgoToString)
        ("h:1:1 [0] NCCL INFO 4096 Bytes -> Algo 9 proto 0 time 1.0", None),  # no such enum
        ("h:1:1 [0] NCCL INFO Channel 00/24 : 0 1 2 3", None),
    ],
)
def test_nccls_per_call_choice_in_every_format(line: str, choice: str | None) -> None:
    from gpuprof.runs.nccl_info import read_choice

    assert read_choice(line) == choice


def test_nccls_choices_read_back_skip_what_a_hand_edit_broke() -> None:
    from gpuprof.runs.imported import measured_choices

    tests = [
        {"op": "all_reduce", "nccl_choices": {"abc": ["x"], "64": ["tree/LL"], "128": "ring/LL"}}
    ]
    tests.append({"op": "all_gather", "nccl_choices": {"256": ["ring/LL", "ring/Simple"]}})
    tests.append({"op": "all_reduce", "nccl_choices": {"512": ["ring/LL"]}})
    tests.append({"op": "all_reduce", "nccl_choices": {"512": ["tree/LL"]}})
    info = {"imported": [{"tests": tests}, "junk", {"tests": "x"}]}
    # a size NCCL ran two ways (in one test or two) is not one choice: the log does not say
    # which time is whose
    assert measured_choices(info) == {("all_reduce", 64): "tree/LL"}
    assert measured_choices({"imported": None}) == {} == measured_choices({})


def _printed(host: str, rows: list[tuple[int, str, int, float, float]], check: bool = True) -> str:
    """A log as nccl-tests prints it with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING and no
    launcher prefix: a row's case columns (src/util.cu `%12li  %12li  %8s  %6s  %6s`), NCCL's
    per-call lines right after them (src/debug.cc `host:pid:tid [dev] NCCL INFO`, NCCL 2.24
    on: `AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}`), each place's
    columns (`  %7s  %6s  %6s  %6g`, or `    N/A` unchecked), the newline last. rows: (size,
    redop, root, out-of-place us, in-place us)."""
    head = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        f"#  Rank  0 Group  0 Pid   4242 on {host} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
        f"#  Rank  1 Group  0 Pid   4343 on {host}x device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
    ]
    func = "Reduce" if rows[0][2] >= 0 else "AllReduce"
    out = "\n".join(head) + "\n"
    for size, redop, root, first, second in rows:
        algo = "TREE" if size < 65536 else "RING"
        info = f"{host}:4242:4242 [0] NCCL INFO {func}: {size} Bytes -> Algo {algo} proto LL "
        info += "channel{Lo..Hi}={0..1}\n"
        out += f"{size:12d}  {size // 4:12d}  {'float':>8s}  {redop:>6s}  {root:6d}" + info * 3
        for time in (first, second):
            wrong = f"  {0:6g}" if check else "    N/A"
            out += f"  {time:7.2f}  {0.1:6.2f}  {0.1:6.2f}{wrong}" + (
                info * 2 if time == first else ""
            )
        out += "\n"
    return out + "# Out of bounds values : 0 OK\n"


@pytest.mark.parametrize(
    ("host", "check"), [("gpu-node1", True), ("gpu-node1", False), ("7node", True)]
)
def test_a_plain_log_with_nccls_lines_inside_its_rows_reads_whole(
    gp: Gp, tmp_path: Path, host: str, check: bool
) -> None:
    """Without a launcher prefix NCCL's message follows the root's or #wrong's digits directly
    (`-1gpu-node1:4242:...`): every row and value read as printed, `N/A` unchecked, a host
    starting with a digit known from the rank lines."""
    log = tmp_path / "job.log"  # the name says no op: the columns say it
    rows = [
        (8, "sum", -1, 30.5, 31.5),
        (65536, "sum", -1, 60.25, 61.0),
        (1 << 20, "sum", -1, 150.0, 151.0),
    ]
    log.write_text(_printed(host, rows, check))
    (run,) = _import(gp, tmp_path / "runs", log)
    summary = summarize_run(open_run(run), "collectives")
    got = sorted(zip(summary["size_bytes"], summary["in_place"], summary["time_us"], strict=True))
    want = [(s, place, t) for s, _, _, a, b in rows for place, t in ((False, a), (True, b))]
    assert got == sorted(want) and set(summary["op"]) == {"all_reduce"}
    assert (summary["nwrong"] == 0).all() if check else summary["nwrong"].isna().all()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete"
    assert info["imported"][0]["tests"][0]["nccl_choices"] == {
        "8": ["tree/LL"], "65536": ["ring/LL"], "1048576": ["ring/LL"],
    }  # fmt: skip
    # a reduce (root 0) still reads as a reduce
    log.write_text(_printed(host, [(s, "sum", 0, a, b) for s, _, _, a, b in rows], check))
    (run,) = _import(gp, tmp_path / "reduce", log)
    assert set(summarize_run(open_run(run), "collectives")["op"]) == {"reduce"}


def test_a_row_cut_by_the_next_test_keeps_the_next_test_whole(gp: Gp, tmp_path: Path) -> None:
    """A job that died inside a row and a second test after it: the first test stops at that
    row, the second is read with its own options."""
    first = _printed("gpu-node1", [(8, "sum", -1, 30.5, 31.5), (64, "sum", -1, 33.0, 34.0)])
    cut = first.rsplit("  33.00", 1)[0].rstrip("\n") + "\n"
    second = _printed("gpu-node1", [(8, "sum", -1, 20.0, 21.0)]).replace("iters: 20", "iters: 7")
    log = tmp_path / "all_reduce.log"
    log.write_text(cut + second)
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs")
    assert got.code == 0 and "the row before breaks off" in got.err
    info = json.loads(Path(got.out.split()[0], "run.json").read_text())
    tests = info["imported"][0]["tests"]
    assert [t["rows"] for t in tests] == [1, 1] and "stopped" in tests[0]
    assert tests[1]["options"]["iters"] == "7" and "stopped" not in tests[1]


def _across(op: str, nodes: int, world: int, size: int, time: float) -> dict[str, object]:
    return {
        "op": op, "dtype": "float32", "redop": "sum", "scope": "global", "group": "all",
        "world_size": world, "num_nodes": nodes, "in_place": False, "size_bytes": size,
        "time_us": time, "time_us_p99": time,
    }  # fmt: skip


def test_a_ring_across_nodes_under_its_nics_line_rate_is_a_finding() -> None:
    """A node's NICs bound a ring's traffic between nodes: Polaris's 2-node all_reduce at
    1 GiB (alcf-nccl-tests: 51,310 us, 36.6 GB/s busbw) is 73% of its 2 x 200 Gbit/s."""
    import pandas as pd

    from gpuprof.advice.collectives import nic_findings
    from gpuprof.machine.systems import load_system

    polaris = load_system("polaris")
    rows = [
        _across("all_reduce", 2, 8, 1 << 30, 51310.0),
        _across("all_reduce", 2, 8, 1 << 29, 25729.0),
    ]
    (text,) = nic_findings(pd.DataFrame(rows), polaris)
    assert text.startswith(
        "all_reduce across 2 nodes reaches 36.6 GB/s busbw at 1 GiB, 73% of a node's NICs "
        "(2 x 200 Gbit/s = 50 GB/s), which bound a ring's traffic between nodes"
    )
    assert "polaris says PHB" in text
    quiet = [
        _across("all_reduce", 2, 8, 1 << 30, 51310.0 * 0.7),  # 105%: a tree can pass them
        _across("all_gather", 2, 8, 64 << 20, 50000.0),  # 64 MiB: too small to show the rate
        _across("all_to_all", 2, 8, 1 << 30, 90000.0),  # not a ring's traffic
        _across("all_reduce", 1, 4, 1 << 30, 90000.0),  # one node: no NIC
    ]
    assert nic_findings(pd.DataFrame(quiet), polaris) == []
    assert nic_findings(pd.DataFrame(rows), None) == []  # no system, no line rate
    # a scope of several groups (rails: one GPU of every node each): one finding, the slowest
    rails = [
        dict(_across("all_reduce", 2, 2, 1 << 30, t), scope="rails", group=g)
        for g, t in (("rail0", 100000.0), ("rail1", 200000.0))
    ]
    (text,) = nic_findings(pd.DataFrame(rails), polaris)
    assert text.startswith("all_reduce across 2 nodes (group rail1, the slowest of 2) reaches")
    # a ring past the line rate: the system measured is not the one --hardware names
    over = [_across("all_gather", 2, 8, 1 << 30, 7 / 8 * (1 << 30) / 60e3)]  # 60 GB/s busbw
    (text,) = nic_findings(pd.DataFrame(over), polaris)
    assert "60.0 GB/s busbw at 1 GiB, 120% of the 2 x 200 Gbit/s NICs polaris" in text
    assert "which a ring cannot pass" in text


def test_the_notes_say_what_the_bus_reached_against_the_nics(gp: Gp, tmp_path: Path) -> None:
    """The calibration derives the bus bandwidth a ring reached as a share of the NICs' line
    rate, where NCCL runs a ring: not log 07's all_reduce (2 x 8 H100: NVLS-tree, whose 469
    GB/s at 16 GiB passes the 400 GB/s of a node's NICs, as a tree across two nodes does), but
    an all_gather; a ring past the line rate says the NICs are not the system's."""
    from gpuprof.machine.systems import PRESETS
    from gpuprof.predict.calibrate import calibrate
    from gpuprof.predict.calibrations import calibration_notes, nic_reach

    h100 = PRESETS["dgx-h100"]
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    (run,) = _import(gp, tmp_path, log, "--hardware", "dgx-h100")
    notes = gp("predict", run, "--nodes", "4", "--sizes", "1G").out
    assert "busbw 469.2 GB/s" not in notes and "of a node's NICs'" not in notes
    size = 1 << 30  # all_gather on 16 ranks: busbw = 15/16 x size / time
    for busbw, said in ((380.0, "95% of a node's NICs' 400 GB/s"), (460.0, "a ring cannot")):
        time = 15 / 16 * size / busbw / 1e3
        got = nic_reach(h100, "all_gather", 2, 8, [(size, time)])
        assert got is not None and got[1] == pytest.approx(busbw) and got[2] == 400
        found = calibrate(h100, "all_gather", "float32", 2, 8, [(size, time)], "x")
        assert found is not None
        assert said in " ".join(calibration_notes({("all_gather", "float32"): [found]}, h100))
    assert nic_reach(h100, "all_reduce", 2, 8, [(size, 5000.0)]) is None  # NVLS-tree


def test_sizes_with_wrong_results_calibrate_nothing(gp: Gp, tmp_path: Path) -> None:
    """A size nccl-tests found wrong (#wrong > 0) is left out of the fits and the calibration,
    and the notes say so: no prediction stands on a broken measurement."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    text = log.read_text()
    row = (
        "    33554432       8388608     float     sum      -1    267.9  125.23  234.81      0"
        "    267.7  125.34  235.02      0"
    )
    assert row in text  # out-of-place and in-place both wrong
    (tmp_path / "wrong.log").write_text(text.replace(row, row.replace("  0", "  7"), 1))
    (run,) = _import(gp, tmp_path / "runs", tmp_path / "wrong.log", "--hardware", "dgx-h100")
    got = gp("predict", run, "--nodes", "2", "--sizes", "1M,32M", "--format", "json")
    assert got.code == 0, got.err
    body = json.loads(got.out)
    notes = " ".join(body["notes"])
    assert "32 MiB left out of the fits and calibration (wrong results" in notes
    assert "sizes with wrong results left out" in notes
    times = {r["size_bytes"]: r["time_us"] for r in body["collectives"] if r["op"] == "all_reduce"}
    assert times[1 << 20] == pytest.approx(71.93, abs=0.5)  # measured, given back
    assert times[32 << 20] != pytest.approx(267.8, abs=0.5)  # modelled, not the wrong one
    report = gp("report", run)  # the first finding names them
    assert report.code == 0
    assert "all_reduce on 2 node(s), 16 ranks, returned wrong results at 32 MiB (7 elements" in (
        report.err
    )


def test_hardware_of_another_gpu_than_the_log_names_is_refused(gp: Gp, tmp_path: Path) -> None:
    """--hardware says what the log was measured on: a log whose rank lines name H100s given
    as an A100 system is a one-line exit 2 that writes nothing (a calibration would carry the
    H100's times to A100s); the right system imports."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    got = gp("import", "nccl-tests", log, "--out", tmp_path / "runs", "--hardware", "dgx-a100")
    assert got.code == 2 and "not on dgx-a100's" in got.err and len(got.err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()
    assert _import(gp, tmp_path / "runs", log, "--hardware", "dgx-h100")


def test_a_second_measurement_of_the_same_shape_is_said_not_used(gp: Gp, tmp_path: Path) -> None:
    """`--calibrate-with` a run of the shape the run measured: the run calibrates it, the
    other is named as not used, with how far the two are apart where that is 1.5x or more;
    the run itself given again calibrates once."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    out = tmp_path / "runs"
    (first,) = _import(gp, out, log, "--hardware", "dgx-h100")
    row = "     1048576        262144     float     sum      -1    71.93"
    assert row in log.read_text()
    (tmp_path / "again.log").write_text(log.read_text().replace(row, row[:-5] + "215.8"))
    (again,) = _import(gp, out, tmp_path / "again.log", "--hardware", "dgx-h100")
    got = gp("predict", first, "--calibrate-with", again, "--nodes", "2", "--sizes", "1M",
             "--format", "json")  # fmt: skip
    assert got.code == 0, got.err
    body = json.loads(got.out)
    notes = " ".join(body["notes"])
    assert (
        f"{again.name} (nccl-tests): the shape {first.name} (nccl-tests) measured, not used"
        in notes
    )
    assert "the two differ 3.0x at 1 MiB" in notes
    time = next(r["time_us"] for r in body["collectives"] if r["op"] == "all_reduce")
    assert time == pytest.approx(71.93, abs=0.5)  # the run's own measurement
    itself = gp("predict", first, "--calibrate-with", first, "--format", "json")
    assert itself.code == 0 and "not used" not in " ".join(json.loads(itself.out)["notes"])


def test_a_log_across_nodes_predicts_more_nodes_without_a_system(gp: Gp, tmp_path: Path) -> None:
    """Without --hardware, a log of 2 nodes x 8 (every GPU together) predicts more nodes at 8
    GPUs per node as a ring of each node's ranks adjacent (a node's share of the hops and the
    network's bound on the ring do not change with the node count); at another GPU count per
    node the notes say why not and what to give, rather than advice that does nothing."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    (run,) = _import(gp, tmp_path / "runs", log)
    got = gp("predict", run, "--nodes", "2,8,32", "--sizes", "1G", "--format", "json")
    assert got.code == 0, got.err
    rows = {r["nodes"]: r for r in json.loads(got.out)["collectives"] if r["op"] == "all_reduce"}
    assert sorted(rows) == [2, 8, 32] and all("ring" in r["algorithm"] for r in rows.values())
    assert rows[2]["time_us"] == pytest.approx(4484.9, rel=0.05)  # measured: 4,484.9 us at 1 GiB
    assert rows[2]["time_us"] < rows[8]["time_us"] < rows[32]["time_us"]
    other = gp("predict", run, "--nodes", "2", "--gpus", "4", "--format", "json")
    notes = " ".join(json.loads(other.out)["notes"])
    assert other.code == 0 and "cannot be told apart at 2 node(s) x 4" in notes
    assert "predict more nodes at 8 GPUs per node, or give --hardware" in notes
    assert "--intra-gbps" not in notes
    # a log of collectives alone: nothing said of pipelines or of DDP's compute
    said = " ".join(json.loads(other.out)["assumptions"] + json.loads(other.out)["notes"])
    assert "Pipeline" not in said and "compute" not in said


def test_a_log_that_names_no_gpu_says_so_on_a_system(gp: Gp, tmp_path: Path) -> None:
    """A log without rank lines names no GPU: predicted on a system (--hardware at predict
    time) its collectives are the preset's, and the notes say why and how to calibrate (not
    "the run measured another device")."""
    log = LOGS / "07_nccltests309_h100_2nodes_16ranks_mpirun_noise.txt"
    lines = [line for line in log.read_text().splitlines() if "Rank " not in line]
    (tmp_path / "unnamed.log").write_text("\n".join(lines) + "\n")
    (run,) = _import(gp, tmp_path / "runs", tmp_path / "unnamed.log", "--nodes", "2", "--gpus",
                     "8")  # fmt: skip
    got = gp("predict", run, "--hardware", "dgx-h100", "--nodes", "4", "--format", "json")
    notes = " ".join(json.loads(got.out)["notes"])
    assert got.code == 0 and "the run does not say which GPU it measured" in notes
    assert "import the log with --hardware dgx-h100" in notes and "another device" not in notes
    # what only a DDP measurement answers is said to need one, not silently dropped
    got = gp("predict", run, "--hardware", "dgx-h100", "--model-params", "7B", "--format", "json")
    said = json.loads(got.out)
    assert any(
        n.startswith("DDP not predicted: the run measured no DDP step") for n in said["notes"]
    )
    assert not any("Another model" in line for line in said["assumptions"])


def test_a_log_named_twice_is_read_once(gp: Gp, tmp_path: Path) -> None:
    """The same file given twice is one measurement, not two cycles of it: read once, said."""
    log = LOGS / "05_oci_a100_2nodes_v2.13_hexbusid.txt"
    (once,) = _import(gp, tmp_path / "a", log)
    got = gp("import", "nccl-tests", log, log.parent / ".." / "nccl-tests" / log.name,
             "--out", tmp_path / "b")  # fmt: skip
    assert got.code == 0 and "given more than once, read once" in got.err
    twice = open_run(Path(got.out.strip()))
    assert len(twice.table("collectives")) == len(open_run(once).table("collectives"))
