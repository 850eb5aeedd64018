"""Who launched us, which versions run, and what the machine has (GPUs, CPU, memory, NICs).

Nothing here imports torch at module level: `versions()` imports it when asked, so the light
commands stay light. NVML is optional: without a driver the GPU list is empty and says why.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import psutil

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


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gpuprof_version() -> str | None:
    """The installed gpuprof version (no torch import)."""
    return _package_version("gpuprof")


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


def plan_device(request: str) -> tuple[str, int]:
    """Resolve --device (auto -> cuda if torch sees a GPU) and count the visible GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if request == "cuda" and count == 0:
        seen = nvml_gpu_count() if torch.version.cuda is None else 0
        why = cpu_build_note(seen) if seen else "no CUDA GPU is visible"
        raise UsageError(f"--device cuda but {why}", "or use --device cpu")
    device = "cuda" if request == "cuda" or (request == "auto" and count > 0) else "cpu"
    return device, count


def versions() -> dict[str, str | None]:
    """python, gpuprof, torch, cuda, nccl and driver versions (None where absent)."""
    import torch

    nccl = None
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    return {
        "python": platform.python_version(),
        "gpuprof": gpuprof_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "driver": nvml_driver_version(),
    }


def _nvml() -> Any:
    """The initialised pynvml module, or None when NVML or its driver is absent.
    GPUPROF_FAKE_NVML selects the fake (gpuprof.telemetry.fake) instead."""
    if os.environ.get("GPUPROF_FAKE_NVML"):
        from gpuprof.telemetry.fake import fake_from_env

        return fake_from_env(os.environ["GPUPROF_FAKE_NVML"])
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded / ImportError
        return None
    return pynvml


def nvml_driver_version() -> str | None:
    """The NVIDIA driver version through NVML, or None without a driver."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return str(nvml.nvmlSystemGetDriverVersion())
    finally:
        nvml.nvmlShutdown()


def gpus() -> list[dict[str, Any]]:
    """GPUs as NVML lists them, identified by UUID and PCI bus id (never by index alone)."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found.append(
                {
                    "nvml_index": index,
                    "name": str(nvml.nvmlDeviceGetName(handle)),
                    "uuid": str(nvml.nvmlDeviceGetUUID(handle)),
                    "pci_bus_id": str(nvml.nvmlDeviceGetPciInfo(handle).busId),
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )
        return found
    finally:
        nvml.nvmlShutdown()


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


def topology(nic_names: list[str]) -> dict[str, Any] | None:
    """GPU-to-GPU and GPU-to-NIC topology (None without NVML)."""
    nvml = _nvml()
    if nvml is None:
        return None
    from gpuprof.topology import gpu_topology

    try:
        return gpu_topology(nvml, nic_names)
    finally:
        nvml.nvmlShutdown()


def node_info(node_rank: int = 0) -> dict[str, Any]:
    """This host as run.json records it under `nodes`."""
    memory = psutil.virtual_memory()
    nic_list = nics()
    physical = [n["name"] for n in nic_list if n["name"] != "lo"]
    return {
        "node_rank": node_rank,
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
        },
        "memory_bytes": int(memory.total),
        "gpus": gpus(),
        "nics": nic_list,
        "topology": topology(physical),
    }


def _cpu_model() -> str:
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


def nvml_gpu_count() -> int:
    """GPUs NVML sees (0 without a driver)."""
    nvml = _nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    finally:
        nvml.nvmlShutdown()


def local_checks(vers: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """This node's preflight problems (the sweep adds the cross-node ones: equal versions,
    GPU counts, job shape)."""
    problems = []
    gpus = node["gpus"]
    if vers.get("cuda") and not gpus:
        problems.append(
            f"torch is built for CUDA {vers['cuda']} but NVML sees no GPU "
            "(driver missing?): sweeps will run on CPU with gloo"
        )
    if gpus and not vers.get("cuda"):
        problems.append(cpu_build_note(len(gpus)))
    if gpus and vers.get("cuda") and not vers.get("nccl"):
        problems.append("GPUs present but torch reports no NCCL: multi-GPU runs fall back to gloo")
    if not any(nic["up"] and nic["name"] != "lo" for nic in node["nics"]):
        problems.append("no network interface is up besides lo: only single-node runs can work")
    return problems


def describe() -> dict[str, Any]:
    """What `gpuprof env` prints: launcher, versions, this node, environment, preflight."""
    vers, node = versions(), node_info()
    return {
        "launcher": detect_launcher(),
        "executable": sys.executable,
        "versions": vers,
        "node": node,
        "env": captured_env(),
        "preflight": local_checks(vers, node),
    }


def format_description(info: dict[str, Any]) -> str:
    """`gpuprof env` as readable lines."""
    node = info["node"]
    cpu = node["cpu"]
    lines = [f"launcher   {info['launcher']}"]
    lines += [f"{k:<10} {v}" for k, v in info["versions"].items() if v is not None]
    missing = [k for k, v in info["versions"].items() if v is None]
    if missing:
        lines.append(f"{'absent':<10} {', '.join(missing)}")
    lines.append(f"host       {node['host']} ({node['os']})")
    lines.append(f"cpu        {cpu['model']}, {cpu['logical_cores']} logical cores")
    lines.append(f"memory     {node['memory_bytes'] / 2**30:.1f} GiB")
    if node["gpus"]:
        for gpu in node["gpus"]:
            lines.append(
                f"gpu {gpu['nvml_index']:<6} {gpu['name']}  {gpu['pci_bus_id']}  "
                f"{gpu['uuid']}  {gpu['memory_bytes'] / 2**30:.0f} GiB"
            )
    else:
        lines.append("gpus       none visible to NVML (no NVIDIA driver); CPU + gloo will be used")
    for nic in node["nics"]:
        state = "up" if nic["up"] else "down"
        rate = f"{nic['speed_mbps']} Mbit/s" if nic["speed_mbps"] else "rate unknown"
        lines.append(
            f"nic        {nic['name']:<12} {state:<4} {rate:<14} mtu {nic['mtu']}  "
            f"{' '.join(nic['ipv4'])}"
        )
    if node.get("topology"):
        from gpuprof.topology import format_topology

        lines += [
            "topology",
            *("  " + line for line in format_topology(node["topology"]).splitlines()),
        ]
    checks = info.get("preflight", [])
    lines += [f"preflight  {p}" for p in checks] or ["preflight  ok"]
    return "\n".join(lines)
