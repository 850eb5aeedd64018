"""Matrix-multiply throughput of each device per dtype, every node at once: every device
together (as a training job loads them: power and clocks under load) and/or alone (one device
per node at a time).

FLOP = 2 n^3 for an n x n by n x n product (the usual count, nanoGPT's estimate_mfu cites the
same). tf32 is float32 inputs with TF32 tensor cores allowed; float8 uses torch._scaled_mm where
the device supports it (compute capability 8.9+), else the case is skipped with the reason.
Inputs are random normal numbers (zeros would let some hardware idle). On CPU a float32 case
has a canary: a numpy matmul of the same size between its iterations (`gpuprof.probes._canary`).

    torchrun --nproc-per-node 8 -m gpuprof.probes.compute --matmul-n 8192
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpuprof.machine.groups import CONCURRENCY_OF, device_rounds
from gpuprof.probes._canary import MatmulCanary
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Budget,
    Case,
    Context,
    Prepared,
    Scope,
    Unsupported,
    make_scopes,
    run_cases,
)
from gpuprof.specs.ceilings import CeilingParams

PROBE = "compute"
TORCH_DTYPES = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def _matmul(ctx: Context, dtype: str, n: int) -> Callable[[], None]:
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.rank)
    if dtype == "float8":
        if ctx.device.type != "cuda" or torch.cuda.get_device_capability(ctx.device) < (8, 9):
            raise Unsupported("float8 matmul needs a CUDA device of compute capability 8.9+")
        if not hasattr(torch, "_scaled_mm"):
            raise Unsupported("this torch has no torch._scaled_mm")
        if n % 16:
            raise Unsupported(f"float8 matmul (torch._scaled_mm) needs n divisible by 16, not {n}")
        a = torch.randn(n, n, device=ctx.device, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=ctx.device, generator=gen).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=ctx.device)

        def run_fp8() -> None:
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return run_fp8
    if dtype == "tf32" and ctx.device.type != "cuda":
        raise Unsupported("tf32 is a CUDA tensor-core mode")
    a = torch.randn(n, n, device=ctx.device, generator=gen, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, device=ctx.device, generator=gen, dtype=TORCH_DTYPES[dtype])
    out = torch.empty_like(a)
    allow = dtype == "tf32"

    def run() -> None:
        if ctx.device.type != "cuda":
            torch.matmul(a, b, out=out)
            return
        # cuBLAS reads the flag when the matmul is launched: set it for this call only, so
        # no later probe (or the user's code in this process) runs silently in TF32
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow
        try:
            torch.matmul(a, b, out=out)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before

    return run


def _case(ctx: Context, params: CeilingParams, dtype: str, concurrency: str) -> Case:
    n = params.n

    def build() -> Prepared:
        # the core's own speed between the matmuls: a numpy float32 matmul of the same size
        cpu = ctx.device.type == "cpu" and dtype == "float32"
        return Prepared(run=_matmul(ctx, dtype, n), canary=MatmulCanary(n) if cpu else None)

    together = concurrency == "together"
    return Case(
        case_id=f"matmul.{dtype}.{n}" + (".together" if together else ""),
        params={"dtype": dtype, "n": n, "flop": 2 * n**3, "concurrency": concurrency},
        build=build,
        describe=f"matmul {dtype} {n}^3 {concurrency}",
    )


def run(ctx: Context, params: CeilingParams, num_nodes: int, gpus_per_node: int) -> None:
    """Measure matmul throughput per dtype on every rank's device, each way of
    `params.concurrency`."""

    def cases(scope: Scope) -> list[Case]:
        way = CONCURRENCY_OF[scope.spec.scope]
        return [_case(ctx, params, d, way) for d in params.dtypes]

    rounds = [r for way in params.concurrency for r in device_rounds(num_nodes, gpus_per_node, way)]
    run_cases(ctx, PROBE, make_scopes(ctx, rounds), cases, Budget.of(params))


if __name__ == "__main__":
    run_as_command(PROBE)
