"""The FLOPs of a job's host ops: what torch.profiler recorded (`with_flops=True` writes a
`flops` argument on the ops it has a formula for), else counted from the recorded shapes
(`record_shapes=True`, which `with_flops` turns on too) for the ops that do the model's
arithmetic: matrix products and convolutions, forward and backward.

Counted from shapes, a multiply-add is 2 FLOPs (as torch's own formulas and the compute
probe count):
- `aten::mm` [M, K] x [K, N] and `aten::addmm` (bias, [M, K], [K, N]): 2 M K N;
- `aten::bmm` [B, M, K] x [B, K, N] and `aten::baddbmm`: 2 B M K N;
- `aten::convolution` (input [N, C, *in], weight [O, C / groups, *kernel], stride, padding,
  dilation, transposed, output padding, groups): 2 N O (C / groups) prod(kernel) prod(out);
- `aten::convolution_backward`: the same product once for the input's gradient and once for
  the weight's, as its output mask asks.
Only these ops count: a `aten::linear` or `aten::matmul` calls one of them, so nothing is
counted twice.
"""

from __future__ import annotations

import json
import math
from typing import Any

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
CONV_OPS = {"aten::convolution", "aten::convolution_backward"}
COUNTED = MATMUL_OPS | CONV_OPS
# the dtypes of the datasheets' dense peaks, by the names the profiler writes
PEAK_DTYPES = {
    "float": "float32", "c10::half": "float16", "half": "float16",
    "c10::bfloat16": "bfloat16", "bfloat16": "bfloat16", "c10::float8_e4m3fn": "float8",
    "c10::float8_e5m2": "float8",
}  # fmt: skip
DTYPES = (None, "float32", "float16", "bfloat16", "float8")  # as the reader stores them


def _ints(text: Any) -> list[int] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value] if isinstance(value, list) else None


def _matmul(name: str, dims: list[Any]) -> float | None:
    shapes = [d for d in dims if isinstance(d, list)]
    a, b = (shapes[1], shapes[2]) if name in ("aten::addmm", "aten::baddbmm") else shapes[:2]
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2.0 * int(a[0]) * int(a[1]) * int(b[1])
    if len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return 2.0 * int(a[0]) * int(a[1]) * int(a[2]) * int(b[2])
    return None


def _conv(name: str, dims: list[Any], concrete: list[Any]) -> float | None:
    backward = name == "aten::convolution_backward"
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    # transposed, output_padding, groups, output_mask); convolution(input, weight, bias,
    # stride, padding, dilation, transposed, output_padding, groups)
    x, w = (dims[1], dims[2]) if backward else (dims[0], dims[1])
    first = 4 if backward else 3
    stride, padding, dilation = (_ints(concrete[first + i]) for i in range(3))
    groups = _ints(concrete[first + 5])
    transposed = str(concrete[first + 3]).lower() not in ("false", "0")
    if not (stride and padding and dilation and groups) or transposed:
        return None  # a transposed convolution, or arguments not recorded
    spatial = len(w) - 2
    stride, padding, dilation = (
        v * spatial if len(v) == 1 else v for v in (stride, padding, dilation)
    )
    out = [
        (x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(spatial)
    ]
    one = (
        2.0 * int(x[0]) * int(w[0]) * int(w[1]) * math.prod(w[2:]) * math.prod(out)
    )  # w[1] = C / groups
    if not backward:
        return float(one)
    mask = [m.strip().lower() == "true" for m in str(concrete[10]).strip("[]").split(",")]
    return float(one * sum(mask[:2]) if len(mask) >= 2 else 2 * one)


def op_flops(name: str, args: dict[str, Any]) -> tuple[float, float]:
    """(recorded, counted from shapes) FLOPs of one host op; NaN where there is none."""
    recorded = float(args["flops"]) if isinstance(args.get("flops"), (int, float)) else math.nan
    counted = None
    dims = args.get("Input Dims")
    if name in COUNTED and isinstance(dims, list):
        try:
            if name in MATMUL_OPS:
                counted = _matmul(name, dims)
            else:
                counted = _conv(name, dims, args.get("Concrete Inputs") or [])
        except (IndexError, TypeError, ValueError):
            counted = None
    return recorded, math.nan if counted is None else counted


def peak_dtype(types: Any) -> str | None:
    """The datasheet dtype of an op's first input type ("float" -> float32)."""
    if isinstance(types, list) and types:
        return PEAK_DTYPES.get(str(types[0]).lower())
    return None
