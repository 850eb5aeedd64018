"""What this node has and runs, for run.json and `gpuprof env`: versions, GPUs (through NVML),
NICs, topology and the preflight checks. torch is imported inside the functions that ask it
(versions, the device), so importing this module stays light."""

from __future__ import annotations

import platform
import socket
import sys
from typing import Any

import psutil

from gpuprof.errors import UsageError
from gpuprof.machine.env import (
    captured_env,
    cpu_build_note,
    cpu_model,
    detect_launcher,
    gpuprof_version,
    nics,
)
from gpuprof.machine.nvml import open_nvml
from gpuprof.machine.topology import format_topology, gpu_topology


def plan_device(request: str) -> tuple[str, int]:
    """Resolve --device (auto -> cuda if torch sees a GPU) and count the visible GPUs (0 for
    --device cpu, which asks torch nothing: the launcher of CPU ranks then starts without
    importing torch, 3-4 s of each launch on a 2-core machine)."""
    if request == "cpu":
        return "cpu", 0
    import torch  # heavy: only when a sweep resolves its device

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if request == "cuda" and count == 0:
        seen = nvml_gpu_count() if torch.version.cuda is None else 0
        why = cpu_build_note(seen) if seen else "no CUDA GPU is visible"
        raise UsageError(f"--device cuda but {why}", "or use --device cpu")
    device = "cuda" if request == "cuda" or (request == "auto" and count > 0) else "cpu"
    return device, count


def versions() -> dict[str, str | None]:
    """python, gpuprof, torch, cuda, nccl and driver versions (None where absent)."""
    import torch  # heavy: only when versions are asked for

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


def nvml_driver_version() -> str | None:
    """The NVIDIA driver version through NVML, or None without a driver."""
    nvml, _ = open_nvml()
    if nvml is None:
        return None
    try:
        return str(nvml.nvmlSystemGetDriverVersion())
    finally:
        nvml.nvmlShutdown()


def gpus() -> list[dict[str, Any]]:
    """GPUs as NVML lists them, identified by UUID and PCI bus id (never by index alone)."""
    nvml, _ = open_nvml()
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


def topology(nic_names: list[str]) -> dict[str, Any] | None:
    """GPU-to-GPU and GPU-to-NIC topology (None without NVML)."""
    nvml, _ = open_nvml()
    if nvml is None:
        return None
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
            "model": cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
        },
        "memory_bytes": int(memory.total),
        "gpus": gpus(),
        "nics": nic_list,
        "topology": topology(physical),
    }


def nvml_gpu_count() -> int:
    """GPUs NVML sees (0 without a driver)."""
    nvml, _ = open_nvml()
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
        lines += [
            "topology",
            *("  " + line for line in format_topology(node["topology"]).splitlines()),
        ]
    checks = info.get("preflight", [])
    lines += [f"preflight  {p}" for p in checks] or ["preflight  ok"]
    return "\n".join(lines)
