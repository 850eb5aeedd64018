"""NCCL's channels for a send or receive to a peer in another NVLink domain (sendrecv across
nodes), by the NCCL version the system runs (System.nccl); gpuprof.predict.nccl's
point_to_point bounds a send across domains by them. Each such channel moves at most about
NCCL_P2P_PER_CHANNEL_NET_BW (14 GB/s) through the network, so how many channels one send
gets bounds its rate: NVIDIA/nccl issue 1272 (sendrecv_perf across 8 or more GH200 nodes
losing a quarter of its bandwidth from NCCL 2.20 on, restored by
NCCL_NCHANNELS_PER_NET_PEER=4).

The channels one peer may use (p2pnChannelsPerPeer), from src/graph/paths.cc
ncclTopoGetNchannels and ncclTopoComputeP2pChannels:

- NCCL 2.29 and later (v2.29.2-1 to v2.30.7-1): per network peer as many channels as the
  GPU's NICs carry at NCCL_P2P_PER_CHANNEL_NET_BW each, at least one per NIC, the fewest over
  all peers (ncclTopoComputeP2pChannelsPerPeer), a power of two; across nodes halved while
  that many for every peer, NCCL_MAX_DEV_WORK_P2P_PER_BATCH peers a round, exceed the p2p
  channels.
- NCCL 2.20 to 2.28 (v2.20.3-1 to v2.28.9-1, the same code): per network peer two channels,
  halved while two for every rank exceed four times the p2p channels, at least one per NIC;
  the fewest over all peers and the p2p channels, a power of two, at most the p2p channels.
- before 2.20 (v2.17.1-1, v2.19.4-1): NCCL_NCHANNELS_PER_NET_PEER, 2 by default, the rest as
  in 2.20.

A GPU's NICs: its share of the domain's (getLocalNetCountByBw, src/graph/topo.cc, stops
counting once they carry the GPU's own link to its CPU: no preset has more NICs a GPU than
that). The p2p channels are the collectives' (src/graph/connect.cc ncclTopoPostset: the
search's ring channels doubled, doubled again on Hopper and later below 16 across nodes when a
ring channel carries over 45 GB/s), a power of two. One send is striped over as few of its
peer's channels as its size allows (src/enqueue.cc scheduleP2pTasksToPlan, addP2pToPlan: the
same code from v2.24.3-1 to v2.30.7-1; earlier versions are taken to stripe alike). The ring
and the NIC rate come from the caller (gpuprof.predict.nccl, which imports this module)."""

from __future__ import annotations

import math
from typing import Protocol

from gpuprof.machine.systems import System

# the rate NCCL counts one channel to a network peer at (NCCL_P2P_PER_CHANNEL_NET_BW,
# src/graph/paths.cc, from 2.29), GB/s
P2P_PER_CHANNEL_NET_BW = 14.0
P2P_PER_BATCH = 8  # NCCL_MAX_DEV_WORK_P2P_PER_BATCH (src/include/device.h): peers per round
NCCL_MAXCHANNELS = 64  # MAXCHANNELS (src/include/device.h)
PER_NET_PEER = 2  # channels per network peer before 2.29 (see the module's docstring)
P2P_NET_CHUNK = 1 << 17  # NCCL_P2P_NET_CHUNKSIZE (src/init.cc computeBuffSizes), bytes
NEW_RULE = (2, 29)  # the first NCCL with the bandwidth rule
HALVING_RULE = (2, 20)  # the first NCCL with the halving rule


class Ring(Protocol):
    """The ring's channels across nodes as NCCL's search finds them
    (gpuprof.predict.nccl.ring_graph): how many, and each one's bandwidth inside a node."""

    @property
    def channels(self) -> int: ...

    @property
    def bw_intra(self) -> float: ...


def pow2_up(x: int) -> int:
    """The smallest power of two >= x (NCCL's pow2Up)."""
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def _newest(system: System) -> bool:
    """Whether the system runs NCCL 2.29 or later (or does not say: the newest rules)."""
    release = system.nccl_release
    return release is None or release >= NEW_RULE


