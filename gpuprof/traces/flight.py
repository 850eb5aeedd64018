"""PyTorch's flight recorder: the per-rank dumps of the last collectives each process group
entered (`TORCH_FR_BUFFER_SIZE`, or `TORCH_NCCL_TRACE_BUFFER_SIZE` with
`TORCH_NCCL_DUMP_ON_TIMEOUT=1`), read together to say why a job hung: which rank did not
enter which collective, where ranks disagree on the op, size or dtype, and the last collective
every rank completed.

A dump is the pickle (or the JSON) that `torch._C._distributed_c10d._dump_fr_trace(_json)`
returns and that NCCL's watchdog writes to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`; the rank is
the number that ends the file name (PyTorch's own reader's rule). Pickles are read with an
unpickler that builds only plain containers, so a file that is not a dump cannot run code.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError
from gpuprof.units import DTYPE_BYTES, format_size

RANK_AT_END = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
# ops whose input sizes legitimately differ across ranks (uneven splits, root-only buffers)
UNEVEN = re.compile(r"to_all|alltoall|^(gather|scatter)$|coalesced|^(send|recv)$", re.I)


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, text and numbers only: a dump holds nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a flight-recorder dump")


@dataclass
class Dump:
    """One rank's dump."""

    rank: int
    path: str
    version: str
    entries: list[dict[str, Any]]
    pg_config: dict[str, Any]
    pg_status: dict[str, Any]


@dataclass
class Group:
    """One process group read across the ranks' dumps."""

    name: str
    desc: str
    ranks: list[int]
    entered: dict[int, int]  # rank -> the last collective sequence number it entered
    completed: dict[int, int | None]  # rank -> the last one it completed (None: not recorded)
    missing: list[dict[str, Any]] = field(default_factory=list)
    mismatch: dict[str, Any] | None = None  # the first collective ranks disagree on
    mismatches: int = 0
    last_all_completed: dict[str, Any] | None = None


def load(path: Path) -> Dump:
    """One dump file; a file that is not one is a UsageError naming it."""
    match = RANK_AT_END.search(path.name)
    if match is None:
        raise UsageError(f"{path}: a flight-recorder dump's name ends with its rank")
    try:
        raw = path.read_bytes()
        data = json.loads(raw) if raw[:1] == b"{" else _PlainUnpickler(io.BytesIO(raw)).load()
    except (OSError, ValueError, pickle.UnpicklingError, EOFError, TypeError) as exc:
        raise UsageError(f"{path}: not a flight-recorder dump ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise UsageError(f"{path}: not a flight-recorder dump (no entries)")
    return Dump(
        rank=int(match.group(1)),
        path=str(path),
        version=str(data.get("version", "")),
        entries=[e for e in data["entries"] if isinstance(e, dict)],
        pg_config=data.get("pg_config") or {},
        pg_status=data.get("pg_status") or {},
    )


def read_dumps(folder: Path) -> list[Dump]:
    """Every dump in a folder (one per rank), by rank."""
    if not folder.is_dir():
        raise UsageError(f"--flight-recorder {folder}: no such folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and RANK_AT_END.search(p.name))
    if not files:
        raise UsageError(
            f"--flight-recorder {folder}: no dump in it (files named <prefix><rank>)",
            "set TORCH_FR_BUFFER_SIZE and dump on timeout or on demand",
        )
    dumps = sorted((load(p) for p in files), key=lambda d: d.rank)
    ranks = Counter(d.rank for d in dumps)
    if twice := sorted(r for r, n in ranks.items() if n > 1):
        raise UsageError(f"--flight-recorder {folder}: two dumps of rank {twice[0]}")
    return dumps


def _seq(entry: dict[str, Any]) -> int:
    return int(entry.get("collective_seq_id", entry.get("seq_id", 0)) or 0)


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "")).split(":", 1)[-1]


def _ranks(text: Any) -> list[int] | None:
    try:
        ranks = json.loads(text) if isinstance(text, str) else text
        return [int(r) for r in ranks] if isinstance(ranks, list) else None
    except (ValueError, TypeError):
        return None


def _elements(sizes: Any) -> int:
    return sum(math.prod(int(x) for x in s) for s in sizes or [] if isinstance(s, list))


