"""nccl-tests output as it is printed, read (`gpuprof import nccl-tests`; the run is written by
gpuprof.runs.imported). Stdlib only.

What nccl-tests prints (NVIDIA/nccl-tests src/common.cu and src/util.cu): a header line of
its options (`# nThread 1 nGpus 8 minBytes 8 maxBytes ... iters: 20 ... validation: 1 graph:
0`), one line per rank under `# Using devices` (`#  Rank  0 Group  0 Pid 1234 on host1 device
0 [0x07] NVIDIA H100 80GB HBM3`; before nccl-tests 2.12 without `Group`), a column header
(`size count type redop root time algbw busbw #wrong time algbw busbw #wrong`: the columns
before the first `time` name the case, then one group of four per place, out-of-place first),
one row per size (`-N` cycles repeat the sizes), and a footer (`# Out of bounds values`, `# Avg
bus bandwidth`). Older versions print `error` (the largest error, a float) where newer print
`#wrong` (values that were wrong; `N/A` with `-c 0`), and some have no `redop` or `root`
column; 2.17.6 adds a `timestamp` column (`-S`), 2.19.2 four per-iteration columns per place
(`-I`: i_min i_max i_p99 i_cv%), and `-C 1` calls the time `cputime`. The column header drives
the reading, so every vintage reads the same way.

A log may hold several tests (one block each), NCCL_DEBUG=INFO lines (between the lines, or
inside a row's line where nccl-tests printed it in pieces: gpuprof.runs.nccl_info; with
NCCL_DEBUG_SUBSYS=TUNING each row keeps NCCL's choices), launcher prefixes (`[1,0]<stdout>:`
of Open MPI's --tag-output, `0: ` of srun --label, `[0] ` of MPICH's -prepend-rank) and
anything else a job prints between blocks. The op of a block is the program's (`# Collective test
starting: all_gather_perf`, a command line naming `*_perf`, or the file's name), else what the
columns imply (a reduction with root -1 is all_reduce or reduce_scatter by its count, ...).

A row that breaks off (a truncated log) or does not fit its block's columns ends that block:
the rows before it are kept and the line is named. A file with no nccl-tests block at all is a
UsageError naming its first line that nccl-tests does not print.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuprof.errors import UsageError
from gpuprof.runs.nccl_info import message_start, read_choice, read_versions
from gpuprof.runs.nccl_names import (
    NUMBER,
    OTHER_PROGRAMS,
    PROGRAMS,
    REDOPS,
    TYPES,
    file_op,
    guess_op,
)

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|\[\d+\] )")
_OPTIONS = re.compile(r"^#\s*nThread\s+\d+")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_PROGRAM = re.compile(r"\b(?P<name>[a-z_]+)_perf\b")
_FOOTER = re.compile(r"^#\s*(Out of bounds values|Avg bus bandwidth)")
_NOISE = re.compile(r"\b[RN]CCL (INFO|WARN|TRACE)\b|^\s*$")


@dataclass(frozen=True)
class Device:
    """One rank as the `# Using devices` lines name it."""

    rank: int
    host: str
    device: int
    bus: str
    name: str
    pid: int


@dataclass(frozen=True)
class Row:
    """One case of one block: a size in one place, and the time of each cycle (`-N`)."""

    op: str
    dtype: str
    redop: str
    root: int
    size_bytes: int
    count: int
    in_place: bool
    times_us: tuple[float, ...]
    nwrong: float | None  # None: not checked (`N/A`), or an older version's `error` column
    line: int
    choices: tuple[str, ...] = ()  # NCCL's algorithm/protocol for its calls (TUNING lines)
    printed_bw: tuple[float, float] | None = None  # (algbw, busbw) as printed, GB/s


@dataclass
class Block:
    """One test's table: the program, where it starts, the ranks and options printed before
    it, its rows, and where reading stopped."""

    program: str | None
    op: str
    first_line: int
    columns: tuple[str, ...]
    devices: tuple[Device, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    stopped: str | None = None  # why the block ends early (a truncated or mixed-up line)
    ended: bool = False  # its footer was read: nccl-tests finished the test


@dataclass(eq=False)
class Log:
    """What one nccl-tests log holds."""

    path: Path
    lines: int = 0
    blocks: list[Block] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # blocks with no gpuprof op, said why

    @property
    def stopped(self) -> list[str]:
        return [b.stopped for b in self.blocks if b.stopped]

    @property
    def rows(self) -> list[Row]:
        return [r for b in self.blocks for r in b.rows]


def _options(text: str) -> dict[str, str]:
    """`# nThread 1 nGpus 8 minBytes 8 ... step: 2(factor) warmup iters: 5 iters: 20 ...`."""
    found = {}
    for match in re.finditer(r"([A-Za-z][A-Za-z ]*?):?\s+(-?\d+(?:\([a-z]+\))?)", text[1:]):
        found[match.group(1).strip().replace(" ", "_")] = match.group(2)
    return found


def _column_header(text: str) -> tuple[str, ...] | None:
    """The column names of `#  size  count  type  redop  root  time ...`, or None."""
    tokens = ["time" if t == "cputime" else t for t in text.lstrip("#").split()]  # -C 1
    if len(tokens) < 6 or tokens[0] != "size" or "count" not in tokens or "time" not in tokens:
        return None
    return tuple(tokens)


def _bandwidths(group: dict[str, str]) -> tuple[float, float] | None:
    """A place's printed algbw and busbw, where both are numbers."""
    alg, bus = _value(group.get("algbw", "")), _value(group.get("busbw", ""))
    return (alg, bus) if alg is not None and bus is not None else None