def _collective_channels(system: System, nodes: int, ring: Ring) -> int:
    """comm->nChannels after ncclTopoPostset (the module's docstring)."""
    coll = min(NCCL_MAXCHANNELS, 2 * ring.channels)
    if system.arch != "ampere" and nodes > 1 and ring.bw_intra > 45.0 and coll < 16:
        coll *= 2
    return min(coll, NCCL_MAXCHANNELS)


def _nics(system: System, ranks: int) -> int:
    """A GPU's NICs (its share of its domain's)."""
    return max(1, system.nics_per_domain // max(1, min(ranks, system.domain)))


def _local_peer(system: System) -> int:
    """ncclTopoGetNchannels for a peer in the same NVLink domain: two per NVLink link to it
    (every link, through NVSwitch), two over PCIe (or direct links, taken as one)."""
    return 2 * (system.nvlink_links if system.nvlink_links and system.nvswitch else 1)


def channels_per_peer(system: System, nodes: int, ranks: int, ring: Ring, nic: float) -> int:
    """p2pnChannelsPerPeer on `ranks` ranks over `nodes` NVLink domains, by the system's NCCL
    version: the most one send to a peer is striped over (the module's docstring). `ring`:
    the ring's channels at this shape, `nic`: one NIC's rate as NCCL counts it, GB/s."""
    p2p = _collective_channels(system, nodes, ring)
    p2p_rounded = pow2_up(p2p)
    count = _nics(system, ranks)
    # the fewest over the peers: those in the domain, those across the network
    local = _local_peer(system) if ranks > nodes else NCCL_MAXCHANNELS
    net = NCCL_MAXCHANNELS
    release = system.nccl_release
    if release is None or release >= NEW_RULE:  # v2.29.2-1 paths.cc
        if nodes > 1:
            net = max(count, math.ceil(int(count * nic) / P2P_PER_CHANNEL_NET_BW))
        per_peer = pow2_up(min(NCCL_MAXCHANNELS, net, local))
        if nodes == 1:
            return min(per_peer, p2p_rounded)
        while per_peer * math.ceil(ranks / P2P_PER_BATCH) > p2p_rounded and per_peer > 1:
            per_peer //= 2
        return per_peer
    if nodes > 1:  # v2.28.9-1 paths.cc ncclTopoGetNchannels (v2.19.4-1: the fixed 2)
        net = PER_NET_PEER
        if release >= HALVING_RULE:
            while net * ranks > p2p * 4 and net > 1:
                net //= 2
            net = max(count, net)
    return min(pow2_up(min(p2p, net, local)), p2p_rounded)


def send_channels(
    system: System, nodes: int, ranks: int, size: float, ring: Ring, nic: float
) -> int:
    """The channels one send of `size` bytes to a peer across domains is striped over
    (src/enqueue.cc scheduleP2pTasksToPlan, addP2pToPlan): from the fewest (the channels per
    peer, halved while that many for every rank exceed the p2p channels) up, doubling while
    a part exceeds the chunk (NCCL_P2P_NET_CHUNKSIZE; twice it on Grace with Blackwell from
    2.29, src/init.cc computeBuffSizes), at most the channels per peer."""
    most = channels_per_peer(system, nodes, ranks, ring, nic)
    total = pow2_up(_collective_channels(system, nodes, ring))
    fewest = most
    while fewest * ranks > total and fewest > 1:
        fewest //= 2
    ratio = 2 if system.cpu == "arm" and system.arch == "blackwell" and _newest(system) else 1
    low, high = ratio * P2P_NET_CHUNK // 2, ratio * P2P_NET_CHUNK
    count = max(1, min(fewest, math.ceil(size / low)))
    part = max(low, math.ceil(size / count))
    while part > high and count <= most // 2:
        count *= 2
        part = math.ceil(size / count)
    return count


def send_rate(system: System, nodes: int, ranks: int, size: float, ring: Ring, nic: float) -> float:
    """The most one send of `size` bytes to a peer moves at, GB/s: its channels at
    NCCL_P2P_PER_CHANNEL_NET_BW each across domains; no bound inside one."""
    if nodes < 2:
        return math.inf
    return send_channels(system, nodes, ranks, size, ring, nic) * P2P_PER_CHANNEL_NET_BW
