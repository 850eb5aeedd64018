"""An emulated cluster for tests: network namespaces joined by shaped links
(scripts/netns-cluster.sh), with helpers to run commands on its nodes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "netns-cluster.sh"


def unavailable() -> str | None:
    """Why the emulated cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("iperf3", "iperf3")):
        if shutil.which(tool) is None:
            return f"needs {package} ({tool} not found)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    return None


class Cluster:
    """Nodes 0..n-1: through a bridge, node k at 10.213.0.(k+1) on interface <prefix>e<k>;
    as a mesh (a link per pair), at 10.213.1.(k+1) on interface <prefix>d<k>."""

    def __init__(self, prefix: str, nodes: int, mesh: bool = False) -> None:
        self.prefix, self.nodes, self.mesh = prefix, nodes, mesh
        self.env = {**os.environ, "GPNS_PREFIX": prefix}
        self.host_name: str | None = None  # one name for every node (cloned VMs), else node<k>

    def script(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args], env=self.env, text=True, check=True, capture_output=True, **kwargs
        )  # type: ignore[call-overload]

    def reshape(self, rate: str) -> None:
        """Every node's link (bridge clusters) to `rate`, e.g. '160mbit'."""
        self.script("reshape", str(self.nodes), rate)

    def addr(self, node: int) -> str:
        return f"10.213.{1 if self.mesh else 0}.{node + 1}"

    def node_env(self, node: int) -> dict[str, str]:
        """What a gpuprof process on `node` needs: its interface and host name."""
        iface = f"{self.prefix}{'d' if self.mesh else 'e'}{node}"
        return {
            **self.env,
            "GLOO_SOCKET_IFNAME": iface,
            "GPUPROF_HOST": self.host_name or f"node{node}",
            "OMP_NUM_THREADS": "1",
        }

    def popen(self, node: int, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        """Start `argv` inside node `node`, output to `log`."""
        with log.open("wb") as handle:
            return subprocess.Popen(
                [str(SCRIPT), "exec", str(node), *argv],
                env=self.node_env(node),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )

    def iperf3_mbytes_per_s(self, src: int, dst: int, seconds: int = 3) -> float:
        """One-direction TCP throughput from src to dst, in MB/s (1e6 B/s)."""
        server = self.popen(dst, ["iperf3", "-s", "-1", "-B", self.addr(dst)], Path(os.devnull))
        time.sleep(0.5)
        try:
            result = self.script(
                "exec",
                str(src),
                "iperf3",
                "-c",
                self.addr(dst),
                "-t",
                str(seconds),
                "-f",
                "k",
                timeout=seconds + 30,
            )
        finally:
            server.wait(timeout=10)
        receiver = [line for line in result.stdout.splitlines() if "receiver" in line][-1]
        kbits = float(re.findall(r"([\d.]+) Kbits/sec", receiver)[0])
        return kbits * 1e3 / 8 / 1e6


def manual_sweep_argv(
    nodes: int, gpus: int, node: int, master: str, port: int, out: Path, extra: list[str]
) -> list[str]:
    """`gpuprof sweep --launcher manual` for node `node` of a CPU job, its run under `out`."""
    return [
        sys.executable, "-m", "gpuprof", "sweep", "--launcher", "manual",
        "--nodes", str(nodes), "--gpus", str(gpus), "--node-rank", str(node),
        "--master-addr", master, "--master-port", str(port), "--device", "cpu",
        "--out", str(out), *extra,
    ]  # fmt: skip


@contextmanager
def emulated_cluster(
    nodes: int, rate: str, *custom: str, mesh: bool = False, queue: str | None = None
) -> Iterator[Cluster]:
    """Build the cluster (bridge, or mesh: a link per pair), yield it, always tear it down;
    `queue`: how long a packet may wait in a link's queue (the script's GPNS_QUEUE)."""
    cluster = Cluster(f"g{os.getpid() % 10000}", nodes, mesh)
    if queue is not None:
        cluster.env["GPNS_QUEUE"] = queue
    cluster.script("down")
    try:
        cluster.script("mesh" if mesh else "up", str(nodes), rate, *custom)
        yield cluster
    finally:
        cluster.script("down")
