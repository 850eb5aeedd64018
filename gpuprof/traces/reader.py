"""Read one rank's torch.profiler trace (Chrome/Kineto JSON, plain or .gz) as a stream:
the events are decoded one at a time and reduced at once to what the analysis needs (steps,
host ops, device activity, collectives), so memory holds compact arrays, never the file.

What each event becomes (the names are those torch.profiler and Kineto write):
- `ProfilerStep#N` (user_annotation, or cpu_op / Operator in older traces): a step of the job.
- `enumerate(DataLoader)#...` (user_annotation, cpu_op, or Operator as torch 1.8-1.9 wrote
  it): the step's input pipeline.
- `cpu_op` events (`Operator` before torch 1.10): host work; `c10d::*` ops are communication
  calls, not compute.
- `cuda_runtime`, `cuda_driver`, `hip_runtime` (`Runtime` before torch 1.10): launches.
- `kernel`, `gpu_memcpy`, `gpu_memset` events with a `stream` (`Kernel`, `Memcpy`, `Memset`
  before torch 1.10): device activity, classed by name as Holistic Trace Analysis does:
  communication (`nccl...`), memory (`Memcpy...`, `Memset...`), compute (every other kernel
  but syncs).
- Categories of complete events that carry nothing the analysis uses (`python_function`, the
  profiler's own `Trace` span, `gpu_user_annotation`, `overhead`, `cuda_sync`) are passed
  over; any other category is counted by name (`RankTrace.unknown`), never silently lost.
- Collectives: NCCL kernels (with the `Collective name`, `Process Group Name`, `Seq`, message
  size and group size torch copies onto them when it has them) and, on CPU, the `gloo:*`
  annotations of gloo's worker threads, whose span is the transfer including the wait for
  peers.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from gpuprof.errors import UsageError
from gpuprof.traces.flops import COUNTED, DTYPES, op_flops, peak_dtype
from gpuprof.units import DTYPE_BYTES

CHUNK = 1 << 20  # characters read at a time
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "Runtime"}
HOST_OP_CATS = {"cpu_op", "Operator"}
ANNOTATION_CATS = {"user_annotation", *HOST_OP_CATS}  # where the data loader's span is
PASSED_OVER = {"python_function", "Trace", "gpu_user_annotation", "overhead", "cuda_sync"}
STEP = re.compile(r"^ProfilerStep#(\d+)")
INPUT = re.compile(r"^enumerate\(DataLoader\)#")
# the phases' own annotations (torch.optim's, DDP's and FSDP's record_function names)
PHASE_MARK = re.compile(
    r"^(?:(?P<optimizer>Optimizer\.(?:step|zero_grad)#)"
    r"|(?P<forward>(?:DistributedDataParallel|FullyShardedDataParallel)\.forward))"
)
# Holistic Trace Analysis's kernel classes (hta/common/types.py), applied with re.match
COMM_KERNEL = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
MEMORY_KERNEL = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)"
)
# ncclKernel_AllReduce_RING_LL_Sum_float / ncclDevKernel_AllGather_RING_LL
NCCL_OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
OP_NAMES = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "sendrecv": "sendrecv",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}


KINDS = ("comm", "copy", "computation", "other")  # device activity, as kernel_class names it


def kernel_class(name: str) -> str:
    """comm, copy (memory), computation or other, by the kernel's name (HTA's rules and order)."""
    if COMM_KERNEL.match(name):
        return "comm"
    if MEMORY_KERNEL.match(name):
        return "copy"
    return "other" if NOT_COMPUTE.match(name) else "computation"


def op_name(text: str) -> str:
    """A collective's name as gpuprof spells it ('all_reduce'), from a trace's spelling."""
    key = text.lower().removeprefix("c10d::").removeprefix("gloo:").removeprefix("nccl:")
    key = key.rstrip("_")
    return OP_NAMES.get(key, OP_NAMES.get(key.replace("_", ""), key))


@dataclass
class Collective:
    """One collective as one rank saw it: when it arrived and when it was done (us)."""

    op: str
    start: float
    end: float
    pg: str = "default"
    seq: int | None = None
    nbytes: float = math.nan
    group_size: int | None = None
    launch: float | None = None  # when the host launched it (device collectives)
    corr: int = -1


@dataclass
class RankTrace:
    """One rank's trace, reduced. Times in us on the trace's clock."""

    path: Path
    rank: int
    world_size: int | None = None
    host: str | None = None
    base_ns: int | None = None
    backend: str | None = None
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # (n, start, end)
    ops: Columns = field(default_factory=lambda: Columns("ddqq"))  # start, end, tid, name
    comm_calls: list[tuple[float, float]] = field(default_factory=list)  # c10d::* on the host
    inputs: list[tuple[float, float]] = field(default_factory=list)
    marks: list[tuple[str, float, float]] = field(default_factory=list)  # phase annotations
    # start, end, kind (an index of KINDS), name, correlation, device index
    device: Columns = field(default_factory=lambda: Columns("ddbqqq"))
    launches: Columns = field(default_factory=lambda: Columns("qdq"))  # correlation, ts, tid
    # ops with FLOPs: start, end, tid, name, recorded, counted from shapes, dtype (PEAKS index)
    flop_ops: Columns = field(default_factory=lambda: Columns("ddqqddb"))
    gpu: str | None = None  # deviceProperties' first name
    collectives: list[Collective] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    events: int = 0
    unknown: Counter[str] = field(default_factory=Counter)  # category -> complete events

    def name_id(self, name: str, index: dict[str, int]) -> int:
        """The id of a name in `names` (interned)."""
        found = index.get(name)
        if found is None:
            found = index[name] = len(self.names)
            self.names.append(name)
        return found

    @property
    def on_device(self) -> bool:
        """Whether the trace has device (GPU) activity."""
        return len(self.device) > 0

    def launch_times(self, correlations: np.ndarray, default: np.ndarray) -> np.ndarray:
        """When the host launched the work of each correlation id (`default` where unknown)."""
        corr, ts, _ = self.launches.arrays()
        if corr.size == 0:
            return default.astype(float)
        order = np.argsort(corr, kind="stable")
        corr, ts = corr[order], ts[order]
        at = np.clip(np.searchsorted(corr, correlations), 0, corr.size - 1)
        return np.where(corr[at] == correlations, ts[at], default).astype(float)


class Columns:
    """Rows of numbers kept as typed arrays (8 bytes a number, not a Python object each)."""

    def __init__(self, codes: str) -> None:
        self.columns = [array(code) for code in codes]

    def append(self, *values: float) -> None:
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)  # type: ignore[arg-type]  # an int column gets ints

    def __len__(self) -> int:
        return len(self.columns[0])

    def arrays(self) -> list[np.ndarray]:
        """The columns as numpy arrays (no copy)."""
        return [
            np.frombuffer(c, dtype=c.typecode) if len(c) else np.array([], dtype=c.typecode)
            for c in self.columns
        ]


class _Stream:
    """A JSON document read a piece at a time; values decoded one by one."""

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _fill(self) -> bool:
        chunk = "" if self.eof else self.fh.read(CHUNK)
        self.eof = not chunk
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return bool(chunk)

    def peek(self) -> str:
        """The next character that is not whitespace (and not a comma), '' at the end."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n,":
                self.pos += 1
            if self.pos < len(self.buf) or not self._fill():
                return self.buf[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            found = self.buf[self.pos : self.pos + 20] or "the end of the file"
            raise ValueError(f"expected {char!r} at {found!r}")
        self.pos += 1

    def value(self) -> Any:
        """The next JSON value (reading more until it is complete)."""
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if not self._fill():
                    raise
                continue
            if end >= len(self.buf) and not self.eof and self._fill():
                continue  # a number may go on in the next piece
            self.pos = end
            return value


def _open(path: Path) -> IO[str]:
    """The file as text, gunzipped when it is gzip (by its first bytes, not its name)."""
    with path.open("rb") as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    if gzipped:
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def iter_document(path: Path) -> Iterator[tuple[str, Any]]:
    """(key, value) of the top-level object; `traceEvents` yields ('event', event) per event."""
    with _open(path) as fh:
        stream = _Stream(fh)
        stream.expect("{")
        while stream.peek() not in ("}", ""):
            key = stream.value()
            stream.expect(":")
            if key == "traceEvents" and stream.peek() == "[":
                stream.expect("[")
                while stream.peek() not in ("]", ""):
                    yield "event", stream.value()
                stream.expect("]")
            else:
                yield key, stream.value()
        stream.expect("}")


def _number_bytes(dims: Any, types: Any) -> float:
    """Bytes of the first tensor input from 'Input Dims' and 'Input type' (gloo annotations)."""
    try:
        shape = dims[0]
        while shape and isinstance(shape[0], list):  # a TensorList: its first tensor
            shape = shape[0]
        count = math.prod(int(x) for x in shape)
        size = DTYPE_BYTES.get(str(types[0]).lower())
    except (TypeError, ValueError, IndexError, KeyError):
        return math.nan
    return float(count * size) if size else math.nan


def _device_collective(name: str, args: dict[str, Any], ts: float, end: float) -> Collective:
    """A collective from an NCCL kernel and the metadata torch copied onto it."""
    found = NCCL_OP.search(name)
    op = op_name(str(args.get("Collective name") or (found.group(1) if found else name)))
    nelems = args.get("In msg nelems")
    if op in ("all_gather",) and args.get("Out msg nelems") is not None:
        nelems = args.get("Out msg nelems")
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    nbytes = float(nelems) * size if nelems is not None and size else math.nan
    seq = args.get("Seq")
    group = args.get("Group size")
    return Collective(
        op=op,
        start=ts,
        end=end,
        pg=str(args.get("Process Group Name", "default")),
        seq=int(seq) if seq not in (None, "") else None,
        nbytes=nbytes,
        group_size=int(group) if group not in (None, "") else None,
    )


def read_rank(path: Path) -> RankTrace:
    """One trace file, reduced; a UsageError naming the file when it is not a trace."""
    trace = RankTrace(path=path, rank=-1)
    index: dict[str, int] = {}
    try:
        for key, value in iter_document(path):
            if key == "event":
                _take(trace, value, index)
            elif key == "distributedInfo" and isinstance(value, dict):
                trace.rank = int(value.get("rank", -1))
                trace.world_size = value.get("world_size")
                trace.backend = value.get("backend")
            elif key == "host_name":
                trace.host = str(value)
            elif key == "deviceProperties" and isinstance(value, list) and value:
                trace.gpu = str(value[0].get("name")) if isinstance(value[0], dict) else None
            elif key == "baseTimeNanoseconds":
                trace.base_ns = int(value)
    except (ValueError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a torch.profiler trace ({exc})") from None
    if trace.events == 0:
        raise UsageError(f"{path}: no trace events (not a torch.profiler trace)")
    trace.steps.sort()
    return trace


def _take(trace: RankTrace, event: Any, index: dict[str, int]) -> None:
    """Reduce one event into the rank's arrays."""
    if not isinstance(event, dict) or event.get("ph") != "X":
        return
    dur = event.get("dur")
    cat = event.get("cat")
    if dur is None or cat is None or cat in PASSED_OVER:
        return
    trace.events += 1
    ts = float(event["ts"])
    end = ts + float(dur)
    name = str(event.get("name", ""))
    args = event.get("args") or {}
    if cat in ANNOTATION_CATS and (mark := PHASE_MARK.match(name)) is not None:
        trace.marks.append((mark.lastgroup or "", ts, end))  # (an op too where it is one)
    if cat in DEVICE_CATS and "stream" in args:
        kind = kernel_class(name)
        corr = args.get("correlation", -1)
        gpu = str(args.get("device", event.get("pid")))
        gpu_id = int(gpu) if gpu.isdigit() else -1
        trace.device.append(
            ts, end, KINDS.index(kind), trace.name_id(name, index), int(corr), gpu_id
        )
        if kind == "comm":
            found = _device_collective(name, args, ts, end)
            found.corr = int(corr)
            trace.collectives.append(found)
    elif cat in LAUNCH_CATS:
        corr = args.get("correlation")
        if corr is not None:
            trace.launches.append(int(corr), ts, _thread(event.get("tid")))
    elif (step := STEP.match(name)) is not None:
        trace.steps.append((int(step.group(1)), ts, end))
    elif cat in ANNOTATION_CATS and INPUT.match(name):
        trace.inputs.append((ts, end))
    elif cat == "user_annotation":
        if name.startswith("gloo:"):
            nbytes = _number_bytes(args.get("Input Dims"), args.get("Input type"))
            trace.collectives.append(Collective(op=op_name(name), start=ts, end=end, nbytes=nbytes))
    elif cat in HOST_OP_CATS:
        if name.startswith("c10d::"):
            trace.comm_calls.append((ts, end))
        else:
            trace.ops.append(ts, end, _thread(event.get("tid")), trace.name_id(name, index))
            if name in COUNTED or "flops" in args:
                dtype = DTYPES.index(peak_dtype(args.get("Input type")))
                ident = (_thread(event.get("tid")), trace.name_id(name, index))
                trace.flop_ops.append(ts, end, *ident, *op_flops(name, args), dtype)
    elif cat not in DEVICE_CATS and cat != "user_annotation":
        trace.unknown[str(cat)] += 1


def _thread(tid: Any) -> int:
    """A thread id as an integer (torch 1.8-1.9 wrote it as a string), -1 when it is none."""
    if isinstance(tid, int):
        return tid
    return int(tid) if isinstance(tid, str) and tid.isdigit() else -1
