"""Measure small, predict big: NCCL's cost model on a system (gpuprof.predict.nccl) calibrated
by what was measured on it at a small scale (a gpuprof run on its GPUs, or imported nccl-tests
logs), carried to other node counts with NCCL's structure. No torch, no pandas.

From one measured shape (N0 nodes x g GPUs) and one op, for every measured size S the model
at that shape gives the algorithm and protocol NCCL would pick, its latency L0(S) and its
transfer time T0(S) (the rest of its time). Two things are derived, each from the
measurement only:

- the latency scale `lat = median((t0 - bw x T0) / L0)` over the sizes the model calls
  latency-bound (T0 <= L0 / 10): what a message, a step, a hop costs on this system against
  NCCL's constants (its network stack, its PCIe, its software);
- the bandwidth factor `bw(S) = (t0(S) - lat x L0(S)) / T0(S)` at every size whose transfer
  is at least a tenth of the latency (T0 >= L0 / 10): how much longer than the model the bytes
  take at that size (the line rate reached, the protocol switches NCCL made on this system);
  between measured sizes interpolated in log2(size), beyond them the nearest, never below a
  tenth (a measured time under the scaled latency says the latency is over-counted there).
  The two are estimated in turn (three rounds, starting from bw = 1), each without the other's
  share of the time, so a system that is exactly k x NCCL's latency and m x its transfer gives
  back k and m. An all_to_all keeps both against each peer's message (`message`: its buffer
  over the ranks, what the network stack sends and changes protocol on), the latency scale
  per message too.

At another shape the model picks the algorithm and protocol as NCCL would (with its own
constants: NCCL chooses with them too), and the time is `lat x L(S) + bw(S) x T(S)`: ring and
tree hop counts, NVLS-tree, PAT and the channels change with the shape; what the system does
per message and per byte is what was measured. The measured shape itself gives back the
measurement. Nothing is fitted to the shapes predicted.

With a second node count measured across domains (`partner`), a size measured at both is
carried along the model between them (`grown`): the growth with the node count measured, not
NCCL's assumed, where NCCL picks the same algorithm and protocol at both counts and the target.

A measurement inside one NVLink domain (one node; a GB200 rack) calibrates shapes inside one
domain only: it crossed no network. One across domains calibrates every shape across domains
(the nearest measured node count first), and one domain where none was measured there.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, replace

from gpuprof.machine.systems import System
from gpuprof.predict import nccl
from gpuprof.units import bus_factor

LATENCY_BOUND = 0.1  # T0 <= this x L0: the size measures the latency
MIN_FACTOR = 0.1  # the bandwidth factor's floor
ROUNDS = 3  # latency and transfer estimated in turn, each without the other's share
GROWTH_MIN = 0.1  # two counts measure the growth where the model's times differ by this


PER_MESSAGE = ("all_to_all",)  # ops calibrated per message to each peer (`message`)


def message(op: str, size: float, ranks: int) -> float:
    """Where on a calibration's size axis `size` bytes of `op` over `ranks` fall: an
    all_to_all's message to each peer (its buffer over the ranks: what the network stack
    sends, and switches protocol on), every other op's whole buffer."""
    return size / ranks if op in PER_MESSAGE else size


def _log2(size: float) -> float:
    """A size on the calibration's axis (log2 bytes; under a byte counts as one)."""
    return math.log2(max(size, 1.0))


def at_gpus(system: System, gpus: int) -> System:
    """The system with `gpus` of its GPUs per node (its NICs in proportion)."""
    if gpus == system.gpus_per_node:
        return system
    per_node = system.domain == system.gpus_per_node
    return replace(
        system,
        gpus_per_node=gpus,
        nvlink_domain=0 if per_node else system.nvlink_domain,
        nics_per_node=max(1, math.ceil(system.nics_per_node * gpus / system.gpus_per_node)),
    )


def _interpolate(knots: tuple[tuple[float, float], ...], size: float) -> float | None:
    """The factor at `size` between (log2 size, factor) knots, in log2(size); the nearest
    knot's beyond them; None without knots."""
    if not knots:
        return None
    where = _log2(size)
    i = bisect.bisect_left([k[0] for k in knots], where)
    if i == 0:
        return knots[0][1]
    if i == len(knots):
        return knots[-1][1]
    (x0, y0), (x1, y1) = knots[i - 1], knots[i]
    return y0 + (y1 - y0) * (where - x0) / (x1 - x0)


