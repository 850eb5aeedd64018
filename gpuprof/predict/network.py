"""What a prediction's collectives come from: the run's own fits (`FitNetwork`), or a described
system under NCCL's model (`SystemNetwork`), or the run's fits inside one node where they
measured the same hardware and the system elsewhere (`MixedNetwork`). Each says where its
numbers come from (the `source` column of every table)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from gpuprof.errors import UsageError
from gpuprof.machine.systems import System
from gpuprof.predict import calibrate, nccl
from gpuprof.predict.collectives import Collective, Links, WhatIf, apply_links, predict_collective

# the band of a prediction from NCCL's model: its worst error on the bandwidth-bound published
# rows (docs/validation.md)
MODEL_BAND = 0.15
# the band of a calibrated prediction at another shape: the 75th percentile of its error on the
# published results held out by scale (docs/validation.md, benchmarks/predict_published.py;
# the median is 13%; 10 systems, 848 rows, measured 2026-11-29; on InfiniBand and RoCE alone
# the median is 7%, on Slingshot 25%: benchmarks/results/predict_calibration.md)
CALIBRATED_BAND = 0.34
# the band of a prediction carried between two measured node counts (calibrate.grown): the 75th
# percentile of its error on the published results held out past their two smallest counts
# (238 of the 585 rows are carried; median 6.5%; measured 2026-11-29)
GROWN_BAND = 0.16
# both bands by the system's fabric where published rows were measured on it (the same 75th
# percentiles over that group's rows alone, measured 2026-11-29): InfiniBand and RoCE (NCCL's
# IB transport over RDMA verbs; 411 rows of 8 systems from one count, 66 carried), Slingshot
# (437 rows of 2 systems, 172 carried); other fabrics keep the bands of all rows
FABRIC_GROUPS = {
    "infiniband": "InfiniBand and RoCE",
    "roce": "InfiniBand and RoCE",
    "slingshot": "Slingshot",
}
FABRIC_BANDS = {"InfiniBand and RoCE": (0.15, 0.07), "Slingshot": (0.48, 0.20)}
# the band of the preset alone across NVLink domains: the 75th percentile of its error on the
# same held-out rows (every size; measured 2026-11-29), by fabric group, else of all rows
# (MODEL_BAND, from large sizes, is for one domain)
PRESET_BAND = 0.61
PRESET_BANDS = {"InfiniBand and RoCE": 0.31, "Slingshot": 0.71}


def preset_band(system: System) -> float:
    """The band of the preset alone across NVLink domains of `system`."""
    return PRESET_BANDS.get(FABRIC_GROUPS.get(system.fabric, ""), PRESET_BAND)


def bands(system: System) -> tuple[float, float, str]:
    """A calibrated row's band from one count, carried between two, and whose published rows
    measured them (the system's fabric group, else all)."""
    group = FABRIC_GROUPS.get(system.fabric)
    if group is None:
        return CALIBRATED_BAND, GROWN_BAND, "all published systems"
    one, two = FABRIC_BANDS[group]
    return one, two, f"{group} systems"


class Network(Protocol):
    """Predicts one collective on nodes x gpus ranks."""

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        """The op on `size` bytes (a UsageError when this network cannot say)."""
        ...

    def changed(self, change: WhatIf) -> Network:
        """The same network with a what-if's links."""
        ...


@dataclass(frozen=True)
class FitNetwork:
    """The run's alpha-beta fits (and a what-if's rates on them)."""

    links: Links
    change: WhatIf | None = None
    source: str = "run"

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        links = apply_links(self.links, self.change, gpus) if self.change else self.links
        found = predict_collective(links, op, nodes, gpus, size, backend)
        return replace(found, source=self.source)

    def changed(self, change: WhatIf) -> FitNetwork:
        if change.nic_gbps is None and change.intra_gbps is None:
            return self
        merged = change if self.change is None else _merged(self.change, change)
        return replace(self, change=merged, source="run + what-if")


def _merged(first: WhatIf, then: WhatIf) -> WhatIf:
    return replace(
        first,
        nic_gbps=then.nic_gbps if then.nic_gbps is not None else first.nic_gbps,
        nics=then.nics if then.nics is not None else first.nics,
        intra_gbps=then.intra_gbps if then.intra_gbps is not None else first.intra_gbps,
    )


@dataclass(frozen=True)
class SystemNetwork:
    """A described system under NCCL's own model (gpuprof.predict.nccl): what NCCL would
    pick for each size, on `gpus` GPUs per node of it."""

    system: System

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        found = nccl.collective(calibrate.at_gpus(self.system, gpus), op, nodes * gpus, size)
        return Collective(
            time_us=found.time_us,
            busbw_gbps=found.busbw_gbps,
            rel=(
                preset_band(self.system)
                if calibrate.crosses(self.system, nodes, gpus)
                else MODEL_BAND
            ),
            algorithm=f"{found.algorithm}/{found.protocol}",
            source=f"preset {self.system.name}",
        )

    def changed(self, change: WhatIf) -> SystemNetwork:
        if change.intra_gbps is not None:
            raise UsageError(
                f"--intra-gbps: NCCL's model on {self.system.name} takes the links inside a "
                "node from the system (its NVLink links), not a rate per link",
                "give --hardware a system file with the node's nvlink_links and nvswitch",
            )
        system = self.system
        if change.nic_gbps is not None:
            system = replace(system, nic_gbps=change.nic_gbps)
        if change.nics is not None:
            system = replace(system, nics_per_node=change.nics)
        return replace(self, system=system)


@dataclass(frozen=True)
class MixedNetwork:
    """The run's fits inside one node (it measured this very hardware), the system across."""

    run: FitNetwork
    system: SystemNetwork

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        if nodes == 1:
            try:
                return self.run.collective(op, nodes, gpus, size, backend)
            except UsageError:  # the run measured nothing inside a node alone: the system's
                pass
        return self.system.collective(op, nodes, gpus, size, backend)

    def changed(self, change: WhatIf) -> MixedNetwork:
        return MixedNetwork(run=self.run.changed(change), system=self.system.changed(change))


@dataclass(frozen=True)
class CalibratedNetwork:
    """NCCL's model on the system, calibrated by what the run measured on it (its latency
    and transfer per size, gpuprof.predict.calibrate); where no measurement applies (one node
    measured, more predicted), `fallback` and a note say so."""

    system: System
    calibrations: tuple[calibrate.Calibration, ...]
    fallback: Network

    def collective(self, op: str, nodes: int, gpus: int, size: float, backend: str) -> Collective:
        pool = list(self.calibrations)
        chosen = calibrate.choose(pool, nodes, gpus, self.system)
        if chosen is None:
            return self.fallback.collective(op, nodes, gpus, size, backend)
        other = calibrate.partner(pool, chosen, nodes, self.system)
        got = calibrate.predict(self.system, chosen, nodes, gpus, size, other)
        counts = got.between or (chosen.nodes,)
        one, grown, _ = bands(self.system)
        shape = "-".join(f"{n}x{chosen.gpus}" for n in counts)
        return Collective(
            time_us=got.time_us,
            busbw_gbps=got.busbw_gbps,
            rel=0.0 if got.measured else grown if got.between else one,
            algorithm=f"{got.choice.algorithm}/{got.choice.protocol}",
            source=f"measured {shape}" if got.measured else f"{shape} + {self.system.name}",
            terms=got.terms,
        )

    def changed(self, change: WhatIf) -> Network:
        """A what-if changes the system: the measurement no longer describes it."""
        if change.nic_gbps is None and change.nics is None and change.intra_gbps is None:
            return self
        return self.fallback.changed(change)
