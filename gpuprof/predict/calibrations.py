"""A run's measured collectives as calibrations of NCCL's model on the system it measured
(gpuprof.predict.calibrate), and the system a run says it was measured on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuprof.analysis.bandwidth import STEP
from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.machine.systems import System, load_system, nccl_version_in, system_from_dict
from gpuprof.predict import nccl
from gpuprof.predict.calibrate import Calibration, at_gpus, calibrate, crosses
from gpuprof.predict.fits import correct_only
from gpuprof.predict.nccl import OPS, P2P_OPS
from gpuprof.predict.nccl_tuning import forced_algorithm
from gpuprof.predict.whatifs import same_hardware
from gpuprof.runs.imported import measured_choices
from gpuprof.specs.collectives import SPEC as _COLLECTIVES
from gpuprof.units import bus_factor, format_size

COLLECTIVES = _COLLECTIVES.name
# ops whose traffic between nodes a ring carries through every node's NICs: their busbw across
# nodes is bounded by a node's NICs' line rate (a tree, NVLS or SHARP can pass it)
RING_BOUND = ("all_reduce", "all_gather", "reduce_scatter")
SATURATED = 256 << 20  # from this size on, a curve's largest size shows the rate it reaches
NIC_OVER = 1.05  # a ring's busbw past this share of the NICs' line rate: not the system's NICs


def nic_reach(
    system: System, op: str, nodes: int, gpus: int, points: list[tuple[int, float]]
) -> tuple[int, float, float] | None:
    """The largest size measured across nodes, its busbw and the line rate of a node's NICs
    at that many GPUs (GB/s): what the bus reached against what bounds a ring between nodes.
    None inside one NVLink domain, for another op, below SATURATED, without the NICs' rate, or
    where NCCL's model picks no ring there (a tree across two nodes, NVLS or SHARP can pass
    the NICs' rate in busbw)."""
    if op not in RING_BOUND or not crosses(system, nodes, gpus) or not points:
        return None
    size, time = max(points)
    node = at_gpus(system, gpus)
    line = node.nics_per_node * node.nic_gbps / 8
    if size < SATURATED or line <= 0 or time <= 0:
        return None
    if nccl.collective(node, op, nodes * gpus, float(size)).algorithm != "ring":
        return None
    return size, bus_factor(op, nodes * gpus) * size / time / 1e3, line


def run_system(info: dict[str, Any], hardware: str | None = None) -> System | None:
    """The system a run predicts on: `hardware` (a preset or a system file, `--hardware`) where
    given, else the one the run says it was measured on (`gpuprof import ... --hardware`), if
    any; running the NCCL the run measured with (its versions' nccl: gpuprof runs and
    imported nccl-tests logs carry it) where the system names no version."""
    described = info.get("hardware")
    if hardware:
        system = load_system(hardware)
    elif isinstance(described, dict):
        system = system_from_dict(described)
    else:
        return None
    version = nccl_version_in((info.get("versions") or {}).get("nccl"))
    return replace(system, nccl=version) if version and not system.nccl else system


def calibrations_of(analyzed: Analyzed, system: System) -> dict[tuple[str, str], list[Calibration]]:
    """Per op and dtype, a calibration from each shape the run measured with every GPU of its
    nodes taking part (scope `global`, or `intra` over a whole node): the out-of-place time
    where measured (nccl-tests' usual figure), else in-place; the slowest group's."""
    summary, wrong = correct_only(analyzed.summary(COLLECTIVES))
    gpus = int(analyzed.info.get("gpus_per_node") or 1)
    whole = summary[
        (summary["scope"] == "global")
        | ((summary["scope"] == "intra") & (summary["world_size"] == gpus))
    ]
    found: dict[tuple[str, str], list[Calibration]] = {}
    run_id = analyzed.info.get("run_id") or "the run"
    about = [str(analyzed.info["source"])] if analyzed.info.get("source") else []
    about += ["sizes with wrong results left out"] if wrong else []
    origin = f"{run_id}" + (f" ({'; '.join(about)})" if about else "")
    keys = ["op", "dtype", "num_nodes", "world_size"]
    measured = measured_choices(analyzed.info)  # NCCL's own, where an imported log said
    for (op, dtype, nodes, world), rows in whole.groupby(keys, sort=True):
        if op not in OPS + P2P_OPS:
            continue
        nodes, world = int(str(nodes)), int(str(world))
        if world % nodes:
            continue
        by_size: dict[int, float] = {}
        for in_place in (True, False):  # out-of-place last: it wins where both were measured
            chosen = rows[rows["in_place"] == in_place]
            for size, time in chosen.groupby("size_bytes")["time_us"].max().items():
                by_size[int(str(size))] = float(time)
        algorithm = forced_algorithm(analyzed.info.get("env") or {}, nodes)
        said = {s: c for (o, s), c in measured.items() if o == op}
        got = calibrate(
            system,
            str(op),
            str(dtype),
            nodes,
            world // nodes,
            sorted(by_size.items()),
            origin,
            algorithm,
            said,
        )
        if got is not None:
            found.setdefault((str(op), str(dtype)), []).append(got)
    return found


def _pairable(
    found: list[Calibration], system: System
) -> dict[tuple[int, str | None], list[Calibration]]:
    """The calibrations across NVLink domains by GPUs per node and forced algorithm: those of
    one group measure the growth between their node counts (calibrate.partner)."""
    groups: dict[tuple[int, str | None], list[Calibration]] = {}
    for c in found:
        if crosses(system, c.nodes, c.gpus):
            groups.setdefault((c.gpus, c.algorithm), []).append(c)
    return groups