@dataclass(frozen=True)
class Calibration:
    """What one op measured at one shape says about the system (see the module's docstring)."""

    op: str
    dtype: str
    nodes: int
    gpus: int
    measured: tuple[tuple[int, float], ...]  # (size, time_us), by size
    latency_scale: float | None  # None: no latency-bound size was measured
    knots: tuple[tuple[float, float], ...]  # (log2 size, bandwidth factor), by size
    origin: str  # what measured it, for the notes
    algorithm: str | None = None  # forced (NCCL_ALGO) where the measurement forced it
    # (log2 size, what bound the model's transfer there: nccl.Choice.bound), by size
    bounds: tuple[tuple[float, str], ...] = ()
    # all_to_all: (log2 message, latency scale) of each latency-bound size (`message`)
    latency_knots: tuple[tuple[float, float], ...] = ()
    # (size, "algorithm/protocol"): what NCCL said it ran at measured sizes (TUNING lines)
    choices: tuple[tuple[int, str], ...] = ()

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus

    def factor(self, size: float) -> float | None:
        """The bandwidth factor at `size` (None: no size measured the bandwidth)."""
        return _interpolate(self.knots, size)

    def latency(self, size: float) -> float:
        """The latency scale at `size`: per message where one was measured (all_to_all),
        else the one scale."""
        return _interpolate(self.latency_knots, size) or self.latency_scale or 1.0

    def bound(self, size: float) -> str | None:
        """What bound the transfer at the measured size nearest `size` (None: none measured)."""
        if not self.bounds:
            return None
        where = _log2(size)
        return min(self.bounds, key=lambda b: abs(b[0] - where))[1]

    def terms(self, transfer_preset: str = "") -> str:
        """Which terms the measurement gives, for the tables' `terms` column; where the
        transfer comes from the preset at a size, `transfer_preset` says why."""
        lat = f"latency x{self.latency_scale:.2f}" if self.latency_scale else "latency preset"
        if transfer_preset:
            return f"{lat}, transfer preset ({transfer_preset})"
        if not self.knots:
            return f"{lat}, bandwidth preset"
        factors = [k[1] for k in self.knots]
        low, high = min(factors), max(factors)
        bw = f"x{low:.2f}" if math.isclose(low, high, rel_tol=0.05) else f"x{low:.2f}-{high:.2f}"
        return f"{lat}, transfer {bw} ({self.nodes}x{self.gpus} measured)"


def calibrate(
    system: System,
    op: str,
    dtype: str,
    nodes: int,
    gpus: int,
    points: list[tuple[int, float]],
    origin: str,
    algorithm: str | None = None,
    choices: dict[int, str] | None = None,
) -> Calibration | None:
    """The calibration of `op` from its times at nodes x gpus (None with no usable point);
    `algorithm` where the measurement forced one (NCCL_ALGO): then predictions force it too;
    `choices`: NCCL's own algorithm/protocol per measured size where it printed them (each
    size then measures that choice, not the one the model would make)."""
    target = at_gpus(system, gpus)
    usable: dict[int, float] = {}  # a size measured twice: its slowest time
    for s, t in points:
        if s > 0 and math.isfinite(t) and t > 0:
            usable[int(s)] = max(float(t), usable.get(int(s), 0.0))
    points = sorted(usable.items())
    if not points or nodes * gpus < 2:
        return None
    said, used = dict(choices or {}), {}  # used: the measured sizes run as NCCL said
    parts, bounds = [], []
    for size, time in points:
        try:
            choice = _run(target, op, nodes * gpus, size, algorithm, said.get(size))
        except ValueError:  # the model has no such algorithm at this shape
            return None
        if said.get(size) == f"{choice.algorithm}/{choice.protocol}":
            used[size] = said[size]
        at = message(op, size, nodes * gpus)  # the axis the factors are kept on
        parts.append((at, time, choice.latency_us, choice.time_us - choice.latency_us))
        bounds.append((_log2(at), choice.bound))
    bound = [p for p in parts if p[2] > 0 and p[3] <= LATENCY_BOUND * p[2]]
    scale: float | None = None
    knots: tuple[tuple[float, float], ...] = ()
    per_message: tuple[tuple[float, float], ...] = ()
    for _ in range(ROUNDS):  # each estimate without the other's share of the time
        scales = [  # floored as the transfer factor is: a measured latency is never none
            (_log2(at), max((t - (_interpolate(knots, at) or 1.0) * transfer) / lat, MIN_FACTOR))
            for at, t, lat, transfer in bound
        ]
        if scales:
            scale = statistics.median(s for _, s in scales)
        per_message = tuple(scales) if op in PER_MESSAGE else ()
        knots = tuple(
            (
                _log2(at),
                max(
                    (time - (_interpolate(per_message, at) or scale or 1.0) * lat) / transfer,
                    MIN_FACTOR,
                ),
            )
            for at, time, lat, transfer in parts
            if _measures_transfer((at, time, lat, transfer))
        )
    return Calibration(
        op=op,
        dtype=dtype,
        nodes=nodes,
        gpus=gpus,
        measured=tuple(points),
        latency_scale=scale,
        knots=knots,
        origin=origin,
        algorithm=algorithm,
        bounds=tuple(b for b, p in zip(bounds, parts, strict=True) if _measures_transfer(p)),
        latency_knots=per_message,
        choices=tuple(sorted(used.items())),
    )


