"""Rank-side probes. Importing this package does not import torch; the probe modules do.

A new probe = one module with `run(ctx, params, num_nodes, gpus_per_node)` + one entry here.
"""

from __future__ import annotations

PROBE_MODULES = {
    "collectives": "gpuprof.probes.collectives",
    "p2p": "gpuprof.probes.p2p",
    "memory": "gpuprof.probes.memory",
    "compute": "gpuprof.probes.compute",
    "ddp": "gpuprof.probes.ddp",
    "pipeline": "gpuprof.probes.pipeline",
}
