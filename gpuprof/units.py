"""Sizes and rates as nccl-tests writes them: binary sizes (K = 1024), decimal GB/s (1e9 B/s)."""

from __future__ import annotations

import math
import re

from gpuprof.errors import UsageError

# bytes per element by the dtype names profilers and PyTorch's flight recorder write (torch's,
# C++'s and c10's ScalarType names), lower case
DTYPE_BYTES = {
    "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8, "complexfloat": 8,
    "float": 4, "float32": 4, "int": 4, "int32": 4,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "short": 2,
    "int16": 2,
    "char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "byte": 1, "int8": 1,
    "uint8": 1, "int8_t": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip
_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Parse '8', '1K', '64M', '1G', '4KiB' into bytes; raise UsageError otherwise."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(
            f"invalid size {text!r}", "use a whole number of bytes with K, M, G or T, e.g. 64M"
        )
    number, suffix = int(match.group(1)), match.group(2).upper()
    return number * _SUFFIX[suffix]


_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGB]?)\s*$", re.IGNORECASE)
_COUNT_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9}


def parse_count(text: str) -> int:
    """Parse a decimal count such as a parameter count: '350M', '1.5B' (= G), '20000'."""
    match = _COUNT_RE.match(str(text))
    if not match:
        raise UsageError(f"invalid count {text!r}", "use a number with K, M or B, e.g. 350M")
    return int(float(match.group(1)) * _COUNT_SUFFIX[match.group(2).upper()])


def format_count(count: float) -> str:
    """1_500_000 -> '1.5M', 350_000_000 -> '350M', 2e9 -> '2B'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(count) >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count:.0f}"


MAX_SIZES = 256  # sizes in one sweep: 8 B to 4 GiB by 2 is 30


def parse_size_list(text: str) -> list[int]:
    """Parse a comma-separated size list such as '1K,1M,64M' (no empty item)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise UsageError("empty size list", "give sizes like 1K,1M,64M")
    if not all(parts):
        raise UsageError(f"empty item in the size list {text!r}", "give sizes like 1K,1M,64M")
    if len(parts) > MAX_SIZES:
        raise UsageError(f"{len(parts)} sizes; at most {MAX_SIZES}")
    return [parse_size(p) for p in parts]


def size_range(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """Sizes min, min*factor, ... up to max, like nccl-tests -b/-e/-f."""
    if min_bytes <= 0:
        raise UsageError(f"--min-bytes must be positive, got {min_bytes}")
    if min_bytes > max_bytes:
        raise UsageError(
            f"--min-bytes {format_size(min_bytes)} is larger than --max-bytes "
            f"{format_size(max_bytes)}",
            "swap them",
        )
    if not (math.isfinite(factor) and factor > 1):
        raise UsageError(f"--factor must be a number greater than 1, got {factor}")
    count = math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9) + 1
    if count > MAX_SIZES:
        raise UsageError(
            f"--factor {factor} from {format_size(min_bytes)} to {format_size(max_bytes)} "
            f"makes {count} sizes; at most {MAX_SIZES}",
            "use a larger --factor or a narrower range",
        )
    sizes: list[int] = []
    size = float(min_bytes)
    while size <= max_bytes:
        if not sizes or int(size) > sizes[-1]:  # a factor under 2 repeats small sizes
            sizes.append(int(size))
        size *= factor
    return sizes


def format_size(num_bytes: float) -> str:
    """Format bytes with binary prefixes: 1024 -> '1 KiB', 1536 -> '1.5 KiB'."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def bus_factor(op: str, num_ranks: int) -> float:
    """nccl-tests bus bandwidth factor for `op` on `num_ranks` ranks: busbw = algbw x factor
    is what each rank sends per byte of the size column (a ring's per-link traffic)."""
    n = num_ranks
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"no bus factor for op {op!r}")
