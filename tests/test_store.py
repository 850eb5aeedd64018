"""The run format: folders, shards, consolidation, open_run (the run format in the README)."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuprof import open_run
from gpuprof.errors import GpuprofError, RunNotFoundError, UsageError
from gpuprof.runs.records import (
    CaseRecord,
    ShardWriter,
    Where,
    phase_marker,
    read_shard,
    shard_path,
    timeline_record,
)
from gpuprof.runs.store import RUN_JSON, Run, create_run_dir, resolve_run, update_run_json
from gpuprof.runs.tables import as_pandas, consolidate, group_codes, read_parquet, record_starts

ROOT = Path(__file__).resolve().parent.parent


def _where(rank: int) -> Where:
    return Where(
        rank=rank,
        node_rank=0,
        host="h",
        scope="global",
        group="all",
        world_size=2,
        num_nodes=1,
        group_rank=rank,
    )


def _write_run(out: Path) -> Path:
    run_dir = create_run_dir(out, "t")
    update_run_json(run_dir, run_id=run_dir.name, status="complete")
    for rank in range(2):
        writer = ShardWriter(shard_path(run_dir, rank))
        writer.write(phase_marker("collectives", "c1", _where(rank), "start"))
        params = {
            "op": "all_reduce",
            "dtype": "float32",
            "redop": "sum",
            "size_bytes": 4096,
            "in_place": True,
        }
        record = CaseRecord(
            probe="collectives",
            case_id="c1",
            where=_where(rank),
            params=params,
            times_us=[10.0 + rank, 20.0, 30.0],
            results={"nwrong": 0},
        )
        writer.write(record.to_dict())
        writer.close()
    return run_dir


def test_run_numbers_only_grow(tmp_path: Path) -> None:
    first = create_run_dir(tmp_path, "a")
    second = create_run_dir(tmp_path, "b")
    assert (first.name, second.name) == ("0001_a", "0002_b")
    first.rename(tmp_path / "0007_old")
    assert create_run_dir(tmp_path, "c").name == "0008_c"


def test_round_trip_one_row_per_iteration_per_rank(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    consolidate(run_dir)
    run = open_run("latest", tmp_path)
    frame = run.table("collectives")
    assert len(frame) == 6
    assert set(frame.columns) >= {
        "probe",
        "case_id",
        "rank",
        "node_rank",
        "host",
        "world_size",
        "num_nodes",
        "scope",
        "iteration",
        "time_us",
        "op",
        "nwrong",
    }
    assert frame.loc[(frame["rank"] == 1) & (frame["iteration"] == 0), "time_us"].item() == 11.0
    assert open_run("1", tmp_path).path == run_dir
    assert open_run(run_dir).info["status"] == "complete"


def test_a_table_in_memory_and_as_parquet_reads_the_same(tmp_path: Path) -> None:
    """Records whose values differ in kind (text, missing text, a flag missing in one, a
    number missing in one, a list, a column only later records have) give the same frame
    from the shards, from the parquet file and from pandas' own reader (text as text, not
    categories), each record's values on each of its iterations."""
    run_dir = create_run_dir(tmp_path, "t")
    update_run_json(run_dir, run_id=run_dir.name, status="complete")
    writer = ShardWriter(shard_path(run_dir, 0))
    kinds = [
        {"variant": "a", "flag": True, "n": 1, "stages": [0, 1]},
        {"variant": None, "flag": None, "n": None, "stages": [2]},
        {"variant": "b", "flag": False, "n": 3, "stages": [], "later": "x"},
    ]
    for i, params in enumerate(kinds):
        writer.write(
            CaseRecord(
                probe="memory", case_id=f"c{i}", where=_where(0), params=params,
                times_us=[float(i)] * (i + 1), results={"nwrong": 0},
            ).to_dict()
        )  # fmt: skip
    writer.close()
    in_memory = open_run(run_dir).table("memory")
    consolidate(run_dir)
    from_parquet = open_run(run_dir).table("memory")
    pd.testing.assert_frame_equal(from_parquet, pd.read_parquet(run_dir / "memory.parquet"))
    pd.testing.assert_frame_equal(in_memory, from_parquet)
    assert from_parquet["case_id"].tolist() == ["c0", "c1", "c1", "c2", "c2", "c2"]
    assert from_parquet["variant"].isna().tolist() == [False, True, True, False, False, False]
    assert from_parquet["flag"].tolist() == [True, None, None, False, False, False]
    assert from_parquet["n"].iloc[[0, 3]].tolist() == [1.0, 3.0] and from_parquet["n"].isna()[1]
    assert from_parquet["later"].isna().sum() == 3 and from_parquet["later"].iloc[-1] == "x"
    assert [list(v) for v in from_parquet["stages"]] == [[0, 1], [2], [2], [], [], []]
    assert not isinstance(from_parquet["case_id"].dtype, pd.CategoricalDtype)


