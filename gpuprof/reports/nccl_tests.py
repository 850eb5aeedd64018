"""The collectives summary in nccl-tests' own output layout (NVIDIA/nccl-tests src/util.cu:
the options line, the ranks, the header, one line per size, the two footer lines), so
scripts that parse `*_perf` output read gpuprof's numbers unchanged: one block per op,
dtype, scope and world size, like one run of `<op>_perf`, with the slowest group's numbers (a
collective ends when its slowest group does).

torch runs all_reduce, broadcast and reduce in place only, and all_to_all and send/recv out of
place only: the columns of the other place repeat the measured place's time and bandwidth with
`N/A` for #wrong (nccl-tests' own mark for unchecked), as the block's header says, and the
footer's average counts each measured case once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from gpuprof import registry
from gpuprof.analysis.summary import summarize_run
from gpuprof.errors import UsageError
from gpuprof.machine.topology import bus_id_fields
from gpuprof.runs.nccl_names import TYPES
from gpuprof.runs.store import Run
from gpuprof.specs.collectives import IN_PLACE_ONLY, OUT_OF_PLACE_ONLY

TYPE_NAMES: dict[str, str] = {}  # gpuprof's dtype -> nccl-tests' type name
ELEMENT_BYTES: dict[str, int] = {}
for _name, (_dtype, _bytes) in TYPES.items():
    TYPE_NAMES.setdefault(_dtype, _name)
    ELEMENT_BYTES.setdefault(_dtype, _bytes)
PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all")  # count = per-rank elements
PROGRAMS = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "broadcast": "broadcast_perf",
    "reduce": "reduce_perf",
    "all_to_all": "alltoall_perf",
    "sendrecv": "sendrecv_perf",
}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce")


def _float(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, fewer if they do not fit, else exponent."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _body(row: pd.Series | None, measured: pd.Series) -> str:
    """One place's columns: its own numbers, or the measured place's with #wrong N/A."""
    source = row if row is not None else measured
    time = _float(float(source["time_us"]), 7)
    algbw, busbw = _float(float(source["algbw_gbps"]), 6), _float(float(source["busbw_gbps"]), 6)
    if row is None or pd.isna(row["nwrong"]):
        return f"  {time:>7}  {algbw:>6}  {busbw:>6}    N/A"
    return f"  {time:>7}  {algbw:>6}  {busbw:>6}  {float(row['nwrong']):6g}"


def rank_lines(ranks: Sequence[Mapping[str, Any]]) -> list[str]:
    """nccl-tests' `# Using devices` lines (src/common.cu since 2.13: `#  Rank %2d Group %2d
    Pid %6d on %10s device %2d [%04x:%02x:%02x] %s`) of run.json's ranks, by rank; none
    where a rank ran on no GPU (nccl-tests runs on GPUs only). NVML's bus id
    (00000000:1d:00.0) is written as nccl-tests writes it; an imported log's as it read."""
    lines = []
    for rank in sorted(ranks, key=lambda r: int(r["rank"])):
        device, name = str(rank.get("device", "")), rank.get("gpu_name")
        if not device.startswith("cuda:") or not name:
            return []
        bus = str(rank.get("pci_bus_id") or "")
        fields = bus_id_fields(bus)
        if fields is not None:
            bus = f"{fields[0]:04x}:{fields[1]:02x}:{fields[2]:02x}"
        lines.append(
            f"#  Rank {int(rank['rank']):2d} Group  0 Pid {int(rank.get('pid') or 0):6d} on "
            f"{rank['host']!s:>10} device {int(device[5:]):2d} [{bus}] {name}"
        )
    return lines


def _header(
    program: str, op: str, note: str, places: set[bool], sizes: tuple[int, int], ranks: list[str]
) -> list[str]:
    """The block's first lines: nccl-tests' options line with what gpuprof knows of them (one
    process per GPU: nThread 1 nGpus 1; the sizes), the ranks where they are the block's own,
    gpuprof's notes, the column header."""
    lines = [
        f"# Collective test starting: {program}",
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[1]}",
    ]
    lines += ["#", "# Using devices", *ranks] if ranks else []
    lines.append(f"# gpuprof: {note}")
    if op in IN_PLACE_ONLY and places == {True}:
        lines.append("# gpuprof: torch runs it in place only: out-of-place repeats in-place")
    if op in OUT_OF_PLACE_ONLY and places == {False}:
        lines.append("# gpuprof: torch runs it out of place only: in-place repeats out-of-place")
    blank = ("", "", "", "", "")
    lines += [
        "#",
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       "
        "in-place          ".format(*blank),
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}"
        "  {:>6} ".format(
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong",
        ),
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}"
        "  {:>6} ".format(
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
        ),
    ]
    return lines


