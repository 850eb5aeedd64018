"""Collectives: sizes whose results were wrong, all_reduce busbw on a full NVLink node against
the reference for that GPU, a ring's busbw against the NICs' line rate, and the sizes where a
curve's time moves against its bytes (a slow size), with NCCL's own choice of algorithm and
protocol on each side where the run names its system."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuprof.analysis import gpu_model
from gpuprof.analysis.bandwidth import slow_steps
from gpuprof.analysis.summary import Analyzed
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.systems import System
from gpuprof.predict import nccl
from gpuprof.predict.calibrate import at_gpus
from gpuprof.predict.calibrations import NIC_OVER, nic_reach, run_system
from gpuprof.predict.fits import correct_only
from gpuprof.predict.nccl_tuning import NCCL_ALGO_NAMES
from gpuprof.runs.imported import measured_choices
from gpuprof.units import format_size

SHOWN_STEPS = 3  # slow sizes named one by one; the rest listed
NCCL_ALGO = {model: name for name, model in NCCL_ALGO_NAMES.items()}  # the model's -> NCCL's


def collective_findings(summary: pd.DataFrame, info: dict[str, Any]) -> list[str]:
    """all_reduce busbw on a full NVLink node against the known reference for that GPU."""
    peaks = gpu_peaks(gpu_model(info))
    if peaks is None or not peaks.all_reduce_busbw_gbps or summary.empty:
        return []
    one_node = summary[
        (summary["op"] == "all_reduce") & (summary["num_nodes"] == 1) & (summary["world_size"] == 8)
    ]
    if one_node.empty:
        return []
    best = one_node.loc[one_node["size_bytes"] == one_node["size_bytes"].max()]
    best = best.iloc[int(best["busbw_gbps"].to_numpy().argmax())]
    busbw = float(best["busbw_gbps"])
    ring = peaks.all_reduce_busbw_gbps
    nvls = peaks.nvls_busbw_gbps
    ref, kind = (nvls, "NVLS") if nvls else (ring, "ring")
    pct = 100 * busbw / ref
    if pct >= 90:
        verdict = "as expected"
    elif nvls and busbw >= 0.9 * ring:
        verdict = (
            "ring speed, not NVLS: check that NVLink SHARP is on (NCCL_NVLS_ENABLE not 0, "
            "NCCL_ALGO not forcing Ring, the fabric manager running; NCCL_DEBUG=INFO names "
            "the algorithm)"
        )
    else:
        verdict = (
            "below the reference: check NVLink state (nvidia-smi nvlink -s), NCCL_ALGO/"
            "NCCL_PROTO overrides and GPU clocks"
        )
    return [
        f"all_reduce on 8 x {peaks.model} reaches {busbw:.0f} GB/s busbw at "
        f"{format_size(best['size_bytes'])} ({best['scope']}), {pct:.0f}% of the ~{ref:.0f} "
        f"GB/s {kind} reference (docs/methodology.md): {verdict}."
    ]


def _modelled(system: System | None, row: pd.Series, size: float) -> str | None:
    """NCCL's choice (`tree/LL`) for the step's op at `size` on the run's shape by its own
    model (None without a system, or for an op outside NCCL's tuning model)."""
    world, nodes = _count(row["world_size"]), _count(row["num_nodes"])
    if system is None or row["op"] not in nccl.OPS or world < 2 or nodes < 1 or world % nodes:
        return None
    try:
        got = nccl.collective(at_gpus(system, world // nodes), str(row["op"]), world, size)
    except ValueError:  # no algorithm of the model runs this op on this shape
        return None
    return f"{got.algorithm}/{got.protocol}"


def _count(value: Any) -> int:
    """A count from the summary (0 where it is missing or not a number)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _setting(choice: str) -> str:
    """The environment that forces `choice` (`tree/LL`, in NCCL's names)."""
    algorithm, _, protocol = choice.partition("/")
    return f"NCCL_ALGO={NCCL_ALGO.get(algorithm, algorithm)} NCCL_PROTO={protocol}"


def _size(size: float) -> str:
    """A power of two as nccl-tests' sweeps name it (64 KiB), any other size in bytes."""
    whole = int(size)
    return format_size(whole) if whole & (whole - 1) == 0 else f"{whole:,} B"


# published evidence of where a slow size on Slingshot comes from (CSCS Alps, NCCL 2.23 with
# aws-ofi-nccl; boeschf/nccl-benchmark-on-alps-2025, results/: 10 configurations per count)
SLINGSHOT_STEPS = (
    " On Slingshot such sizes have moved with libfabric's CXI queues and NCCL's NIC assignment,"
    " not alike at every size and node count (CSCS Alps, boeschf/nccl-benchmark-on-alps-2025,"
    " all_reduce: 1 MiB on 2 nodes 864-921 us by default, 346-353 us with"
    " FI_CXI_DEFAULT_CQ_SIZE=131072, FI_CXI_DEFAULT_TX_SIZE=32768,"
    " FI_CXI_SAFE_DEVMEM_COPY_THRESHOLD=16777216 and NCCL_WORK_FIFO_DEPTH=4194304 together,"
    " 137-171 us with NCCL_CROSS_NIC=1; 16 MiB on 8 nodes 2,249 us by default, 2,076-2,134 with"
    " those queues, 959-1,361 with NCCL_CROSS_NIC=1): measure it again with each."
)


def _cause(row: pd.Series, measured: dict[tuple[str, int], str], system: System | None) -> str:
    """What NCCL chose on each side of a step (by its TUNING lines in the log, `measured`,
    else by its model on the run's system) and what to do; "" where neither says."""
    sizes = (int(row["size_small"]), int(row["size_large"]))
    sides = [measured.get((str(row["op"]), size)) for size in sizes]
    said = "NCCL chose (its TUNING lines)"
    if None in sides:
        sides = [_modelled(system, row, size) for size in sizes]
        said = f"NCCL's model on {system.name if system else '?'} picks"
    below, above = sides
    across = _count(row["num_nodes"]) > 1  # a network between the ranks
    slingshot = across and system is not None and system.fabric == "slingshot"
    fabric = SLINGSHOT_STEPS if slingshot else ""
    if below is None or above is None:
        return fabric
    if below == above:
        where = "the network stack's size thresholds" if across else "its transport in the node"
        return (
            f" {said} {below} on both sides: look below NCCL ({where}), and run it again to "
            "see whether it repeats." + fabric
        )
    faster = below if row["kind"] == "jump" else above
    return (
        f" {said} {below} at {_size(sizes[0])} and {above} at {_size(sizes[1])}: measure "
        f"these sizes again with {_setting(faster)}; if that is faster, NCCL's tuning "
        "misjudges this system here (force it for the job's sizes, or give NCCL a tuner "
        "plugin)." + fabric
    )


def step_findings(steps: pd.DataFrame, info: dict[str, Any], system: System | None) -> list[str]:
    """One finding per slow size (`slow_steps`), the largest first: what was measured and
    what NCCL chose on each side (its TUNING lines in an imported log, else its model on the
    run's system): where the choice changes, the one to force to see whether NCCL misjudges
    this system there."""
    if steps.empty:
        return []
    nccl_run = str(info.get("backend") or "nccl") == "nccl"
    measured = measured_choices(info)
    ordered = steps.sort_values("ratio", ascending=False)
    found: list[str] = []
    for _, row in ordered.head(SHOWN_STEPS).iterrows():
        small, large = _size(row["size_small"]), _size(row["size_large"])
        where = f"{row['op']} over {row['world_size']} ranks on {row['num_nodes']} node(s)"
        if row["kind"] == "jump":
            text = (
                f"{where}: {large} takes {row['ratio']:.1f}x the time of {small} "
                f"({row['time_large']:.1f} against {row['time_small']:.1f} us), more than "
                f"{row['size_large'] / row['size_small']:.3g}x the bytes explain."
            )
        else:
            text = (
                f"{where}: {small} takes {row['ratio']:.1f}x the time of the larger {large} "
                f"({row['time_small']:.1f} against {row['time_large']:.1f} us): the smaller "
                "size is slow."
            )
        cause = _cause(row, measured, system) if nccl_run else ""
        if any(SLINGSHOT_STEPS in f for f in found):  # said once, in the largest step's
            cause = cause.replace(SLINGSHOT_STEPS, " On Slingshot: the settings above.")
        if cause:
            text += cause
        elif nccl_run:
            text += (
                " Measure the sizes around it again with NCCL_ALGO / NCCL_PROTO forced to see "
                "which choice is slow."
            )
        else:
            text += " Run it again to see whether it repeats."
        if nccl_run:
            text += " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING prints NCCL's choice per call."
        found.append(text)
    rest = ordered.iloc[SHOWN_STEPS:]
    if not rest.empty:
        listed = ", ".join(
            f"{r['op']} {_size(float(r['size_small']))} -> {_size(float(r['size_large']))} "
            f"on {r['num_nodes']} node(s) {float(r['ratio']):.1f}x"
            for _, r in rest.iterrows()
        )
        found[-1] += f" Also slow: {listed}."
    return found


NIC_BELOW = 0.8  # a ring across nodes under this share of the NICs' line rate is worth a look


def nic_findings(summary: pd.DataFrame, system: System | None) -> list[str]:
    """Per op and scope across nodes (a ring's traffic between nodes passes every node's
    NICs), the largest size's busbw against a node's NICs' line rate where it is under
    NIC_BELOW of it (the largest size at least 256 MiB: smaller sizes do not show the rate);
    of a scope's groups (rails), the slowest."""
    if system is None or summary.empty:
        return []
    worst: dict[tuple[str, str, int, int], tuple[float, str, int, float, float]] = {}
    groups: dict[tuple[str, str, int, int], int] = {}
    keys = ["op", "scope", "group", "world_size", "num_nodes"]
    across = summary[summary["num_nodes"].fillna(0) > 1]
    for (op, scope, group, world, nodes), curve in across.groupby(keys, sort=True):
        world, nodes = _count(world), _count(nodes)
        if nodes < 2 or world % nodes:
            continue
        best = curve.groupby("size_bytes")["time_us"].min().dropna()  # the faster place
        points = [(_count(size), float(time)) for size, time in best.items()]
        got = nic_reach(system, str(op), nodes, world // nodes, points)
        if got is None:
            continue
        key = (str(op), str(scope), world, nodes)
        groups[key] = groups.get(key, 0) + 1
        share = got[1] / got[2]
        if key not in worst or share < worst[key][0]:
            worst[key] = (share, str(group), *got)
    found = []
    for key, (share, group, size, busbw, line) in worst.items():
        op, scope, world, nodes = key
        node = at_gpus(system, world // nodes)
        if share > NIC_OVER:
            found.append(
                f"{op} across {nodes} nodes reaches {busbw:.1f} GB/s busbw at "
                f"{format_size(size)}, {share:.0%} of the {node.nics_per_node} x "
                f"{node.nic_gbps:g} Gbit/s NICs {system.name} gives a node, which a ring "
                "cannot pass: the system measured has other NICs; give --hardware its own "
                "preset or a system file with its nics_per_node and nic_gbps."
            )
        if share >= NIC_BELOW:
            continue
        which = f" (group {group}, the slowest of {groups[key]})" if groups[key] > 1 else ""
        found.append(
            f"{op} across {nodes} nodes{which} reaches {busbw:.1f} GB/s busbw at "
            f"{format_size(size)}, {share:.0%} of a node's NICs ({node.nics_per_node} x "
            f"{node.nic_gbps:g} Gbit/s = {line:g} GB/s), which bound a ring's traffic between "
            "nodes: check that GPUDirect RDMA is on and the GPU's path to its NIC (nvidia-smi "
            f"topo -m; {system.name} says {node.nic_path}), that NCCL uses every NIC at its "
            "rate (NCCL_DEBUG=INFO names them), and with many nodes the fabric's routing."
        )
    return found


def wrong_findings(wrong: pd.DataFrame) -> list[str]:
    """Per op and shape, the sizes whose results were wrong (gpuprof's check, nccl-tests'
    #wrong; the cases `correct_only` leaves out): no time of theirs is a measurement."""
    found: list[str] = []
    for (op, nodes, world), rows in wrong.groupby(["op", "num_nodes", "world_size"], sort=True):
        most = rows.groupby("size_bytes")["nwrong"].max()  # of a size's places, the most
        sizes, counts = list(most.index), ", ".join(f"{int(n):,}" for n in most)
        found.append(
            f"{op} on {_count(nodes)} node(s), {_count(world)} ranks, returned wrong results "
            f"at {', '.join(_size(s) for s in sizes)} ({counts} elements wrong): those times "
            "are no measurement and predictions leave them out; check GPU memory errors "
            "(nvidia-smi -q -d ECC), the NICs' error counters and the NCCL version before "
            "trusting this fabric, then measure again."
        )
    return found


def findings(analyzed: Analyzed) -> list[str]:
    """The collectives rules over a run: wrong results first (a slow size among them is no
    measurement either, so the slow sizes are read from the right ones)."""
    if not analyzed.has("collectives"):
        return []
    summary = analyzed.summary("collectives")
    system = run_system(analyzed.info)
    right, _ = correct_only(summary)
    found = wrong_findings(summary.drop(right.index)) + collective_findings(summary, analyzed.info)
    found += nic_findings(summary, system)
    return found + step_findings(slow_steps(right), analyzed.info, system)
