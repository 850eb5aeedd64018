"""Systems the predictor can predict on: a node's GPUs and how they are connected, as vendors
and clouds describe them (NVLink generation and links per GPU, NVSwitch and NVLink SHARP, the
size of one NVLink domain, NICs per node and their line rate, the GPU-to-NIC PCIe generation,
in-network reduction, the network stack's extra latency, the NCCL version it runs).
`gpuprof predict --hardware NAME` takes a preset; `--hardware FILE.toml` a system of the user's
own, every field as below (`nccl = "2.28.9"` included).

Every preset cites where its numbers come from. Nothing here is fitted to the measurements
the predictor is validated against (docs/validation.md)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from gpuprof.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (a conditional dependency)
    import tomli as tomllib

ARCHS = ("ampere", "hopper", "blackwell")
CPUS = ("intel", "amd", "arm")
# the path between a GPU and its NIC as NCCL's topology names it, nearest first (src/graph/
# topo.h PATH_*; NODE as nvidia-smi topo -m says it, NCCL's PHB): one PCIe switch, several,
# PCIe to a Grace CPU's NVLink-C2C (NCCL 2.27 on), another GPU's NVLink, the CPU, host bridges
# of one NUMA node, across CPUs
NIC_PATHS = ("PIX", "PXB", "P2C", "PXN", "PHB", "NODE", "SYS")
# the fabric between nodes (NCCL's IB transport runs InfiniBand and RoCE over RDMA verbs;
# Slingshot and EFA go through libfabric, aws-ofi-nccl; GCP's TCPX/TCPXO through its plugin)
FABRICS = ("infiniband", "roce", "slingshot", "efa", "tcpx", "ethernet")
# an NCCL version as NCCL and nccl-tests print it: "2.28.9", "2.21.5+cuda12.4", "2.29"
NCCL_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?(?:[+~-][\w.+~-]*)?")


@dataclass(frozen=True, kw_only=True)
class System:
    """One kind of node and its network (see the module's docstring for the fields' use)."""

    name: str
    gpu: str  # a GPU name gpuprof.machine.hardware.gpu_peaks knows, e.g. "NVIDIA H100 80GB HBM3"
    arch: str  # ampere | hopper | blackwell: NCCL's tuning tables per architecture
    gpus_per_node: int
    nvlink_links: int = 0  # NVLink links per GPU (0: PCIe only)
    nvswitch: bool = True  # the links go to NVSwitches (every GPU pair at the full rate)
    nvls: bool = False  # NVLink SHARP (third-generation NVSwitch: H100, H200, B200, GB200)
    nvlink_domain: int = 0  # GPUs in one NVLink domain (0: the node's; 72 for GB200 NVL72)
    nics_per_node: int = 0
    nic_gbps: float = 0.0  # each NIC's line rate, Gbit/s
    nic_pcie_gen: int = 5  # the GPU-to-NIC PCIe link (x16)
    nic_path: str = "PIX"  # the GPU-to-NIC path (NIC_PATHS): NCCL enables LL128 by it
    fabric: str = ""  # between nodes (FABRICS; "": not said): a calibrated row's band by it
    collnet: bool = False  # in-network reduction (InfiniBand SHARP) enabled
    net_latency_us: float = 0.0  # what the network stack adds per message (NCCL's latencyInter)
    # the smallest collective's time measured on this system (e.g. nccl-tests all_reduce at
    # 8 bytes on the full node, or across the nodes): no algorithm's latency is below it
    floor_us: float = 0.0
    cpu: str = "intel"
    # the NCCL version the system runs ("2.28.9"): rules that changed between versions follow
    # it (gpuprof.predict.p2p_channels); "": the newest rules the model has
    nccl: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise UsageError(
                f"system {self.name}: arch {self.arch!r}", f"one of {', '.join(ARCHS)}"
            )
        if self.cpu not in CPUS:
            raise UsageError(f"system {self.name}: cpu {self.cpu!r}", f"one of {', '.join(CPUS)}")
        if self.nic_path not in NIC_PATHS:
            raise UsageError(
                f"system {self.name}: nic_path {self.nic_path!r}", f"one of {', '.join(NIC_PATHS)}"
            )
        if self.fabric and self.fabric not in FABRICS:
            raise UsageError(
                f"system {self.name}: fabric {self.fabric!r}", f"one of {', '.join(FABRICS)}"
            )
        counts = (self.gpus_per_node, self.nvlink_links, self.nvlink_domain, self.nics_per_node)
        if self.gpus_per_node < 1 or min(counts) < 0 or self.nic_gbps < 0:
            raise UsageError(f"system {self.name}: counts and rates must be positive")
        if self.nic_pcie_gen not in (3, 4, 5, 6) or min(self.net_latency_us, self.floor_us) < 0:
            raise UsageError(
                f"system {self.name}: nic_pcie_gen 3-6, net_latency_us and floor_us >= 0"
            )
        if not isinstance(self.nccl, str) or (self.nccl and not NCCL_VERSION.fullmatch(self.nccl)):
            raise UsageError(f"system {self.name}: nccl {self.nccl!r}", 'a version, e.g. "2.28.9"')

    @property
    def nccl_release(self) -> tuple[int, int] | None:
        """NCCL's (major, minor) the system runs; None where not said (the newest rules)."""
        found = NCCL_VERSION.fullmatch(self.nccl)
        return (int(found.group(1)), int(found.group(2))) if found else None

    @property
    def domain(self) -> int:
        """GPUs in one NVLink domain: what NCCL treats as one node."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def nics_per_domain(self) -> int:
        return self.nics_per_node * max(1, self.domain // self.gpus_per_node)


# what EFA's stack (libfabric's SRD through aws-ofi-nccl) adds to each message over
# InfiniBand verbs, which NCCL's network latencies assume: fi_pingpong reads 24.4-26.3 us per
# transfer at 1 KiB on EFA (libfabric 1.18.0, ComputeCanada/puppet-magic_castle pull 331)
# against 2.65 us at 256 B on mlx5 verbs (ofiwg/libfabric issue 5568): about 22 us. Measured
# with host buffers, not on GPU instances; no published figure of the p5 or p5en
# generation separately was found.
EFA_LATENCY_US = 22.0


def _sys(**kw: Any) -> System:
    return System(**kw)


PRESETS: dict[str, System] = {
    s.name: s
    for s in (
        _sys(
            name="dgx-a100",
            fabric="infiniband",
            gpu="NVIDIA A100-SXM4-80GB",
            arch="ampere",
            gpus_per_node=8,
            nvlink_links=12,
            nics_per_node=8,
            nic_gbps=200,
            nic_pcie_gen=4,
            source="DGX A100: 8 x A100 SXM4 on NVSwitch, 12 NVLink3 links each (600 GB/s), "
            "8 x HDR 200 Gbit/s InfiniBand (NVIDIA DGX A100 datasheet)",
        ),
        _sys(
            name="dgx-h100",
            fabric="infiniband",
            gpu="NVIDIA H100 80GB HBM3",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=8,
            nic_gbps=400,
            source="DGX H100: 8 x H100 SXM5, 18 NVLink4 links each (900 GB/s) on third-generation "
            "NVSwitch (NVLS), 8 x ConnectX-7 NDR 400 Gbit/s (NVIDIA DGX H100 datasheet)",
        ),
        _sys(
            name="dgx-h200",
            fabric="infiniband",
            gpu="NVIDIA H200",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=8,
            nic_gbps=400,
            source="DGX H200: as DGX H100 with H200 GPUs (NVIDIA DGX H200 datasheet)",
        ),
        _sys(
            name="dgx-b200",
            fabric="infiniband",
            gpu="NVIDIA B200",
            arch="blackwell",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=8,
            nic_gbps=400,
            source="DGX B200: 8 x B200, 18 NVLink5 links each (1.8 TB/s), 8 x ConnectX-7 "
            "400 Gbit/s (NVIDIA DGX B200 datasheet)",
        ),
        _sys(
            name="gb200-nvl72",
            fabric="infiniband",
            gpu="NVIDIA GB200",
            arch="blackwell",
            gpus_per_node=4,
            nvlink_links=18,
            nvls=True,
            nvlink_domain=72,
            nics_per_node=4,
            nic_gbps=400,
            cpu="arm",
            source="GB200 NVL72: 72 Blackwell GPUs in one NVLink domain (130 TB/s, 1.8 TB/s per "
            "GPU), trays of 4 GPUs with 4 x 400 Gbit/s ConnectX-7 each (NVIDIA GB200 NVL72 "
            "page; DGX GB200 tray description)",
        ),
        _sys(
            name="aws-p4d",
            fabric="efa",
            gpu="NVIDIA A100-SXM4-40GB",
            arch="ampere",
            gpus_per_node=8,
            nvlink_links=12,
            nics_per_node=4,
            nic_gbps=100,
            nic_pcie_gen=4,
            net_latency_us=EFA_LATENCY_US,
            source="AWS p4d.24xlarge: 8 x A100 40GB on NVSwitch, 4 x 100 Gbit/s EFA (AWS "
            "instance page)",
        ),
        _sys(
            name="aws-p5",
            fabric="efa",
            gpu="NVIDIA H100 80GB HBM3",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=32,
            nic_gbps=100,
            net_latency_us=EFA_LATENCY_US,
            source="AWS p5.48xlarge: 8 x H100 SXM, 32 x 100 Gbit/s EFA v2 (3200 Gbit/s, AWS "
            "instance page)",
        ),
        _sys(
            name="aws-p5en",
            fabric="efa",
            gpu="NVIDIA H200",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=16,
            nic_gbps=200,
            net_latency_us=EFA_LATENCY_US,
            source="AWS p5en.48xlarge: 8 x H200, 16 x 200 Gbit/s EFA v3 (AWS instance page)",
        ),
        _sys(
            name="gcp-a3-mega",
            fabric="tcpx",
            gpu="NVIDIA H100 80GB HBM3",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=8,
            nic_gbps=200,
            source="GCP a3-megagpu-8g: 8 x H100, 8 x 200 Gbit/s GPUDirect-TCPXO (GCP docs)",
        ),
        _sys(
            name="gcp-a3-high",
            fabric="tcpx",
            gpu="NVIDIA H100 80GB HBM3",
            arch="hopper",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=4,
            nic_gbps=200,
            source="GCP a3-highgpu-8g: 8 x H100, 4 x 200 Gbit/s GPUDirect-TCPX (GCP docs)",
        ),
        _sys(
            name="gcp-a4",
            fabric="roce",
            gpu="NVIDIA B200",
            arch="blackwell",
            gpus_per_node=8,
            nvlink_links=18,
            nvls=True,
            nics_per_node=8,
            nic_gbps=400,
            source="GCP a4-highgpu-8g: 8 x B200, 8 x 400 Gbit/s RoCE (3.2 Tbit/s, GCP docs)",
        ),
        _sys(
            name="a100-100gbe",
            fabric="ethernet",
            gpu="NVIDIA A100-SXM4-80GB",
            arch="ampere",
            gpus_per_node=8,
            nvlink_links=12,
            nics_per_node=1,
            nic_gbps=100,
            nic_pcie_gen=4,
            source="an HGX A100 node with one 100 Gbit/s Ethernet NIC (a common on-premises shape)",
        ),
    )
}


# systems published with results at several scales that no preset describes, as system files
# citing their sources (`--hardware NAME` finds them; docs/validation.md scores them)
PUBLISHED_SYSTEMS = Path(__file__).resolve().parent / "published_systems"


@cache
def _published_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PUBLISHED_SYSTEMS.glob("*.toml")))


def published_systems() -> list[str]:
    """The names `--hardware` takes besides the presets: the shipped system files' (the
    folder is read once)."""
    return list(_published_names())


def hardware_names() -> str:
    """Every name `--hardware` takes, for help texts and errors."""
    return ", ".join([*PRESETS, *_published_names()])


def load_system(spec: str) -> System:
    """A preset or a published system by name, or a TOML file of System's fields (`name`
    defaults to the file's stem); a UsageError in one line otherwise."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if spec in _published_names():
        path = PUBLISHED_SYSTEMS / f"{spec}.toml"
    if path.suffix != ".toml":
        raise UsageError(
            f"unknown hardware {spec!r}",
            f"choose one of {hardware_names()} or give a .toml file",
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not TOML: {exc}") from None
    like = str(data.pop("like", ""))
    base = PRESETS.get(like) if like else None
    if like and base is None:
        raise UsageError(f"{path}: like = {like!r} is no preset", f"one of {', '.join(PRESETS)}")
    known = {f.name for f in fields(System)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(
            f"{path}: unknown field {unknown[0]!r}", f"fields: {', '.join(sorted(known))}"
        )
    data.setdefault("name", path.stem)
    try:
        return replace(base, **data) if base is not None else System(**data)
    except TypeError as exc:
        raise UsageError(f"{path}: {exc}", "gpu, arch and gpus_per_node are required") from None


def nccl_version_in(text: object) -> str:
    """The NCCL version a text starts with ("2.27.7 (per same section)" -> "2.27.7", a run's
    "2.28.9+cuda12.9" -> "2.28.9"); "" where none."""
    found = re.match(r"\d+\.\d+(?:\.\d+)?", str(text or "").strip())
    return found.group(0) if found else ""


def system_from_dict(data: dict[str, Any]) -> System:
    """A system as a run keeps it (every field, `gpuprof import --hardware`); a UsageError in
    one line when the fields do not make one."""
    known = {f.name for f in fields(System)}
    try:
        return System(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise UsageError(f"the run's hardware: {exc}", "give --hardware") from None
