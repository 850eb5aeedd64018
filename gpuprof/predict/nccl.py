"""NCCL's own cost model, in our words: the time of one collective for each algorithm (ring,
tree, NVLS, NVLS-tree, CollNet, PAT) and protocol (LL, LL128, Simple), and the one NCCL would
pick (the fastest). docs/prediction.md gives every formula and constant with its source.

Constants: NCCL 2.30.7's tuning model (gpuprof.predict.nccl_tuning: latencies in
microseconds, bandwidths in GB/s, 1 GB/s = 1000 bytes/us). What NCCL's topology search would
find (its "graphs": channels and their per-channel bandwidth inside a node and across nodes)
is approximated from the system's description: the GPU's NVLink bandwidth (links x NCCL's
per-link rate), the NICs (line rate, bounded by their PCIe link), each graph's channel count
times the highest speed of NCCL's speed list the links can carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuprof.machine.systems import NIC_PATHS, System
from gpuprof.predict import p2p_channels as p2p
from gpuprof.predict.nccl_tuning import (
    ALGOS,
    ARCH_INDEX,
    BASE_LAT,
    HW_LAT,
    INTER_SPEEDS,
    INTRA_SPEEDS,
    LL_MAX_BW,
    LL_MAX_BW_NET,
    MAX_CHANNELS,
    NVLINK_LINK_BW,
    NVLS_EFFICIENCY,
    NVLS_MAX_HEADS,
    NVLS_TREE_CAP,
    PCIE_X16_BW,
    PROTOS,
    RING_LL128_CAP,
    TREE_CAP,
    TREE_CORRECTION,
    TREE_LL128_CAP,
)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
P2P_OPS = ("all_to_all", "sendrecv")  # point to point: no entry in the tuning model


@dataclass(frozen=True)
class Graph:
    """One algorithm's channels, as NCCL's search would build them: their number and each
    one's bandwidth inside a node and across nodes (GB/s)."""

    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class Choice:
    """A predicted collective: time (us), the algorithm and protocol that give it, and the
    busbw nccl-tests would report."""

    time_us: float
    algorithm: str
    protocol: str
    busbw_gbps: float
    latency_us: float = 0.0  # of time_us: the algorithm's latency (the rest moves the bytes)
    bound: str = ""  # what bounds a send across domains: "channels" (its channels' rate) or ""


def nvlink_total(system: System) -> float:
    """A GPU's NVLink bandwidth per direction as NCCL counts it (links x per-link rate);
    without NVLink, its PCIe link."""
    if system.nvlink_links:
        return system.nvlink_links * NVLINK_LINK_BW[system.arch]
    return PCIE_X16_BW[5 if system.arch != "ampere" else 4]


def nic_bw(system: System) -> float:
    """One NIC's rate as NCCL sees it (line rate / 8, at most its PCIe x16 link), GB/s."""
    return min(system.nic_gbps / 8, PCIE_X16_BW[system.nic_pcie_gen])


