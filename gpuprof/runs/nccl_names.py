"""nccl-tests' names: its types, programs and reductions, and the op a file's name or a row
of an unnamed test implies (gpuprof.runs.nccl_log reads the logs). Stdlib only."""

from __future__ import annotations

import re
from pathlib import Path

# nccl-tests' type names (src/common.cu test_typenames) -> gpuprof's dtype and element bytes
TYPES: dict[str, tuple[str, int]] = {
    "int8": ("int8", 1),
    "char": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "uint32": ("uint32", 4),
    "int64": ("int64", 8),
    "uint64": ("uint64", 8),
    "half": ("float16", 2),
    "float": ("float32", 4),
    "double": ("float64", 8),
    "bfloat16": ("bfloat16", 2),
    "f8e4m3": ("float8_e4m3fn", 1),
    "f8e5m2": ("float8_e5m2", 1),
}
# programs -> gpuprof's op names (gather, scatter and hypercube have no gpuprof counterpart)
PROGRAMS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "sendrecv": "sendrecv",
}
OTHER_PROGRAMS = ("gather", "scatter", "hypercube")
REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum", "premulsum")
NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def guess_op(fixed: dict[str, str], count: int, size: int, elem: int, ranks: int) -> str | None:
    """The op a row of an unnamed block implies (None: it cannot be told)."""
    redop = fixed.get("redop", "none")
    root = int(fixed.get("root", "-1")) if NUMBER.match(fixed.get("root", "-1")) else -1
    per_rank = ranks > 1 and count * elem * ranks == size
    if redop in REDOPS:
        if root >= 0:
            return "reduce"
        return "reduce_scatter" if per_rank else "all_reduce"
    if root >= 0:
        return "broadcast"
    return None if per_rank else "sendrecv" if count * elem == size else None


def file_op(path: Path) -> str | None:
    """The op a file's name says (`all_gather_perf_2n.txt`, `allgather.log`), if one."""
    name = path.name.lower().replace("-", "_")
    found = [
        (spelling, op)
        for program, op in PROGRAMS.items()
        for spelling in {program, program.replace("_", ""), op}
        if spelling in name
    ]
    # all_reduce's name holds reduce: the longest match says it
    return max(found, key=lambda f: len(f[0]))[1] if found else None
