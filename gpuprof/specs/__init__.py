"""What each probe is, without torch or pandas: its parameters, suite presets, options, table
columns and metrics (one module per probe, each defining `SPEC` for `gpuprof.registry`).

May import `machine.groups` and the foundations only: the rank side and the readers share it."""
