"""Memory copy ceilings of each device (nvbandwidth-style), every node at once: host copies
alone (one device per node at a time) and together (every device of the node at once: a shared
PCIe switch or NUMA link shows), device copies together (`specs.ceilings.copy_kinds`).

GPU: host-to-device and device-to-host from pinned and pageable host memory (bytes moved =
the buffer, one direction over PCIe), and a device-to-device copy (bytes moved = bytes read
plus bytes written, the convention of memory-bandwidth datasheets). CPU: a host memory copy,
also counted as read plus written, with a canary (a numpy copy of the same size between its
iterations, `gpuprof.probes._canary`). Every copy is checked byte for byte once (`nwrong`).

    torchrun --nproc-per-node 8 -m gpuprof.probes.memory --copy-bytes 1G
"""

from __future__ import annotations

import torch

from gpuprof.machine.groups import CONCURRENCY_OF, device_rounds
from gpuprof.probes._canary import HostCopyCanary
from gpuprof.probes._check import byte_pattern, count_wrong
from gpuprof.probes._entry import run_as_command
from gpuprof.probes._harness import (
    Budget,
    Case,
    Context,
    Prepared,
    Scope,
    make_scopes,
    run_cases,
)
from gpuprof.specs.ceilings import CeilingParams, copy_kinds
from gpuprof.units import format_size

PROBE = "memory"
READ_PLUS_WRITE = ("d2d", "host_copy")


def _buffers(ctx: Context, kind: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) for one copy kind."""
    dev = ctx.device
    host_pinned = kind.endswith("pinned")
    pattern = byte_pattern(size)
    if kind.startswith("h2d"):
        src = pattern.pin_memory() if host_pinned else pattern
        return src, torch.empty(size, dtype=torch.uint8, device=dev)
    if kind.startswith("d2h"):
        dst = torch.empty(size, dtype=torch.uint8, pin_memory=host_pinned)
        return pattern.to(dev), dst
    return pattern.to(dev), torch.empty(size, dtype=torch.uint8, device=dev)


def _case(ctx: Context, params: CeilingParams, kind: str, concurrency: str) -> Case:
    size = params.size_bytes

    def build() -> Prepared:
        src, dst = _buffers(ctx, kind, size)
        non_blocking = kind.endswith("_pinned")

        def run() -> None:
            dst.copy_(src, non_blocking=non_blocking)

        def check() -> int:
            dst.zero_()
            run()
            ctx.sync()
            return count_wrong(dst.cpu(), src.cpu())

        # the host memory's own speed between the copies: a numpy copy of the same size
        cpu_copy = kind == "host_copy" and ctx.device.type == "cpu"
        return Prepared(run=run, check=check, canary=HostCopyCanary(size) if cpu_copy else None)

    moved = 2 * size if kind in READ_PLUS_WRITE else size
    together = concurrency == "together"
    return Case(
        case_id=f"{kind}.{size}" + (".together" if together else ""),
        params={"kind": kind, "size_bytes": size, "bytes_moved": moved, "concurrency": concurrency},
        build=build,
        describe=f"{kind} {format_size(size)} {concurrency}",
    )


def run(ctx: Context, params: CeilingParams, num_nodes: int, gpus_per_node: int) -> None:
    """Measure every copy kind on every rank's device, each way of `params.concurrency`."""

    def cases(scope: Scope) -> list[Case]:
        way = CONCURRENCY_OF[scope.spec.scope]
        kinds = copy_kinds(params, way)
        mine = [k for k in kinds if (k == "host_copy") == (ctx.device.type == "cpu")]
        return [_case(ctx, params, k, way) for k in mine]

    rounds = [r for way in params.concurrency for r in device_rounds(num_nodes, gpus_per_node, way)]
    run_cases(ctx, PROBE, make_scopes(ctx, rounds), cases, Budget.of(params))


if __name__ == "__main__":
    run_as_command(PROBE)