def test_the_tables_a_sweep_hands_its_report_are_those_a_reader_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tables kept while consolidating (the sweep's report reads no parquet back) equal
    the files read back, for the records of the test above and a rank's; a run given a table
    still says a case lacks a rank's rows."""
    test_a_table_in_memory_and_as_parquet_reads_the_same(tmp_path / "kinds")
    for run_dir in [next((tmp_path / "kinds").iterdir()), _write_run(tmp_path / "ranks")]:
        kept: dict[str, pd.DataFrame] = {}
        consolidate(run_dir, kept)
        assert kept and set(kept) <= set(open_run(run_dir).tables())
        for name, frame in kept.items():
            pd.testing.assert_frame_equal(frame, open_run(run_dir).table(name))
    capsys.readouterr()
    lost = kept["collectives"][lambda f: f["rank"] == 1]
    assert Run(run_dir, {"collectives": lost}).table("collectives") is lost
    assert "collectives: 1 case(s) lack some rank's rows" in capsys.readouterr().err
    # the kept numbers lie on the tables' own memory (no copy): still a frame a reader may set
    # values in ("assignment destination is read-only" otherwise), the file as written
    frame = kept["collectives"]
    frame.loc[frame.index[0], ["rank", "time_us"]] = [7, -1.0]
    assert (frame["rank"].iloc[0], frame["time_us"].iloc[0]) == (7, -1.0)
    assert open_run(run_dir).table("collectives")["time_us"].iloc[0] != -1.0


def _write_mixed_run(out: Path) -> Path:
    """Four ranks whose halves differ: columns only the second half has, a number that is
    an integer in one half and a fraction in the other, a series only rank 3 has, a timeline
    and a case rank 2 measured twice (a resumed run: the last one counts)."""
    run_dir = create_run_dir(out, "mixed")
    update_run_json(run_dir, run_id=run_dir.name, status="complete")
    for rank in range(4):
        writer = ShardWriter(shard_path(run_dir, rank))
        params: dict[str, Any] = {"variant": "a", "n": 1} if rank < 2 else {}
        if rank >= 2:
            params = {"variant": None, "n": 2.5, "later": "x", "stages": [rank]}
        for case_id, times in [("c1", [1.0, 2.0]), ("c2", [3.0 + rank])] + (
            [("c1", [7.0, 8.0, 9.0])] if rank == 2 else []
        ):
            writer.write(
                CaseRecord(
                    probe="memory", case_id=case_id, where=_where(rank), params=params,
                    times_us=times, results={"nwrong": 0},
                    series={"extra_us": [0.5] * len(times)} if rank == 3 else {},
                ).to_dict()
            )  # fmt: skip
        rows = [{"iteration": 0, "kind": "F", "start_us": 0.0, "end_us": float(rank)}]
        writer.write(timeline_record("pipeline", "p1", _where(rank), rows))
        writer.close()
    return run_dir


def test_shards_read_in_two_processes_give_the_tables_read_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the size where consolidation reads the second half of the ranks in another
    process (forced here: 0 bytes), every table is the one a single reading gives; and when
    that process cannot run (its Python fails), its half is read here."""
    from gpuprof.runs.tables import _tables, as_pandas

    run_dir = _write_mixed_run(tmp_path)

    def frames(parallel_bytes: float = math.inf) -> dict[str, pd.DataFrame]:
        found = _tables(run_dir, parallel_bytes)
        return {k: as_pandas(v) if isinstance(v, pa.Table) else v for k, v in found.items()}

    one = frames()
    assert set(one) == {"memory", "pipeline_timeline"}
    memory = one["memory"]
    rank2 = memory[(memory["rank"] == 2) & (memory["case_id"] == "c1")]
    assert rank2["time_us"].tolist() == [7.0, 8.0, 9.0]  # its last measurement of c1
    assert one["memory"]["extra_us"].notna().sum() == 3  # rank 3's two records
    for attempt in ("two processes", "the other fails"):
        if attempt == "the other fails":
            monkeypatch.setattr(sys, "executable", shutil.which("false") or "/bin/false")
        two = frames(0)
        assert set(two) == set(one), attempt
        for name, frame in one.items():
            pd.testing.assert_frame_equal(two[name], frame, obj=f"{name} ({attempt})")


def test_reading_shards_pauses_the_cycle_collector_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle collector is off while shards are parsed (it walked every record kept so
    far: half the reading) and as it was afterwards, after an error too."""
    import gc

    from gpuprof.runs import cases

    run_dir = _write_mixed_run(tmp_path)
    paths = cases.shard_paths(run_dir)
    seen: list[bool] = []
    real = cases.read_shard

    def spied(path: Path) -> Any:
        seen.append(gc.isenabled())
        return real(path)

    monkeypatch.setattr(cases, "read_shard", spied)
    was = gc.isenabled()
    try:
        gc.enable()
        assert cases.read_part(paths).cases["memory"].counts.sum() > 0
        assert seen and not any(seen) and gc.isenabled()

        def broken(path: Path) -> Any:
            raise OSError("gone")

        monkeypatch.setattr(cases, "read_shard", broken)
        with pytest.raises(OSError):
            cases.read_part(paths)
        assert gc.isenabled()
        gc.disable()  # a caller that paused it keeps it paused
        monkeypatch.setattr(cases, "read_shard", real)
        cases.read_part(paths)
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_the_other_process_dead_before_its_paths_is_a_false_send() -> None:
    """A second process that died before it got its shards' paths (more than a pipe holds)
    is a failed send, not an error, and leaves no pipe open (its half is then read here)."""
    from gpuprof.runs.cases import _send

    other = subprocess.Popen(["sh", "-c", "exit 1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    other.wait()
    with other:
        assert not _send(other, [Path("ranks/rank-00000.jsonl")] * 10_000)
    assert other.stdin is not None and other.stdin.closed
    assert other.stdout is not None and other.stdout.closed


def test_a_line_only_pythons_json_reads_is_kept(tmp_path: Path) -> None:
    """A time that is not a number (NaN, as Python's json writes it) is read, not skipped."""
    path = tmp_path / "rank-00000.jsonl"
    writer = ShardWriter(path)
    writer.write({"type": "case", "times_us": [1.0, float("nan"), float("inf")], "big": 2**70})
    writer.close()
    (record,) = list(read_shard(path))
    assert record["times_us"][0] == 1.0 and np.isnan(record["times_us"][1])
    assert record["times_us"][2] == float("inf") and record["big"] == 2**70


def test_a_missing_time_is_a_missing_value_not_a_lost_record(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    writer = ShardWriter(shard_path(run_dir, 1))
    record = CaseRecord(probe="collectives", case_id="c2", where=_where(1), params={},
                        times_us=[5.0, None, 7.0], results={})  # type: ignore[list-item]  # fmt: skip
    writer.write(record.to_dict())
    writer.close()
    frame = open_run(run_dir).table("collectives")
    times = frame.loc[frame["case_id"] == "c2", "time_us"].tolist()
    assert times[0] == 5.0 and np.isnan(times[1]) and times[2] == 7.0 and len(frame) == 9


def test_records_start_where_the_iterations_start_again_or_the_rank_or_start_differs() -> None:
    frame = pd.DataFrame(
        {
            "iteration": [0, 1, 2, 0, 1, 2, 3, 4, 5, 0],
            "rank": [0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
            "start_unix_ns": [5, 5, 5, 9, 9, 9, 9, 7, 7, 7],
        }
    )
    assert record_starts(frame).tolist() == [0, 3, 5, 7, 9]
    assert record_starts(frame.drop(columns=["rank", "start_unix_ns"])).tolist() == [0, 3, 9]
    assert record_starts(frame.drop(columns=["iteration"])).tolist() == list(range(10))


def _snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
    }


def test_reading_a_run_that_died_reads_its_shards_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _write_run(tmp_path)
    update_run_json(run_dir, status="running")  # its launcher died before the end
    before = _snapshot(run_dir)
    run = open_run(run_dir)
    assert len(run.table("collectives")) == 6
    assert run.tables() == ["collectives"]
    assert _snapshot(run_dir) == before  # reading never writes
    assert "still running" in capsys.readouterr().err  # and says what it read


def test_a_damaged_shard_line_is_skipped_with_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _write_run(tmp_path)
    path = shard_path(run_dir, 1)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "garbage {\n")
    path.write_text("".join(lines))
    frame = open_run(run_dir).table("collectives")
    assert len(frame) == 6  # the damaged line was a line of its own: nothing else lost
    assert f"{path}:2 is not a JSON record; skipped" in capsys.readouterr().err


def test_a_run_from_a_newer_gpuprof_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    update_run_json(run_dir, schema_version=99, gpuprof_version="9.0.0")
    with pytest.raises(
        UsageError, match=re.escape("run format 99 (written by gpuprof 9.0.0)")
    ) as info:
        open_run(run_dir)
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize("text", ["{not json", "[]"])
def test_a_damaged_run_json_names_the_file(tmp_path: Path, text: str) -> None:
    run_dir = _write_run(tmp_path)
    (run_dir / RUN_JSON).write_text(text)
    with pytest.raises(GpuprofError, match=re.escape(f"cannot read {run_dir / RUN_JSON}")):
        open_run(run_dir)


def test_a_finished_run_reads_its_parquet_tables(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    consolidate(run_dir)
    update_run_json(run_dir, tables=["collectives"])
    shard_path(run_dir, 0).write_text("")  # the parquet, not the shards, is the record now
    assert open_run(run_dir).consolidated
    assert len(open_run(run_dir).table("collectives")) == 6


def test_torn_last_line_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _write_run(tmp_path)
    path = shard_path(run_dir, 0)
    with path.open("a") as handle:
        handle.write('{"type": "case", "probe": "coll')  # a crash mid-write
    assert len(list(read_shard(path))) == 2
    assert f"{path}:3 is incomplete; skipped" in capsys.readouterr().err


def test_resolve_run_errors(tmp_path: Path) -> None:
    with pytest.raises(RunNotFoundError, match="no runs under"):
        resolve_run("latest", tmp_path)
    with pytest.raises(RunNotFoundError, match="no run '42'"):
        resolve_run("42", tmp_path)


def test_unknown_table_names_the_tables_there(tmp_path: Path) -> None:
    run = open_run(_write_run(tmp_path))
    with pytest.raises(UsageError) as info:
        run.table("p2p")
    assert "no table 'p2p'" in info.value.one_line()
    assert "tables: collectives" in info.value.one_line()


def test_run_json_is_valid_json_after_update(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    update_run_json(run_dir, status="partial")
    assert json.loads((run_dir / RUN_JSON).read_text())["status"] == "partial"


def test_a_table_that_lost_a_ranks_rows_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _write_run(tmp_path)
    shard_path(run_dir, 0).write_text("")  # rank 0's shard emptied
    frame = open_run(run_dir).table("collectives")
    assert set(frame["rank"]) == {1}  # what is left, not recomputed or relabelled
    err = capsys.readouterr().err
    assert "collectives: 1 case(s) lack some rank's rows" in err and "ranks [1]" in err


def test_a_truncated_parquet_is_named_in_one_line(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    consolidate(run_dir)
    update_run_json(run_dir, tables=["collectives"])
    table = run_dir / "collectives.parquet"
    table.write_bytes(table.read_bytes()[:100])
    with pytest.raises(GpuprofError, match=re.escape(f"cannot read {table}")) as info:
        open_run(run_dir).table("collectives")
    assert "gpuprof consolidate" in info.value.one_line()


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(
    os.geteuid() != 0 or SETPRIV is None, reason="needs root and setpriv (util-linux)"
)
def test_reading_a_read_only_run_for_real(two_rank_run: Path, tmp_path: Path) -> None:
    """Write permission dropped for real: the files are read-only and the reader runs without
    CAP_DAC_OVERRIDE (root would otherwise write anyway). show and report still work."""
    runs = {"finished": tmp_path / "finished", "golden": tmp_path / "golden"}
    shutil.copytree(two_rank_run, runs["finished"])
    shutil.copytree(ROOT / "tests" / "data" / "p2p-mesh-slow-link", runs["golden"])
    for run in runs.values():
        subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)
    try:
        drop = [str(SETPRIV), "--bounding-set=-dac_override,-dac_read_search"]
        gp = [sys.executable, "-m", "gpuprof"]
        for run, table in ((runs["finished"], "collectives"), (runs["golden"], "p2p")):
            show = subprocess.run(
                [*drop, *gp, "show", str(run), "--table", table, "--format", "json"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert show.returncode == 0, show.stderr
            assert json.loads(show.stdout)
            report = subprocess.run(
                [*drop, *gp, "report", str(run), "-o", str(tmp_path / f"{run.name}.html")],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert report.returncode == 0, report.stderr
    finally:
        for run in runs.values():
            subprocess.run(["chmod", "-R", "u+w", str(run)], check=True)


def test_runs_lists_every_run_folder_oldest_first(tmp_path: Path, gp: Any) -> None:
    first = create_run_dir(tmp_path, "sweep")
    info = {"status": "complete", "suite": "ci", "num_nodes": 2, "world_size": 16,
            "device": "cuda", "created_utc": "2026-11-25T00:00:00Z"}  # fmt: skip
    (first / RUN_JSON).write_text(json.dumps(info))
    second = create_run_dir(tmp_path, "tp")
    (second / RUN_JSON).write_text("{ damaged")
    (tmp_path / "notes").mkdir()  # not a run folder
    data = json.loads(gp("runs", str(tmp_path), "--format", "json").out)
    assert [r["run"] for r in data] == [first.name, second.name]
    assert data[0]["nodes"] == 2 and data[0]["ranks"] == 16 and data[0]["suite"] == "ci"
    assert data[1]["status"] == "unreadable" and data[1]["bytes"] > 0
    table = gp("runs", str(tmp_path)).out
    assert "2 x 16" in table and "unreadable" in table
    missing = gp("runs", str(tmp_path / "nope"))
    assert missing.code == 2 and "no folder" in missing.err


def test_group_codes_number_groups_by_first_appearance_whatever_the_row_order() -> None:
    """Rows cut into runs of equal keys first: the codes are those of factorizing every row,
    for text (arrow and python), floats with NaN, nullable integers and missing keys, rows
    in record order or shuffled."""
    rng = np.random.default_rng(0)
    text = rng.choice(np.array(["a", "b", "c"], dtype=object), 400)
    text[rng.choice(400, 40)] = None
    frame = pd.DataFrame(
        {
            "arrow": pd.array(text, dtype="string[pyarrow]"),
            "python": pd.array(text, dtype="string[python]"),
            "object": pd.Series(text, dtype=object),
            "float": np.where(rng.random(400) < 0.1, np.nan, rng.integers(0, 3, 400)),
            "nullable": pd.array(rng.integers(0, 3, 400), dtype="Int64"),
        }
    )
    frame.loc[rng.choice(400, 30), "nullable"] = pd.NA
    grouped = frame.sort_values(["arrow", "float"], kind="stable").reset_index(drop=True)
    for table in (frame, grouped, frame.iloc[:1], frame.iloc[:0]):
        for keys in (["arrow"], ["python", "float"], ["object", "nullable"], list(frame)):
            expected = np.zeros(len(table), dtype=np.int64)
            for key in keys:
                column, uniques = pd.factorize(table[key], use_na_sentinel=False)
                expected = pd.factorize(expected * max(1, len(uniques)) + column)[0]
            assert group_codes(table, keys).tolist() == expected.tolist(), keys


def test_tables_read_back_as_pandas_reads_them_each_text_column_in_one_piece(
    tmp_path: Path,
) -> None:
    """A table of several row groups (each with its own dictionary) reads back equal to
    pandas' own reading, dtypes included, each text column one chunk."""
    frame = pd.DataFrame(
        {
            "case": ["x", "y", None, "z"] * 50,
            "empty": [None] * 200,
            "n": np.arange(200),
            "t": np.linspace(0, 1, 200),
            "flag": [True, None] * 100,
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=7)
    read = read_parquet(path)
    pd.testing.assert_frame_equal(read, pd.read_parquet(path))
    assert getattr(pa.array(read["case"].array), "num_chunks", 1) == 1


def test_numbers_are_handed_to_pandas_as_written() -> None:
    """Plain number columns reach pandas on the table's memory (no copy); a column pandas
    wrote with another dtype (nullable Int64), one with a missing value, and bools get
    pandas' own conversion, as before."""
    frame = pd.DataFrame(
        {
            "n": pd.array([1, 2], dtype="Int64"),
            "x": [1.0, 2.0],
            "u": np.array([1, 2], dtype=np.uint8),
            "b": [True, False],
        }
    )
    table = pa.Table.from_pandas(frame, preserve_index=False)
    back = as_pandas(table)
    pd.testing.assert_frame_equal(back, table.to_pandas())
    assert str(back["n"].dtype) == "Int64"
    plain = pa.table({"i": np.arange(4), "f": [1.0, None, 3.0, 4.0]})
    got = as_pandas(plain)
    pd.testing.assert_frame_equal(got, plain.to_pandas())
    assert np.shares_memory(
        got["i"].to_numpy(), np.frombuffer(plain["i"].chunk(0).buffers()[1], np.int64)
    )
