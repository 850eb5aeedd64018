"""Facts about the machine: the launcher's environment and this host (`env`, no torch), its
versions, GPUs and preflight checks (`node`), NVML or its fake, topology, hardware presets
and peaks, and the process groups of each scope.

May import only the foundations; torch and pynvml only inside `node` and `nvml` functions."""
