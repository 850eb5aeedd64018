"""`gpuprof trace --flight-recorder`: PyTorch flight-recorder dumps of real gloo jobs that hang
on purpose (committed, and one written again here by this torch), and dumps shaped as PyTorch's
own flight-recorder tests shape them, read against PyTorch's own analyzer."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof.traces.flight import analyze, read_dumps, text
from tests.conftest import Gp

DATA = Path(__file__).parent / "data" / "flight-recorder"
JOB = Path(__file__).parent / "jobs" / "flight_recorder.py"


def _missing(folder: Path) -> dict[tuple[str, int], list[int]]:
    groups, _ = analyze(read_dumps(folder))
    found: dict[tuple[str, int], list[int]] = {}
    for g in groups:
        for item in g.missing:
            found.setdefault((g.name, item["seq"]), []).append(item["rank"])
    return found


def test_a_rank_that_skipped_a_collective_is_named_with_its_sequence_number(gp: Gp) -> None:
    result = gp("trace", "--flight-recorder", DATA / "gloo-skip")
    assert result.code == 0, result.err
    assert _missing(DATA / "gloo-skip") == {("0", 4): [1]}
    lines = result.out.splitlines()
    assert lines[1].startswith(
        "rank 1 did not enter #4 all_reduce ([[1000]] Float, 3.9 KiB) of process group 0 "
        "(default_pg), which ranks 0, 2 entered"
    )
    assert "last completed by every rank: #3 all_reduce" in result.out


def test_ranks_waiting_in_two_groups_for_each_other_are_both_named(gp: Gp) -> None:
    """Rank 0 skipped group 1's second all_reduce and waits in a barrier of every rank, which
    ranks 1 and 2 never reach: both halves of the deadlock, each with where the ranks are."""
    folder = DATA / "gloo-crossed-groups"
    assert _missing(folder) == {("0", 4): [1, 2], ("1", 2): [0]}
    result = gp("trace", "--flight-recorder", folder, "--format", "json")
    payload = json.loads(result.out)
    assert [g["ranks"] for g in payload["groups"]] == [[0, 1, 2, 3], [0, 1, 2]]
    assert any(
        f.startswith("rank 0 did not enter #2 all_reduce") and "its last recorded: #4 barrier" in f
        for f in payload["findings"]
    )
    assert payload["groups"][1]["last_all_completed"]["seq"] == 1


def test_a_real_job_written_by_this_torch_reads_the_same(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, JOB, tmp_path, "--scenario", "skip", "--json"], check=True, timeout=240
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "rank_1", "rank_2"]
    assert _missing(tmp_path) == _missing(DATA / "gloo-skip")
    assert text(tmp_path)[1]["findings"] == text(DATA / "gloo-skip")[1]["findings"]


# Dumps as PyTorch's own tests build them (test/distributed/flight_recorder/test_fr_analysis.py:
# create_one_entry, LOADED_FR_DETAIL_TEMPLATE): NCCL's pg_config with named groups, seq ids as
# text, dtypes as torch names, every entry completed.
def _entry(
    record: int, seq: int, name: str, sizes: list[list[int]], pg: str = "0"
) -> dict[str, Any]:
    return {
        "record_id": record,
        "profiling_name": f"nccl:{name}",
        "state": "completed",
        "process_group": (pg, "default_pg" if pg == "0" else "sub_pg"),
        "input_sizes": sizes,
        "output_sizes": sizes,
        "input_dtypes": "float32",
        "output_dtypes": "float32",
        "collective_seq_id": str(seq),
        "p2p_seq_id": "0",
        "time_created_ns": record,
        "frames": [],
        "is_p2p": False,
    }


def _nccl_dumps(sizes_on_rank_1: list[list[int]]) -> dict[str, dict[str, Any]]:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}}
    dumps = {}
    for rank in (0, 1):
        sizes = sizes_on_rank_1 if rank == 1 else [[4, 4]]
        entries = [_entry(0, 1, "all_reduce", [[8]]), _entry(1, 2, "all_reduce", sizes)]
        dumps[f"nccl_trace_rank_{rank}"] = {
            "rank": rank,
            "version": "2.8",
            "pg_config": config,
            "entries": entries,
        }
    return dumps


def _write(folder: Path, dumps: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir()
    for name, dump in dumps.items():
        (folder / name).write_bytes(pickle.dumps({k: v for k, v in dump.items() if k != "rank"}))
    return folder


def test_a_size_mismatch_is_the_collective_pytorchs_analyzer_fails(tmp_path: Path) -> None:
    builder = pytest.importorskip("torch.distributed.flight_recorder.components.builder")
    config = pytest.importorskip("torch.distributed.flight_recorder.components.config_manager")
    dumps = _nccl_dumps([[5, 4]])
    groups, absent = analyze(read_dumps(_write(tmp_path / "bad", dumps)))
    assert absent == [2]  # rank 2 is in the group but wrote no dump
    (group,) = groups
    assert group.mismatch is not None and group.mismatch["seq"] == 2
    assert group.mismatches == 1 and not group.missing
    assert group.last_all_completed is not None and group.last_all_completed["seq"] == 2
    args = config.JobConfig().parse_args(["--allow-incomplete-ranks"])
    theirs = builder.build_db(copy.deepcopy(dumps), args, "2.8")
    assert [c.pass_check for c in theirs.collectives] == [True, False]
    assert theirs.collectives[1].record_id == 1  # the same collective: seq 2, record 1
    same = _nccl_dumps([[4, 4]])
    groups, _ = analyze(read_dumps(_write(tmp_path / "good", same)))
    assert groups[0].mismatch is None
    assert all(c.pass_check for c in builder.build_db(copy.deepcopy(same), args, "2.8").collectives)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"rank_0": b"hello"}, "rank_0: not a flight-recorder dump"),
        ({"rank_0": pickle.dumps(Path("x"))}, "rank_0: not a flight-recorder dump"),
        ({"rank_0": b"{}"}, "rank_0: not a flight-recorder dump (no entries)"),
        ({"a_0": b'{"entries": []}', "b_0.json": b'{"entries": []}'}, "two dumps of rank 0"),
        ({"notes.txt": b"x"}, "no dump in it"),
    ],
)
def test_a_folder_that_is_not_dumps_is_one_line_and_exit_2(
    gp: Gp, tmp_path: Path, files: dict[str, bytes], message: str
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    result = gp("trace", "--flight-recorder", tmp_path)
    assert result.code == 2 and message in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_flight_recorder_is_read_alone(gp: Gp, tmp_path: Path) -> None:
    result = gp("trace", tmp_path, "--flight-recorder", DATA / "gloo-skip")
    assert result.code == 2 and "--flight-recorder reads dumps alone" in result.err
    assert gp("trace").code == 2