def _value(token: str) -> float | None:
    return float(token) if NUMBER.match(token) else None


def _fixed(names: tuple[str, ...], tokens: list[str]) -> dict[str, str] | None:
    """The case's columns of a row. Older versions print an empty redop for ops without one
    (alltoall_perf: `%6s` of ""), so a row may have fewer: size, count and type stand first,
    then a number is the root and a word the redop."""
    if len(tokens) == len(names):
        return dict(zip(names, tokens, strict=True))
    if len(tokens) < 3 or len(tokens) > len(names) or names[:3] != ("size", "count", "type"):
        return None
    fixed = dict(zip(names[:3], tokens[:3], strict=True))
    for token in tokens[3:]:
        key = "root" if NUMBER.match(token) else "redop"
        if key not in names or key in fixed:
            return None
        fixed[key] = token
    return fixed


def _places(columns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The places' column groups: each from a `time` to the next (`time algbw busbw #wrong`,
    and with -I the iteration columns `i_min i_max i_p99 i_cv%`), out-of-place first."""
    names = [c for c in columns if c != "timestamp"]
    starts = [i for i, c in enumerate(names) if c == "time"]
    return [tuple(names[a:b]) for a, b in zip(starts, [*starts[1:], len(names)], strict=True)]


def _parse_row(
    tokens: list[str], block: Block, named_op: str | None, number: int
) -> list[Row] | str:
    """The cases of one row (one per place), or why it does not fit the block's columns."""
    columns = block.columns
    start = columns.index("time")
    places = _places(columns)
    if len(places) not in (1, 2) or any(p[:3] != ("time", "algbw", "busbw") for p in places):
        return "the columns after 'time' are not groups of time, algbw, busbw, #wrong"
    if "timestamp" in columns and len(tokens) > 2 and re.match(r"\d{4}-\d\d-\d\d$", tokens[-2]):
        tokens = tokens[:-2]  # -S: the row's date and time
    split = len(tokens) - sum(len(p) for p in places)
    fixed = _fixed(columns[:start], tokens[:split]) if split > 0 else None
    if fixed is None:
        return f"{len(tokens)} fields where the columns say {len(columns)}"
    kind = TYPES.get(fixed.get("type", "float"))
    if kind is None:
        return f"unknown type {fixed.get('type')!r}"
    if not (fixed["size"].isdigit() and fixed.get("count", "0").isdigit()):
        return "size and count are not whole numbers"
    size, count = int(fixed["size"]), int(fixed.get("count", "0"))
    if size == 0:  # -b 0, or a count too small to split: nothing moved, nothing kept
        return []
    dtype, elem = kind
    if not block.op:
        guessed = named_op or guess_op(fixed, count, size, elem, len(block.devices))
        if guessed is None:
            return (
                "cannot tell which collective this is (all_gather and alltoall print alike;"
                " name the file after its test, e.g. alltoall_perf.log)"
            )
        block.op = guessed
    redop = fixed.get("redop", "none")
    root = int(fixed["root"]) if NUMBER.match(fixed.get("root", "")) else -1
    rest = tokens[split:]
    rows = []
    for place, names in enumerate(places):
        group = dict(zip(names, rest[: len(names)], strict=True))
        rest = rest[len(names) :]
        time = _value(group.get("time", ""))
        if time is None:
            if group.get("time") == "N/A":  # a place this version did not run
                continue
            return f"time {group.get('time')!r} is not a number"
        wrong = group.get("#wrong")
        rows.append(
            Row(
                op=block.op,
                dtype=dtype,
                redop=redop if redop in REDOPS else "none",
                root=root,
                size_bytes=size,
                count=count,
                in_place=place == 1,
                times_us=(time,),
                nwrong=_value(wrong) if wrong is not None else None,
                line=number,
                printed_bw=_bandwidths(group),
            )
        )
    return rows


