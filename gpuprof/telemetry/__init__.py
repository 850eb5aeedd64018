"""Hardware counters: NVML (real or fake) and host."""
