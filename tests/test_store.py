"""The run format: folders, shards, consolidation, open_run (DESIGN.md section 3)."""

import json
from pathlib import Path

import pytest

from gpuprof import open_run
from gpuprof.errors import RunNotFoundError, UsageError
from gpuprof.records import CaseRecord, ShardWriter, Where, phase_marker, read_shard, shard_path
from gpuprof.store import RUN_JSON, consolidate, create_run_dir, resolve_run, update_run_json


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


def test_open_run_consolidates_a_run_that_died(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    assert not list(run_dir.glob("*.parquet"))
    assert len(open_run(run_dir).table("collectives")) == 6


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    path = shard_path(run_dir, 0)
    with path.open("a") as handle:
        handle.write('{"type": "case", "probe": "coll')  # a crash mid-write
    assert len(list(read_shard(path))) == 2


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