def _run(
    system: System, op: str, ranks: int, size: float, algorithm: str | None, said: str | None
) -> nccl.Choice:
    """NCCL's model at a measured size: with the algorithm and protocol NCCL said it ran
    (`said`, `tree/LL`) where the model has them on this shape, else its own choice (within
    a forced `algorithm`); a ValueError where the model has no such algorithm at all."""
    if said:
        named, _, protocol = said.partition("/")
        try:
            return nccl.collective(system, op, ranks, size, named, protocol)
        except ValueError:
            pass
    return nccl.collective(system, op, ranks, size, algorithm)


def _measures_transfer(part: tuple[float, float, float, float]) -> bool:
    """Whether a measured size's transfer is long enough to measure the bandwidth."""
    _, _, lat, transfer = part
    return transfer >= LATENCY_BOUND * lat and transfer > 0


@dataclass(frozen=True)
class Calibrated:
    """A predicted collective on a calibrated system."""

    choice: nccl.Choice
    time_us: float
    busbw_gbps: float
    measured: bool  # the measured shape and size itself
    terms: str
    between: tuple[int, ...] = ()  # the two node counts it was carried between (`grown`)


def predict(
    system: System,
    calibration: Calibration,
    nodes: int,
    gpus: int,
    size: float,
    other: Calibration | None = None,
) -> Calibrated:
    """`calibration.op` of `size` bytes on nodes x gpus of `system`, calibrated; with `other`
    (a second node count, `partner`) the growth between the two counts carried where it
    applies (`grown`)."""
    ranks, target = nodes * gpus, at_gpus(system, gpus)
    try:
        choice = nccl.collective(target, calibration.op, ranks, size, calibration.algorithm)
    except ValueError:  # the forced algorithm does not run at this shape: NCCL's own choice
        choice = nccl.collective(target, calibration.op, ranks, size)
    if ranks < 2:  # one GPU moves nothing (NCCL returns at once): nothing to calibrate
        return Calibrated(choice, 0.0, 0.0, False, "one GPU: no communication")
    factor = bus_factor(calibration.op, ranks) * size / 1e3
    if (nodes, gpus) == (calibration.nodes, calibration.gpus):
        for measured_size, time in calibration.measured:
            if measured_size == size:
                return Calibrated(choice, time, factor / time, True, "as measured")
    if other is not None:
        carried = grown(system, calibration, other, nodes, gpus, size, choice)
        if carried is not None:
            low, high = sorted((calibration.nodes, other.nodes))
            terms = f"measured at {low} and {high} nodes, carried along NCCL's growth"
            return Calibrated(choice, carried, factor / carried, False, terms, (low, high))
    at = message(calibration.op, size, ranks)
    lat = calibration.latency(at) * choice.latency_us
    bw, terms = calibration.factor(at) or 1.0, calibration.terms()
    measured_bound = calibration.bound(at)
    if measured_bound is not None and measured_bound != choice.bound:
        # another limit binds here than where it was measured (a send across nodes bound by
        # its channels' rate, measured bound by its NIC): the measurement says nothing of it
        bw, terms = 1.0, calibration.terms(f"{choice.bound or 'links'}-bound here")
    time = lat + bw * (choice.time_us - choice.latency_us)
    return Calibrated(choice, time, factor / time, False, terms)