def nccl_tests_text(
    summary: pd.DataFrame, label: str = "", ranks: Sequence[Mapping[str, Any]] = ()
) -> str:
    """Every op, dtype, scope and world size of a collectives summary as nccl-tests blocks
    (`label` opens each block's note: what measured it, when not the collectives probe).
    `ranks` (run.json's) are written as nccl-tests' rank lines in the blocks of every rank,
    so `gpuprof import nccl-tests` reads the job's shape back from them."""
    devices = rank_lines(ranks)
    blocks = []
    keys = ["op", "dtype", "scope", "world_size"]
    slowest = summary.sort_values("time_us").groupby([*keys, "size_bytes", "in_place"]).tail(1)
    for (op, dtype, scope, world), rows in slowest.groupby(keys, sort=False):
        op, dtype = str(op), str(dtype)
        n = int(str(world))
        groups = summary[(summary["op"] == op) & (summary["scope"] == scope)]["group"].nunique()
        note = f"{label}scope {scope}, {n} ranks"
        note += f", slowest of {groups} groups" if groups > 1 else ""
        sizes = (int(rows["size_bytes"].min()), int(rows["size_bytes"].max()))
        mine = devices if groups == 1 and n == len(devices) else []
        done = {bool(p) for p in rows["in_place"]}
        lines = _header(PROGRAMS[op], op, note, done, sizes, mine)
        busbws, wrong = [], 0
        for size_key, by_place in rows.groupby("size_bytes", sort=True):
            size = int(str(size_key))
            places = {
                bool(p): r
                for p, r in zip(by_place["in_place"], by_place.to_dict("records"), strict=True)
            }
            out_row, in_row = places.get(False), places.get(True)
            measured = pd.Series(out_row if out_row is not None else in_row)
            elements = size // ELEMENT_BYTES[dtype] // (n if op in PER_RANK_COUNT else 1)
            # sendrecv_perf prints its (unused) reduction, sum; the others without one "none"
            redop = str(measured["redop"]) if op in (*REDUCING, "sendrecv") else "none"
            root = 0 if op in ROOTED else -1
            line = f"{size:12d}  {elements:12d}  {TYPE_NAMES[dtype]:>8}  {redop:>6}  {root:6d}"
            line += _body(pd.Series(out_row) if out_row is not None else None, measured)
            line += _body(pd.Series(in_row) if in_row is not None else None, measured)
            lines.append(line)
            for row in (out_row, in_row):
                if row is not None:
                    busbws.append(float(row["busbw_gbps"]))
                    wrong += 0 if pd.isna(row["nwrong"]) else int(row["nwrong"])
        avg = sum(busbws) / len(busbws) if busbws else math.nan
        lines += [
            f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
            f"# {'Avg bus bandwidth':<20} : {avg:g} ",
            "#",
            f"# Collective test concluded: {PROGRAMS[op]}",
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def run_text(run: Run, table: str | None = None) -> str:
    """Every table of the run whose probe declares an nccl-tests layout (registry
    `nccl_tests`), in that layout; with `table`, that probe's only. A UsageError when the run
    has none, or `table` has no such layout."""
    shaped = [s for s in registry.specs().values() if s.nccl_tests is not None]
    if table is not None:
        allowed = " or ".join(s.name for s in shaped)
        shaped = [s for s in shaped if s.name == table]
        if not shaped:
            raise UsageError(
                f"--format nccl-tests is for --table {allowed}, not {table}",
                "nccl-tests' layout fits collectives (and MoE dispatches of equal splits)",
            )
    names = " or ".join(s.name for s in shaped)
    present = [s for s in shaped if all(t in run.tables() for t in s.table_names)]
    if not present:
        raise UsageError(f"run {run.path} has no {names} table", "measure it with gpuprof sweep")
    texts = []
    for spec in present:
        summary = summarize_run(run, spec.name)
        if spec.nccl_tests is not None and not summary.empty:
            text = registry.load(spec.nccl_tests)(summary, ranks=run.info.get("ranks") or ())
            texts.extend([text] if text else [])  # a probe may have no case of that shape
    if not texts:
        raise UsageError(f"run {run.path} has no {names} case", "measure them with gpuprof sweep")
    return "".join(texts)