def describe(entry: dict[str, Any]) -> dict[str, Any]:
    """What a recorded collective was: op, shapes, dtype, bytes, state."""
    dtypes = [str(d) for d in entry.get("input_dtypes") or []]
    if isinstance(entry.get("input_dtypes"), str):
        dtypes = [entry["input_dtypes"]]
    width = DTYPE_BYTES.get(dtypes[0].lower(), 0) if dtypes else 0
    return {
        "seq": _seq(entry),
        "op": _op(entry),
        "input_sizes": entry.get("input_sizes"),
        "dtype": dtypes[0] if dtypes else "",
        "bytes": _elements(entry.get("input_sizes")) * width if width else None,
        "state": entry.get("state"),
    }


def _signature(entries: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What every rank must agree on for one collective (coalesced ops in order)."""
    parts = []
    for e in sorted(entries, key=lambda e: int(e.get("op_id", 0) or 0)):
        op = _op(e)
        sizes = None if UNEVEN.search(op) else json.dumps(e.get("input_sizes"))
        dtypes = e.get("input_dtypes")
        parts.append((op, sizes, json.dumps(dtypes) if dtypes else None))
    return tuple(parts)


def _status(dump: Dump, group: str, key: str) -> int | None:
    value = (dump.pg_status.get(group) or {}).get(key)
    return None if value is None else int(value)


def _members(name: str, desc: str, dumps: list[Dump], world: list[int]) -> list[int]:
    for dump in dumps:
        for key, config in dump.pg_config.items():
            if (config or {}).get("name", key) == name and name:
                ranks = _ranks(config.get("ranks"))
                if ranks:
                    return sorted(ranks)
    if desc == "default_pg" or name == "0":
        return world
    return sorted(d.rank for d in dumps if any(e["process_group"][0] == name for e in d.entries))


def analyze(dumps: list[Dump]) -> tuple[list[Group], list[int]]:
    """The process groups read across ranks, and the ranks expected but without a dump."""
    world = {d.rank for d in dumps}
    for dump in dumps:
        for config in dump.pg_config.values():
            world.update(_ranks((config or {}).get("ranks")) or [])
    by_group: dict[str, dict[int, dict[int, list[dict[str, Any]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    descs: dict[str, str] = {}
    for dump in dumps:
        for entry in dump.entries:
            if entry.get("is_p2p") or "process_group" not in entry:
                continue
            name, desc = (str(x) for x in entry["process_group"][:2])
            descs.setdefault(name, desc)
            by_group[name][dump.rank][_seq(entry)].append(entry)
    dumped = {d.rank: d for d in dumps}
    groups = [
        _group(name, descs[name], by_group[name], dumped, sorted(world))
        for name in sorted(by_group, key=lambda n: (len(n), n))
    ]
    return groups, sorted(world - set(dumped))


def _group(
    name: str,
    desc: str,
    calls: dict[int, dict[int, list[dict[str, Any]]]],
    dumped: dict[int, Dump],
    world: list[int],
) -> Group:
    ranks = _members(name, desc, list(dumped.values()), world)
    present = [r for r in ranks if r in dumped]
    entered, completed = {}, {}
    for rank in present:
        seqs = calls.get(rank, {})
        last = _status(dumped[rank], name, "last_enqueued_collective")
        entered[rank] = last if last is not None and last >= 0 else max(seqs, default=0)
        done = _status(dumped[rank], name, "last_completed_collective")
        if done is None:
            finished = [
                s for s, es in seqs.items() if all(e.get("state") == "completed" for e in es)
            ]
            done = max(finished) if finished else None
        completed[rank] = done
    group = Group(name, desc, ranks, entered, completed)
    top = max(entered.values(), default=0)
    for rank in present:
        if entered[rank] < top:
            seq = entered[rank] + 1
            by = [r for r in present if seq in calls.get(r, {})]
            example = calls[by[0]][seq][0] if by else {"collective_seq_id": seq}
            newest = _newest(dumped[rank])
            group.missing.append(
                {
                    "rank": rank,
                    **describe(example),
                    "entered_by": by,
                    "created_ns": int(example.get("time_created_ns") or 0),
                    "instead": newest and {**describe(newest), "group": _label(newest)},
                }
            )
    for seq in sorted({s for r in present for s in calls.get(r, {})}):
        have = {r: _signature(calls[r][seq]) for r in present if seq in calls.get(r, {})}
        if len(set(have.values())) > 1:
            group.mismatches += 1
            if group.mismatch is None:
                group.mismatch = {
                    "seq": seq,
                    "by_rank": {r: describe(calls[r][seq][0]) for r in have},
                }
    known = [c for c in completed.values() if c is not None]
    if known and len(known) == len(present):
        last = min(known)
        done_entry = next((calls[r][last][0] for r in present if last in calls.get(r, {})), None)
        group.last_all_completed = describe(done_entry) if done_entry else {"seq": last, "op": ""}
    return group


def _newest(dump: Dump) -> dict[str, Any] | None:
    """The last collective a rank recorded: where it is when it does not enter another."""
    calls = [e for e in dump.entries if not e.get("is_p2p") and "process_group" in e]
    return max(calls, key=lambda e: int(e.get("record_id", 0) or 0), default=None)


def _label(entry: dict[str, Any]) -> str:
    name, desc = (str(x) for x in entry["process_group"][:2])
    return f"process group {name}" + (f" ({desc})" if desc else "")


def _what(item: dict[str, Any]) -> str:
    size = f", {format_size(item['bytes'])}" if item.get("bytes") else ""
    dtype = f" {item['dtype']}" if item.get("dtype") else ""
    return f"#{item['seq']} {item['op'] or 'collective'} ({item.get('input_sizes')}{dtype}{size})"


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) > 8:
        return f"{len(ranks)} ranks ({ranks[0]}-{ranks[-1]})"
    return ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(str(r) for r in ranks)


def verdict(groups: list[Group], absent: list[int]) -> list[str]:
    """The findings, most telling first."""
    lines = []
    if absent:
        lines.append(f"no dump from {_ranks_text(absent)}: died, or never dumped")
    # ranks that did not enter the same collective, and are in the same one instead, together;
    # the collective waited for longest first
    together: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for g in groups:
        for item in g.missing:
            instead = item["instead"]
            key = (g.name, item["seq"], instead and (instead["group"], instead["seq"]))
            together[key].append({**item, "label": _label({"process_group": (g.name, g.desc)})})
    for items in sorted(together.values(), key=lambda items: items[0]["created_ns"]):
        item, ranks = items[0], [i["rank"] for i in items]
        instead = item["instead"]
        whose = "their" if len(ranks) > 1 else "its"
        where = (
            f"; {whose} last recorded: {_what(instead)} of {instead['group']}" if instead else ""
        )
        lines.append(
            f"{_ranks_text(ranks)} did not enter {_what(item)} of {item['label']}, "
            f"which {_ranks_text(item['entered_by'])} entered{where}"
        )
    for g in groups:
        label = _label({"process_group": (g.name, g.desc)})
        if g.mismatch is not None:
            seen = "; ".join(
                f"{_ranks_text([r])}: {_what(d)}" for r, d in sorted(g.mismatch["by_rank"].items())
            )
            lines.append(
                f"ranks disagree at collective #{g.mismatch['seq']} of {label} "
                f"({g.mismatches} such): {seen}"
            )
    if not lines:
        lines.append("every rank entered the same collectives: no hang or mismatch recorded")
    return lines


def text(folder: Path) -> tuple[str, dict[str, Any]]:
    """The text `gpuprof trace --flight-recorder` prints, and the same as JSON."""
    dumps = read_dumps(folder)
    groups, absent = analyze(dumps)
    found = verdict(groups, absent)
    out = [
        f"flight recorder: {len(dumps)} dumps ({_ranks_text([d.rank for d in dumps])}), "
        f"format {dumps[0].version or '?'}",
        *found,
    ]
    for g in groups:
        last = g.last_all_completed
        done = _what(last) if last else "not recorded"
        spread = f"{min(g.entered.values(), default=0)}-{max(g.entered.values(), default=0)}"
        out.append(
            f"process group {g.name} ({g.desc or '-'}), {len(g.ranks)} ranks: entered "
            f"#{spread}; last completed by every rank: {done}"
        )
    payload = {
        "dumps": [{"rank": d.rank, "path": d.path, "version": d.version} for d in dumps],
        "absent": absent,
        "findings": found,
        "groups": [g.__dict__ for g in groups],
    }
    return "\n".join(out) + "\n", payload