def calibration_notes(
    calibrations: dict[tuple[str, str], list[Calibration]], system: System
) -> list[str]:
    """Which measurement calibrated which op, said once each."""
    lines = []
    for (op, dtype), found in sorted(calibrations.items()):
        first: dict[tuple[int, int, str | None], Calibration] = {}
        parts = []
        for c in found:
            used = first.setdefault((c.nodes, c.gpus, c.algorithm), c)
            if used is not c:  # `choose` takes the first measurement of a shape
                parts.append(
                    f"{c.origin}: the shape {used.origin} measured, not used{_apart(used, c)}"
                )
                continue
            parts.append(
                f"{c.origin} at {c.nodes} node(s) x {c.gpus} ({c.terms()}"
                + _choices_said(c)
                + _reached(system, c)
                + _slow(c)
                + ")"
            )
        shapes = "; ".join(parts)
        growth = ""
        for (gpus, _), group in _pairable(found, system).items():
            counts = sorted({c.nodes for c in group})
            if len(counts) > 1:
                listed = ", ".join(str(n) for n in counts[:-1]) + f" and {counts[-1]}"
                growth = (
                    f"; measured across nodes at {listed} nodes x {gpus}: a size measured at "
                    "the two counts nearest a row is carried along NCCL's model between them, "
                    "where NCCL keeps its algorithm and protocol"
                )
        lines.append(
            f"{op} {dtype} calibrated by {shapes}; other shapes with NCCL's structure on "
            f"{system.name}{growth}"
        )
    crossed = [crosses(system, c.nodes, c.gpus) for cs in calibrations.values() for c in cs]
    if crossed and all(crossed):
        lines.append(
            "every measurement crossed nodes: inside one NVLink domain the preset alone (a "
            "network's costs say nothing of NVLink; measure one node to calibrate it)"
        )
    if crossed and not any(crossed):
        lines.append(
            "the run crossed no network: across nodes the preset alone (measure 2 nodes, or "
            "import their nccl-tests logs, to calibrate the network)"
        )
    return lines


def _apart(used: Calibration, other: Calibration) -> str:
    """How far a second measurement of a shape is from the one used, where it is 1.5x or
    more at some size both measured."""
    mine = dict(used.measured)
    ratios = [(max(t / mine[s], mine[s] / t), s) for s, t in other.measured if s in mine]
    if not ratios or max(ratios)[0] < 1.5:
        return ""
    ratio, size = max(ratios)
    return (
        f" (the two differ {ratio:.1f}x at {format_size(size)}: measure again, or calibrate "
        "with the one that holds)"
    )


def _choices_said(c: Calibration) -> str:
    """Where the algorithm at the measured sizes came from: NCCL's TUNING lines or the model."""
    if not c.choices:
        return (
            "; at the measured sizes too the algorithm is the model's pick: nothing said NCCL's "
            "own (nccl-tests with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING does)"
        )
    rest = "" if _all_said(c) else ", at the other measured sizes the model's pick"
    return f"; NCCL's own algorithm at {len(c.choices)} size(s), its TUNING lines{rest}"


def _all_said(c: Calibration) -> bool:
    """Whether NCCL said its own algorithm at every measured size."""
    return {size for size, _ in c.choices} >= {size for size, _ in c.measured}


def _slow(c: Calibration) -> str:
    """The sizes the measurement carries that took STEP x a larger size's time (the report's
    slow sizes): the anomaly of that shape, carried as measured (on published results such
    sizes stay slow at other node counts on one system and not on another)."""
    found = []
    for size, time in c.measured:
        larger = [(u, r) for r, u in c.measured if r > size and time > STEP * u]
        if larger:
            fastest, at = min(larger)
            found.append(f"{format_size(size)} {time / fastest:.1f}x {format_size(at)}'s time")
    if not found:
        return ""
    return f"; carried as measured, slow sizes: {', '.join(found)} (see the findings)"


def _reached(system: System, c: Calibration) -> str:
    """What the bus reached across nodes against the NICs' line rate, for the notes."""
    got = nic_reach(system, c.op, c.nodes, c.gpus, list(c.measured))
    if got is None:
        return ""
    size, busbw, line = got
    above = (
        f" (a ring cannot pass them: not {system.name}'s NICs?)" if busbw > NIC_OVER * line else ""
    )
    return (
        f"; busbw {busbw:.1f} GB/s at {format_size(size)}, {busbw / line:.0%} of a node's NICs' "
        f"{line:g} GB/s{above}"
    )


def measured_calibrations(
    analyzed: Analyzed, also: tuple[Analyzed, ...], system: System | None, same: bool
) -> dict[tuple[str, str], list[Calibration]]:
    """Per op and dtype, the calibrations of the run (where it measured the system's GPUs) and
    of every `--calibrate-with` run; a UsageError names one that did not measure them."""
    calibrations: dict[tuple[str, str], list[Calibration]] = {}
    if system is not None and same and analyzed.has(COLLECTIVES):
        calibrations = calibrations_of(analyzed, system)
    seen = {_where(analyzed)}
    for extra in also:
        if _where(extra) in seen:  # the same run given twice calibrates once
            continue
        seen.add(_where(extra))
        if system is None or not same_hardware(extra, system) or not extra.has(COLLECTIVES):
            raise UsageError(
                f"--calibrate-with {extra.info.get('run_id')}: it did not measure the "
                f"collectives on {system.gpu if system else 'the system (give --hardware)'}",
                "give runs of the same system's GPUs",
            )
        for key, found in calibrations_of(extra, system).items():
            calibrations.setdefault(key, []).extend(found)
    return calibrations


def _where(analyzed: Analyzed) -> object:
    """What tells two runs apart: their folder, else the object itself."""
    path = getattr(analyzed.run, "path", None)
    return Path(path).resolve() if path is not None else id(analyzed)