def _best(speeds: tuple[float, ...], limit: float, per_channel_cap: float = math.inf) -> Graph:
    """The channels x speed the links can carry (`limit` in total, `per_channel_cap` each):
    the speed of the list that carries the most."""
    best = (0, 0.0)
    for speed in speeds:
        if speed > per_channel_cap:
            continue
        count = min(MAX_CHANNELS, int(limit // speed))
        if count >= 1 and count * speed > best[0] * best[1]:
            best = (count, float(speed))
    count, speed = best if best[0] else (1, min(limit, per_channel_cap))
    return Graph(channels=count, bw_intra=speed, bw_inter=speed)


def ring_graph(system: System, nodes: int) -> Graph:
    """Ring and tree channels: inside one NVLink domain as many channels of one speed as the
    GPU's NVLink carries (every channel passes through every GPU); across domains each channel
    also crosses one NIC of each domain, a NIC carrying as many channels as fit its rate."""
    intra = nvlink_total(system)
    if nodes == 1:
        return _best(INTRA_SPEEDS[system.arch], intra)
    nics, rate = system.nics_per_domain, nic_bw(system)
    best = Graph(channels=1, bw_intra=0.0, bw_inter=0.0)
    for speed in INTER_SPEEDS[system.arch]:
        count = min(MAX_CHANNELS, nics * int(rate // speed), int(intra // speed))
        if count >= 1 and count * speed > best.channels * best.bw_inter:
            best = Graph(channels=count, bw_intra=float(speed), bw_inter=float(speed))
    return best


def tree_graph(system: System, nodes: int) -> Graph:
    """The ring's channels; on two domains inside at up to twice the network's rate (half of
    a tree's traffic stays inside the node)."""
    ring = ring_graph(system, nodes)
    if nodes == 2:
        intra = min(2 * ring.bw_inter, nvlink_total(system) / ring.channels)
        return Graph(channels=ring.channels, bw_intra=intra, bw_inter=ring.bw_inter)
    return ring


def nvls_graph(system: System, nodes: int, ppn: int) -> Graph | None:
    """NVLS: one channel per GPU of the domain (its "heads", at most 32), each at the highest
    speed the GPU's NVLink carries for every head and the GPU's own traffic; across domains
    each head goes through a NIC. None without NVLink SHARP."""
    if not system.nvls or ppn < 2:
        return None
    heads, total = min(ppn, NVLS_MAX_HEADS), nvlink_total(system)
    intra = next((s for s in INTRA_SPEEDS[system.arch] if (heads + 1) * s <= total), 0.0)
    if not intra:
        return None
    if nodes == 1:  # the search's second pass raises the other side up to below twice this
        inter = max((s for s in INTRA_SPEEDS[system.arch] if s < 2 * intra), default=intra)
    else:
        share = system.nics_per_domain * nic_bw(system) / heads
        inter = max((s for s in INTER_SPEEDS[system.arch] if s <= share), default=0.0)
    return Graph(channels=heads, bw_intra=float(intra), bw_inter=float(inter))


def _steps(op: str, n: int) -> int:
    return {"all_reduce": 2 * (n - 1), "broadcast": n, "reduce": n}.get(op, n - 1)


def _bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(op, (n - 1) / n)


def _scale(nodes: int) -> int:
    return 0 if nodes == 1 else 1 if nodes == 2 else 2


@dataclass(frozen=True)
class _Shape:
    system: System
    op: str
    nodes: int  # NVLink domains
    ppn: int  # ranks per domain

    @property
    def ranks(self) -> int:
        return self.nodes * self.ppn

    @property
    def arch(self) -> int:
        return ARCH_INDEX[self.system.arch]


def ll128_enabled(system: System, nodes: int, ppn: int = 2) -> bool:
    """Whether NCCL enables LL128 (src/graph/tuning.cc ncclTopoTuneModel, 2.8 to 2.30): inside
    a node only over NVLink (or with one GPU a node); across nodes only where the GPU reaches
    its NIC through at most PCIe switches (PXB; from Hopper on also PXN, and from 2.27 P2C,
    which NCCL before 2.27 names PHB)."""
    if not system.nvlink_links and ppn > 1:
        return False
    if nodes == 1:
        return True
    path = system.nic_path
    if path == "P2C" and (system.nccl_release or (2, 27)) < (2, 27):
        path = "PHB"
    limit = "PXB" if system.arch == "ampere" else "PXN"
    return NIC_PATHS.index(path) <= NIC_PATHS.index(limit)


def _busbw(shape: _Shape, algo: str, proto: str) -> float:
    """The algorithm's bus bandwidth with this protocol (NCCL's busBw before algBw), GB/s;
    0 when it does not apply."""
    system, nodes, p = shape.system, shape.nodes, _scale(shape.nodes)
    ar = shape.op == "all_reduce"
    if proto == "LL128" and not ll128_enabled(system, nodes, shape.ppn):
        return 0.0
    if algo in ("tree",) and not ar:
        return 0.0
    if algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain") and proto != "Simple":
        return 0.0
    if algo == "ring":
        graph = ring_graph(system, nodes)
    elif algo == "tree":
        graph = tree_graph(system, nodes)
    elif algo in ("nvls", "nvls_tree"):
        found = nvls_graph(system, nodes, shape.ppn)
        if found is None or (algo == "nvls") != (nodes == 1) or not (ar or algo == "nvls"):
            return 0.0
        graph = found
    elif algo in ("collnet_direct", "collnet_chain"):
        if not system.collnet or nodes < 2 or not ar:
            return 0.0
        ring = ring_graph(system, nodes)  # the in-network reduction halves what crosses
        return min(2 * ring.channels * ring.bw_inter, nvlink_total(system)) * (
            0.85 if shape.arch >= 2 and algo == "collnet_direct" else 1.0
        )
    elif algo == "pat":
        if ar or shape.ppn != 1 or nodes < 2 or proto != "Simple":
            return 0.0
        graph = tree_graph(system, nodes)
    else:
        return 0.0
    per_channel = graph.bw_intra if nodes <= 2 else graph.bw_inter
    if algo in ("nvls", "nvls_tree"):
        eff = NVLS_EFFICIENCY[system.arch] * (graph.channels - 1) / graph.channels
        intra = graph.bw_intra * eff * (2 if ar else (shape.ppn - 1) / shape.ppn)
        inter = graph.bw_inter * (2 if algo == "nvls_tree" and nodes <= 2 else 1)
        caps = [intra, inter]
        if algo == "nvls_tree":
            caps.append(NVLS_TREE_CAP[shape.arch][p])
        per_channel = min(caps)
    bus = graph.channels * per_channel
    ll_cap = (
        LL_MAX_BW[shape.arch][0]
        if nodes == 1
        else LL_MAX_BW_NET.get(system.cpu, LL_MAX_BW_NET["intel"])[p]
    )
    if algo == "ring" and proto == "LL":
        bus = min(ll_cap, 0.5 * bus)
    elif algo == "ring" and proto == "LL128":
        bus = min(0.92 * bus, graph.channels * RING_LL128_CAP[shape.arch][p])
    elif algo == "tree":
        bus = min(0.92 * bus, graph.channels * TREE_CAP[shape.arch][p])
        if proto == "LL":
            bus = min(bus / 3.8, ll_cap)
        elif proto == "LL128":
            factor = 7 / 9 if nodes == 1 else 120 / 128
            bus = min(bus * factor, graph.channels * TREE_LL128_CAP[shape.arch][p])
    elif algo == "pat":
        bus *= 0.75
    return bus


def _algbw(shape: _Shape, algo: str, bus: float) -> float:
    """NCCL's algBw from busBw: the ring's steps, half for tree and CollNet all_reduce; the
    busBw itself for PAT, NVLS and CollNet on all_gather / reduce_scatter."""
    if shape.op in ("all_gather", "reduce_scatter") and algo != "ring":
        return bus
    if algo in ("tree", "collnet_direct", "collnet_chain"):
        return bus * 0.5
    return bus * shape.ranks / _steps(shape.op, shape.ranks)


def _latency(shape: _Shape, algo: str, proto: str) -> float:
    """The algorithm's latency with this protocol, us."""
    system, nodes, n, ppn = shape.system, shape.nodes, shape.ranks, shape.ppn
    i = PROTOS.index(proto)
    intra_link = _intra_link(system)
    hw = intra_link if nodes == 1 else "net"
    intra = HW_LAT[intra_link][algo][i]
    inter = HW_LAT["net"]["tree" if ppn == 1 else algo][i] + system.net_latency_us
    if proto == "Simple":
        inter += system.net_latency_us
    lat = BASE_LAT[algo][i]
    log_nodes = int(math.log2(nodes)) if nodes > 1 else 0
    if algo == "ring":
        if shape.op in ("broadcast", "reduce"):
            return lat + _steps(shape.op, n) * HW_LAT[hw]["ring"][i]
        overhead = (2.0 if system.cpu == "amd" else 1.0) * (3 if proto == "Simple" else 1)
        intra = max(intra, overhead if nodes > 1 else 0.0)
        crossing = 0 if nodes == 1 else (2 if shape.op == "all_reduce" else 1) * (nodes - 1)
        return lat + (_steps(shape.op, n) - crossing) * intra + crossing * inter
    if algo == "tree":
        return lat + 2 * ((ppn - 1) * intra + log_nodes * inter)
    if algo == "collnet_direct":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if algo == "collnet_chain":
        return lat + 2 * (ppn - 1) * intra + inter
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return lat + intra + 2 * log_nodes * inter
    return lat + log_nodes * inter / 3.5 + 2.8 * n  # pat


def algo_parts(shape: _Shape, algo: str, proto: str, size: float) -> tuple[float, float] | None:
    """NCCL's time for one algorithm and protocol as (latency, transfer) in us, or None when
    it does not apply."""
    bus = _busbw(shape, algo, proto)
    if bus <= 0:
        return None
    alg = _algbw(shape, algo, bus)
    log_size = int(math.log2(size / 64)) if size >= 64 else -1
    if algo == "tree" and 0 <= log_size < 23:
        alg *= TREE_CORRECTION[proto][log_size]
    lat = max(_latency(shape, algo, proto), shape.system.floor_us)  # a measured floor
    if algo == "ring" and proto == "Simple" and shape.op == "all_reduce" and shape.nodes > 1:
        channels = ring_graph(shape.system, shape.nodes).channels
        if size / (channels * shape.ranks) >= 64:  # NCCL's "plateau" latency
            lat *= 1.4
    return lat, size / (1000 * alg)


def collective(
    system: System,
    op: str,
    ranks: int,
    size: float,
    algorithm: str | None = None,
    protocol: str | None = None,
) -> Choice:
    """One `op` of `size` bytes (nccl-tests' size: the whole buffer) over `ranks` GPUs of
    `system`, as NCCL would run it: the fastest algorithm and protocol, or the given
    `algorithm` (NCCL_ALGO) and `protocol` (NCCL_PROTO), the fastest of the rest."""
    if op not in OPS + P2P_OPS:
        raise ValueError(f"NCCL's model has no {op}")
    domain = system.domain
    nodes = max(1, math.ceil(ranks / domain))
    ppn = ranks // nodes if ranks >= domain else ranks
    shape = _Shape(system=system, op=op, nodes=nodes, ppn=max(1, ppn))
    if ranks < 2:
        return Choice(time_us=0.0, algorithm="none", protocol="none", busbw_gbps=0.0)
    if op in P2P_OPS:
        return point_to_point(shape, size)
    best: tuple[float, str, str, float] | None = None
    for algo in ALGOS if algorithm is None else (algorithm,):
        for proto in PROTOS if protocol is None else (protocol,):
            parts = algo_parts(shape, algo, proto, size)
            if parts is not None and (best is None or sum(parts) < best[0]):
                best = (sum(parts), algo, proto, parts[0])
    if best is None:
        raise ValueError(f"no algorithm for {op} over {ranks} ranks of {system.name}")
    time, algo, proto, latency = best
    if op in ("broadcast", "reduce"):  # as nccl-tests times it: back to back, pipelined
        stage = max(_stage_latency(shape, proto), system.floor_us)
        time, latency = time - latency + stage, stage
    busbw = _bus_factor(op, ranks) * size / (time * 1e3)
    return Choice(time, algo, proto, busbw, latency)


def _intra_link(system: System) -> str:
    """The link inside an NVLink domain, as NCCL's latency tables name it."""
    return "nvlink" if system.nvlink_links else "pci"


def _peers_latency(shape: _Shape) -> float:
    """An all_to_all's latency past the base: one message to each peer, each a Simple ring
    step on its link (NCCL runs it as n - 1 sends and receives; its proxy posts each network
    send), so it grows with the peers, not once per op."""
    system, n, ppn = shape.system, shape.ranks, shape.ppn
    inter = HW_LAT["net"]["ring"][2] + system.net_latency_us
    return (ppn - 1) * HW_LAT[_intra_link(system)]["ring"][2] + (n - ppn) * inter


def _stage_latency(shape: _Shape, proto: str) -> float:
    """A rooted op's latency as nccl-tests reports it: one stage of its chain. nccl-tests
    launches its iterations back to back and divides the time (src/common.cu BenchTime); a
    rank of a broadcast or reduce chain starts its next op once its own previous one and its
    upstream's are done, so the ops pipeline and each costs one hop, where NCCL's model
    (which chooses the protocol) counts the whole chain."""
    i = PROTOS.index(proto)
    hw = "net" if shape.nodes > 1 else _intra_link(shape.system)
    return BASE_LAT["ring"][i] + HW_LAT[hw]["ring"][i]


def point_to_point(shape: _Shape, size: float) -> Choice:
    """all_to_all and sendrecv, which NCCL runs as sends and receives outside its tuning
    model: each rank's bytes to peers in its NVLink domain at its NVLink rate, to other
    domains at its share of the domain's NICs, both at once; sendrecv's latency one Simple
    ring step (base + per-hop) on the slowest link crossed, all_to_all's one per peer
    (`_peers_latency`). all_to_all: `size` is each rank's whole buffer, (n - 1) / n of it
    leaves; sendrecv: `size` goes to one neighbour (across nodes only at a node boundary, on
    that rank's NIC share and its channels' rate)."""
    system, n, ppn = shape.system, shape.ranks, shape.ppn
    nvlink = nvlink_total(system)
    nic_share = system.nics_per_domain * nic_bw(system) / ppn
    crosses = shape.nodes > 1
    if shape.op == "all_to_all":
        latency = BASE_LAT["ring"][2] + _peers_latency(shape)
    else:
        latency = BASE_LAT["ring"][2] + HW_LAT["net" if crosses else "nvlink"]["ring"][2]
        latency += system.net_latency_us if crosses else 0.0
    latency = max(latency, system.floor_us)
    if shape.op == "all_to_all":  # each rank's whole buffer, (n - 1) / n of it leaving
        intra = size * (ppn - 1) / n / (1000 * nvlink)
        inter = size * (n - ppn) / n / (1000 * nic_share)
        time = latency + max(intra, inter)
        return Choice(time, "send/recv", "Simple", size / (1000 * time) * (n - 1) / n, latency)
    # one peer each way; across domains at most its channels' rate (p2p_channels)
    ring = ring_graph(system, shape.nodes)
    cap = p2p.send_rate(system, shape.nodes, n, size, ring, nic_bw(system))
    time = latency + size / (1000 * (min(nvlink, nic_share, cap) if crosses else nvlink))
    bound = "channels" if crosses and cap < min(nvlink, nic_share) else ""
    return Choice(time, "send/recv", "Simple", size / (1000 * time), latency, bound)
