"""The rank side: what every rank runs under torchrun. Importing this package does not import
torch; the probe modules do.

A probe module describes its cases and has `run(ctx, params, num_nodes, gpus_per_node)`; the
harness (`_harness.py`) does the rest. Its registry entry (`gpuprof/registry.py`) names it.
May import specs, telemetry, runs (records, the run folder), machine and the foundations;
never the commands, the launcher, reports, advice, the gate or the predictor.
"""