def crosses(system: System, nodes: int, gpus: int) -> bool:
    """Whether nodes x gpus of `system` span more than one NVLink domain (what NCCL calls a
    node: a node, or the trays of one GB200 rack), so crossed its network."""
    return nodes * gpus > at_gpus(system, gpus).domain


def choose(
    calibrations: list[Calibration], nodes: int, gpus: int, system: System
) -> Calibration | None:
    """The calibration for nodes x gpus of `system`: the measurement at that very shape; else
    one that crossed NVLink domains as the target does (one domain's measurement says nothing
    of the network), the nearest in node count (the one below on a tie), then the same GPUs
    per node; for a target inside one domain, one inside one domain (a measurement across the
    network says nothing of NVLink alone). None where no measurement is on the target's side."""
    across = crosses(system, nodes, gpus)
    pool = [c for c in calibrations if crosses(system, c.nodes, c.gpus) == across]
    if not pool:
        return None

    def rank(c: Calibration) -> tuple[bool, float, bool, bool]:
        distance = abs(math.log2(c.nodes / nodes))
        return ((c.nodes, c.gpus) != (nodes, gpus), distance, c.nodes > nodes, c.gpus != gpus)

    return min(pool, key=rank)


def partner(
    calibrations: list[Calibration], chosen: Calibration, nodes: int, system: System
) -> Calibration | None:
    """The measurement that with `chosen` measures how the op grows with the node count: of
    the same op, algorithm and GPUs per node, at another node count, crossing NVLink domains
    as `chosen` does, the nearest `nodes`. None where there is no such measurement, or
    `chosen` crossed no domain (the growth is the network's)."""
    if not crosses(system, chosen.nodes, chosen.gpus):
        return None
    pool = [
        c
        for c in calibrations
        if (c.op, c.algorithm, c.gpus) == (chosen.op, chosen.algorithm, chosen.gpus)
        and c.nodes != chosen.nodes
        and crosses(system, c.nodes, c.gpus)
    ]
    if not pool:
        return None
    return min(pool, key=lambda c: (abs(math.log2(c.nodes / nodes)), c.nodes > nodes))


def grown(
    system: System,
    one: Calibration,
    two: Calibration,
    nodes: int,
    gpus: int,
    size: float,
    there: nccl.Choice,
) -> float | None:
    """The time of `size` bytes at nodes x gpus from its times measured at two node counts,
    carried along NCCL's model: `t2 + (t2 - t1) (M - M2) / (M2 - M1)` (M: the model's time;
    1, 2: the smaller and larger count), at the same place on the calibration's axis
    (`message`). Only at the GPUs per node both were measured with, where NCCL picks the same
    algorithm and protocol at both counts and at the target, the model's times at the counts
    differ by at least GROWTH_MIN (of the larger count's) and the measured times move the same
    way, at or past the smaller count, and where the result is positive (below the counts a
    line through the two can fall under zero); else None (one count's calibration applies).
    `there`: NCCL's choice at the target, as `predict` made it."""
    op, target = one.op, at_gpus(system, gpus)
    at = message(op, size, nodes * gpus)
    low, high = sorted((one, two), key=lambda c: c.nodes)
    if nodes < low.nodes or not gpus == low.gpus == high.gpus:
        return None
    found = []
    for c in (low, high):
        point = next(
            ((s, t) for s, t in c.measured if math.isclose(message(op, s, c.ranks), at)), None
        )
        if point is None:
            return None
        try:
            choice = _run(target, op, c.ranks, point[0], c.algorithm, dict(c.choices).get(point[0]))
        except ValueError:
            return None
        found.append((point[1], choice))
    (t1, c1), (t2, c2) = found
    if (
        not (c1.algorithm, c1.protocol)
        == (c2.algorithm, c2.protocol)
        == (there.algorithm, there.protocol)
    ):
        return None
    m1, m2 = c1.time_us, c2.time_us
    if abs(m2 - m1) < GROWTH_MIN * m2 or (t2 - t1) / (m2 - m1) <= 0:
        return None
    carried = t2 + (t2 - t1) * (there.time_us - m2) / (m2 - m1)
    return carried if carried > 0 else None