def parse_lines(lines: Iterable[str], path: Path) -> Log:
    """Read one log's lines (see the module's docstring)."""
    log = Log(path=path)
    program: str | None = None
    block: Block | None = None
    devices: list[Device] = []
    options: dict[str, str] = {}
    first_foreign: tuple[int, str] | None = None
    named_op = file_op(path)
    pending, chosen = "", set[str]()  # a row's pieces before NCCL's messages, their choices
    for number, raw in enumerate(lines, start=1):
        log.lines = number
        text = _PREFIX.sub("", raw.rstrip("\r\n"), count=1)
        read_versions(text, log.versions, log.env)
        start = message_start(text, (d.host for d in devices))
        if start is not None:  # an NCCL message, after a piece of a row where one is open
            piece, choice = text[:start], read_choice(text[start:])
            if block is not None and (pending or piece.strip()[:1].isdigit()):
                pending += " " + piece
                chosen |= {choice} if choice and pending.strip() else set()
            continue
        if pending and not text.strip():
            continue  # a blank line inside a row: nothing of it
        if pending and block is not None and text.lstrip().startswith("#"):
            block.stopped = f"{path}:{number}: the row before breaks off; stopped there"
            block, pending, chosen = None, "", set()  # the header line is read as ever
        elif pending:
            text, pending = f"{pending} {text}", ""
        stripped = text.strip()
        if _NOISE.search(text):
            continue
        if stripped.startswith("#"):
            columns = _column_header(stripped)
            rank = _RANK.match(stripped)
            if _OPTIONS.match(stripped):  # a new test: its own ranks follow
                options, devices, block = _options(stripped), [], None
            elif rank:
                found_rank, host, index = int(rank["rank"]), rank["host"], int(rank["device"])
                device = Device(
                    found_rank, host, index, rank["bus"], rank["name"], int(rank["pid"])
                )
                if all(d.rank != device.rank for d in devices):
                    devices.append(device)
            elif columns:
                block = _start_block(log, columns, number, program)
                if block is not None:
                    block.devices, block.options = tuple(devices), dict(options)
                program = None
            elif _FOOTER.match(stripped):
                if block is not None:
                    block.ended = True
                block = None
            elif "test starting" in stripped:
                found = _PROGRAM.search(stripped)
                program = found.group("name") if found else program
            continue
        tokens = stripped.split()
        if block is not None and tokens and tokens[0].isdigit():
            got = _parse_row(tokens, block, named_op, number)
            if isinstance(got, str):
                kept = len(block.rows)
                block.stopped = f"{path}:{number}: {got}; stopped there, {kept} row(s) kept"
                block = None
            else:
                block.rows += [replace(r, choices=tuple(sorted(chosen))) for r in got]
            chosen = set()
            continue
        found = _PROGRAM.search(text)
        if found and found.group("name") in (*PROGRAMS, *OTHER_PROGRAMS):
            program = found.group("name")  # a command line naming the test that follows
        elif first_foreign is None and not log.blocks:
            first_foreign = (number, stripped)
    if pending and block is not None:  # the log ends inside a row
        block.stopped = f"{path}:{log.lines}: the row breaks off; stopped there"
    if not log.blocks and not log.skipped:
        where = (
            f"line {first_foreign[0]}: "
            + (repr(first_foreign[1][:60]) if first_foreign[1][:60].isprintable() else "not text")
            if first_foreign
            else f"{log.lines} line(s), none of them a test's column header"
        )
        raise UsageError(
            f"{path} is not nccl-tests output ({where}, with no '#  size  count  type ...' "
            "column header before it)",
            "give the output of an nccl-tests binary such as all_reduce_perf",
        )
    for block in log.blocks:
        if not block.rows and block.stopped is None:
            block.stopped = f"{path}:{block.first_line}: a column header with no row after it"
        elif block.stopped is None and not block.ended:  # cut between rows: say it
            block.stopped = (
                f"{path}:{block.rows[-1].line}: the test ends without nccl-tests' closing lines "
                f"('# Out of bounds values', '# Avg bus bandwidth'); {len(block.rows)} row(s) kept"
            )
    return log


def _start_block(
    log: Log, columns: tuple[str, ...], number: int, program: str | None
) -> Block | None:
    """A test's block (its op the program's, else found at its first row), or None for a
    program gpuprof has no op for (said in `skipped`)."""
    if program in OTHER_PROGRAMS:
        log.skipped.append(f"{log.path}:{number}: {program}_perf has no gpuprof counterpart")
        return None
    op = PROGRAMS.get(program or "", "")
    block = Block(program=program, op=op, first_line=number, columns=columns)
    log.blocks.append(block)
    return block


def read_log(path: Path) -> Log:
    """One log file; a UsageError when it cannot be read or is not nccl-tests output."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return parse_lines(handle, path)
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder", "give nccl-tests log files") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
