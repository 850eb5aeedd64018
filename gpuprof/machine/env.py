"""Who launched us and what this host is, without torch or NVML: the launcher, the host's
name, the allow-listed environment, installed package versions, NICs and their line rates,
and the environment variables the launcher and its ranks agree on. What needs torch or NVML
(versions of torch/CUDA/NCCL, GPUs, topology) is in `gpuprof.machine.node`."""

from __future__ import annotations

import os
import platform
import re
import socket
from collections.abc import Mapping
from typing import Any

import psutil

from gpuprof._version import __version__
from gpuprof.errors import UsageError

# The environment a run records: only variables known to change performance or the job's
# shape (an allow-list), never "everything but secrets".
ENV_PREFIXES = (
    "NCCL_",  # every NCCL knob
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "TORCHELASTIC_",
    "CUDA_",  # CUDA_VISIBLE_DEVICES, CUDA_DEVICE_MAX_CONNECTIONS, CUDA_LAUNCH_BLOCKING, ...
    "GLOO_",
    "UCX_",
    "OMP_",
    "MKL_",
    "KMP_",
    "PET_",  # torchrun's flags as environment
    "SLURM_JOB_",
    "SLURM_STEP_",
    "SLURM_GPUS",
    "SLURM_CPUS",
    "SLURM_NTASKS",
    "GPUPROF_",
)
ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "SLURM_NNODES",
    "SLURM_NODELIST",
    "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_SHOW_CPP_STACKTRACES",
    "TORCH_CUDA_ARCH_LIST",
)
# names that look like credentials keep their name with the value redacted, even when allowed
_SECRET_RE = re.compile(
    r"KEY|TOKEN|SECRET|PASS|PWD|CRED|AUTH|COOKIE|PRIVATE|PAT$|_PAT_|CERT|SIGN|SESSION",
    re.IGNORECASE,
)
REDACTED = "<redacted>"
LAUNCHER_PID_ENV = "GPUPROF_LAUNCHER_PID"  # the launcher that supervises a node's ranks
CASE_LINES_ENV = "GPUPROF_CASE_LINES"  # "0": ranks do not print a line per case


def this_host() -> str:
    """This node's name as gpuprof records it (GPUPROF_HOST overrides, for emulated nodes)."""
    return os.environ.get("GPUPROF_HOST") or socket.gethostname()


def detect_launcher(environ: Mapping[str, str] | None = None) -> str:
    """'torchrun' in a torchrun worker, else 'slurm' in an allocation, else 'local'."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env:
        return "torchrun"
    if "SLURM_JOB_ID" in env:
        return "slurm"
    return "local"


def captured_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment variables, with secret-looking names redacted."""
    env = os.environ if environ is None else environ
    kept = {}
    for name in sorted(env):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            kept[name] = REDACTED if _SECRET_RE.search(name) else env[name]
    return kept


def gpuprof_version() -> str:
    """The version of the gpuprof code that runs: its package's own, also where it runs from a
    source tree that pip never installed (PYTHONPATH), which has no distribution metadata."""
    return __version__


def torchrun_sizes(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(WORLD_SIZE, LOCAL_WORLD_SIZE) set by torchrun; a UsageError outside a launcher."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env or "RANK" not in env:
        raise UsageError(
            "not started by a launcher (WORLD_SIZE and RANK are unset)",
            "use `torchrun --nproc-per-node N -m ...` or `gpuprof run`",
        )
    world = int(env["WORLD_SIZE"])
    return world, int(env.get("LOCAL_WORLD_SIZE", world))


def nics() -> list[dict[str, Any]]:
    """Network interfaces with their state, MTU, line rate (Mbit/s, 0 if unknown) and IPv4."""
    addrs = psutil.net_if_addrs()
    found = []
    for name, stats in sorted(psutil.net_if_stats().items()):
        ipv4 = [a.address for a in addrs.get(name, []) if a.family == socket.AF_INET]
        found.append(
            {
                "name": name,
                "up": bool(stats.isup),
                "mtu": int(stats.mtu),
                "speed_mbps": int(stats.speed),
                "ipv4": ipv4,
            }
        )
    return found


SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def link_gbps() -> float | None:
    """The line rate (Gbit/s) of the interface ranks talk to other nodes over: the one that
    NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names (an exact name or a prefix; `^` excludes),
    else the fastest interface that is up, not loopback and reports a rate. None if none does.
    """
    found = [n for n in nics() if n["up"] and n["speed_mbps"] > 0 and n["name"] != "lo"]
    for var in SOCKET_IFNAME_VARS:
        wanted = [w.lstrip("=") for w in os.environ.get(var, "").split(",") if w.strip()]
        if wanted and not wanted[0].startswith("^"):
            named = [n for n in found if any(n["name"].startswith(w) for w in wanted)]
            if named:
                return float(max(n["speed_mbps"] for n in named)) / 1e3
    return max((n["speed_mbps"] for n in found), default=0) / 1e3 or None


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else what platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_build_note(visible: int) -> str:
    """The line for a node whose GPUs torch cannot use."""
    return (
        f"NVML sees {visible} GPU(s) but torch has no CUDA (a CPU build?): install a CUDA "
        "build of torch to measure them"
    )
