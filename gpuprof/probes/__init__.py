"""Rank-side probes. Importing this package does not import torch; the probe modules do.

A probe module describes its cases and has `run(ctx, params, num_nodes, gpus_per_node)`; the
harness (`_harness.py`) does the rest. Its registry entry (`gpuprof/registry.py`) names it.
"""
