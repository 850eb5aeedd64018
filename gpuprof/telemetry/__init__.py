"""Hardware counters, one sampler process per node: NVML per GPU (real or fake) and the
host's CPU, memory, NICs and InfiniBand ports, written beside the ranks' records.

May import `machine` (NVML, topology) and the foundations."""
