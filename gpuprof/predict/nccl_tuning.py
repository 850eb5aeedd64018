"""NCCL's tuning constants (NCCL 2.30.7, src/graph/tuning.cc, src/graph/topo.h and
src/graph/search.cc): latencies in microseconds, bandwidths in GB/s (1 GB/s = 1000 bytes/us).
gpuprof.predict.nccl runs its model with them; docs/prediction.md gives each one's source."""

from __future__ import annotations

from gpuprof.runs.nccl_info import ALGORITHMS, PROTOCOLS

# NCCL's algorithms and protocols in its enums' order, as the model names them (one list with
# the log reader, which maps NCCL's enum numbers to them)
ALGOS = ALGORITHMS
PROTOS = PROTOCOLS
ARCH_INDEX = {"ampere": 1, "hopper": 2, "blackwell": 3}

# base latency [algo] (LL, LL128, Simple), us
BASE_LAT = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0),
    "collnet_chain": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}
# hardware latency [link][algo] (LL, LL128, Simple), us per step
HW_LAT = {
    "nvlink": {
        "tree": (0.6, 1.25, 4.0),
        "ring": (0.6, 1.9, 3.4),
        "collnet_direct": (0.0, 0.0, 3.7),
        "collnet_chain": (0.0, 0.0, 2.8),
        "nvls": (0.0, 0.0, 25.0),
        "nvls_tree": (0.0, 0.0, 25.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "pci": {
        "tree": (1.0, 1.9, 4.0),
        "ring": (1.0, 2.5, 5.7),
        "collnet_direct": (0.0, 0.0, 3.7),
        "collnet_chain": (0.0, 0.0, 2.8),
        "nvls": (0.0, 0.0, 0.0),
        "nvls_tree": (0.0, 0.0, 0.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "net": {
        "tree": (5.0, 8.5, 14.0),
        "ring": (2.7, 4.0, 14.0),
        "collnet_direct": (0.0, 0.0, 31.0),
        "collnet_chain": (0.0, 0.0, 30.0),
        "nvls": (0.0, 0.0, 18.0),
        "nvls_tree": (0.0, 0.0, 20.9),
        "pat": (0.0, 0.0, 14.0),
    },
}
NVLS_EFFICIENCY = {"ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
# caps [arch index][1 node, 2 nodes, 3+ nodes], GB/s (per channel except LL_MAX_BW, a total)
LL_MAX_BW = {1: (87.7, 22.5, 19.0), 2: (141.0, 45.0, 35.0), 3: (282.0, 90.0, 70.0)}
LL_MAX_BW_NET = {"intel": (39.0, 39.0, 20.4), "amd": (87.7, 22.5, 19.0)}  # >1 node: by CPU
RING_LL128_CAP = {1: (20.0, 20.0, 20.0), 2: (36.7, 36.7, 36.7), 3: (40.0, 40.0, 40.0)}
TREE_LL128_CAP = {1: (20.0, 20.0, 20.0), 2: (36.7, 36.7, 29.0), 3: (55.6, 31.67, 20.0)}
TREE_CAP = {1: (24.0, 23.6, 17.8), 2: (38.7, 41.4, 36.0), 3: (70.0, 42.8, 24.0)}
NVLS_TREE_CAP = {1: (24.0, 23.6, 17.8), 2: (0.0, 57.7, 45.5), 3: (0.0, 96.0, 80.0)}
# tree all_reduce bandwidth x this, by floor(log2(bytes / 64)) (0: 64 B .. 23: 512 MiB)
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}  # fmt: skip
# NVLink per link and direction (src/graph/topo.h), GB/s
NVLINK_LINK_BW = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
# the per-channel speeds NCCL's search tries, inside a node and across (src/graph/search.cc)
INTRA_SPEEDS = {
    "ampere": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
    "hopper": (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
    "blackwell": (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
}
INTER_SPEEDS = {
    "ampere": (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2),
    "hopper": (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2),
    "blackwell": (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2),
}
PCIE_X16_BW = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}  # NCCL's PCIe x16 rate, GB/s
MAX_CHANNELS = 32
NVLS_MAX_HEADS = 32


# NCCL_ALGO's names (src/graph/tuning.cc ncclAlgoStr; NCCL reads them case-insensitively) ->
# the model's
NCCL_ALGO_NAMES = {
    "Ring": "ring",
    "Tree": "tree",
    "NVLS": "nvls",
    "NVLSTree": "nvls_tree",
    "CollnetDirect": "collnet_direct",
    "CollnetChain": "collnet_chain",
    "PAT": "pat",
}


_BY_LOWER_NAME = {name.lower(): model for name, model in NCCL_ALGO_NAMES.items()}


def forced_algorithm(env: dict[str, str], nodes: int) -> str | None:
    """The one algorithm NCCL_ALGO forces (None: unset, a list, or an exclusion `^...`);
    NVLS across nodes is the model's NVLS-tree."""
    value = str(env.get("NCCL_ALGO") or "").strip().lower()
    algorithm = _BY_LOWER_NAME.get(value)
    if algorithm == "nvls" and nodes > 1:
        return "nvls_tree"
    return algorithm
