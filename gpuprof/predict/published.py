"""Published nccl-tests results of real clusters (data/published.tsv: system, preset, ranks,
op, size, metric, value, the NCCL version, the source's URL and a quote of the row) and what
NCCL's model predicts for each: the set the predictor is validated on (docs/validation.md),
also drawn in the report beside the model's curves; and results of one system at several node
counts (data/published_scales.tsv), predicted held out by scale: calibrated at the smallest
node count, scored at the larger ones. Stdlib only."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from gpuprof.machine.systems import PRESETS, load_system, nccl_version_in
from gpuprof.predict import nccl
from gpuprof.predict.calibrate import at_gpus as calibration_system
from gpuprof.predict.calibrate import calibrate, choose, partner
from gpuprof.predict.calibrate import predict as predict_calibrated
from gpuprof.predict.nccl import collective
from gpuprof.predict.nccl_tuning import ALGOS
from gpuprof.units import bus_factor

DATA = Path(__file__).resolve().parent / "data" / "published.tsv"
BOUND = 0.15  # the error bound the validation counts rows within
LARGE = 256 << 20  # sizes from here up are bandwidth-bound


@dataclass(frozen=True)
class Checked:
    """One published row, what the model predicts for it, and the algorithm/protocol chosen."""

    row: dict[str, str]
    predicted: float
    choice: str

    @property
    def published(self) -> float:
        return float(self.row["value"])

    @property
    def error(self) -> float:
        """Predicted / published - 1."""
        return self.predicted / self.published - 1


def rows(path: Path = DATA) -> list[dict[str, str]]:
    """The published rows, as the file has them."""
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def predicted(row: dict[str, str]) -> tuple[float, str]:
    """The row's metric as the model predicts it on the row's preset running the row's NCCL
    version (the algorithm forced only where the source states it), and the
    algorithm/protocol it chose."""
    system = replace(PRESETS[row["preset"]], nccl=nccl_version_in(row["nccl_version"]))
    if row["collnet"] == "yes":
        system = replace(system, collnet=True)
    got = collective(
        system, row["op"], int(row["ranks"]), float(row["size_bytes"]), row["algorithm"] or None
    )
    value = got.time_us if row["metric"] == "time_us" else got.busbw_gbps
    return value, f"{got.algorithm}/{got.protocol}"


@cache
def checked() -> tuple[Checked, ...]:
    """Every published row with its prediction."""
    return tuple(Checked(row, *predicted(row)) for row in rows())


SCALES = DATA.parent / "published_scales.tsv"
SIZE_CLASSES = (("small (< 1 MiB)", 0, 1 << 20), ("mid (1-256 MiB)", 1 << 20, LARGE),
                ("large (>= 256 MiB)", LARGE, 1 << 62))  # fmt: skip


@dataclass(frozen=True)
class HeldOut:
    """One published row at a larger node count than its system's calibration, predicted
    from that calibration and from the preset alone (times, us)."""

    row: dict[str, str]
    published: float
    calibrated: float
    preset: float
    calibrated_at: int  # the node count that calibrated it
    carried: bool = False  # carried between two measured counts (calibrate.grown)

    @property
    def error(self) -> float:
        return self.calibrated / self.published - 1

    @property
    def preset_error(self) -> float:
        return self.preset / self.published - 1

    @property
    def size_class(self) -> str:
        size = int(self.row["size_bytes"])
        return next(name for name, low, high in SIZE_CLASSES if low <= size < high)


@cache
def scale_rows() -> tuple[dict[str, str], ...]:
    """The rows of data/published_scales.tsv, read once (the report draws them)."""
    return tuple(rows(SCALES))


def published_time(row: dict[str, str]) -> float:
    """The row's time, us: as published, or from its busbw (nccl-tests' bus factor)."""
    if row["time_us"]:
        return float(row["time_us"])
    ranks = int(row["nodes"]) * int(row["gpus_per_node"])
    return bus_factor(row["op"], ranks) * float(row["size_bytes"]) / float(row["busbw_gbps"]) / 1e3


def series_key(row: dict[str, str]) -> tuple[str, ...]:
    """One system, op, GPUs per node and forced algorithm: what one calibration covers."""
    return (row["system"], row["preset"], row["op"], row["gpus_per_node"], row["algorithm"])


def series_nccl(members: list[dict[str, str]], calibrating: list[int]) -> str:
    """The NCCL version a series ran: its rows' one, else its calibration rows' one, else ""
    (the newest rules)."""
    found = {nccl_version_in(r["nccl_version"]) for r in members}
    if len(found) > 1:
        calibration = [r for r in members if int(r["nodes"]) in calibrating]
        found = {nccl_version_in(r["nccl_version"]) for r in calibration}
    return found.pop() if len(found) == 1 else ""


def held_out(path: Path = SCALES, scales: int = 1) -> tuple[list[HeldOut], list[str]]:
    """Every published row of a system measured at two or more node counts, predicted from
    the system's smallest node count that crossed nodes (its rows calibrate, none is scored),
    beside the preset alone; and why rows were left out. One node's rows calibrate one node
    only (they crossed no network), so they are neither a calibration across nodes nor scored.
    With `scales` 2: the two smallest node counts across nodes calibrate (each row from the
    nearest, with the growth between the two where it applies, as `predict --calibrate-with`
    does), for systems with a third to score.
    The preset runs the series' NCCL version (`series_nccl`). Nothing is fitted to a scored row."""
    series: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows(path):
        series.setdefault(series_key(row), []).append(row)
    scored: list[HeldOut] = []
    left: list[str] = []
    for key, members in series.items():
        system_name, preset, op, gpus_text, algorithm = key
        gpus = int(gpus_text)
        counts = sorted({int(r["nodes"]) for r in members if int(r["nodes"]) > 1})
        if len(counts) < scales + 1:
            continue
        system = replace(load_system(preset), nccl=series_nccl(members, counts[:scales]))
        if any(r["collnet"] == "yes" for r in members if int(r["nodes"]) in counts[:scales]):
            system = replace(system, collnet=True)
        base = counts[scales - 1]
        forced = algorithm if algorithm in ALGOS else None
        if algorithm and forced is None:
            left.append(f"{system_name[:40]} {op} {algorithm}: not in the model")
            continue
        founds = []
        for count in counts[:scales]:
            points = {
                int(r["size_bytes"]): published_time(r) for r in members if int(r["nodes"]) == count
            }
            got = calibrate(
                system, op, "float32", count, gpus, sorted(points.items()), system_name, forced
            )
            if got is not None:
                founds.append(got)
        if len(founds) < scales:
            left.append(f"{system_name[:40]} {op} {algorithm}: the model cannot calibrate it")
            continue
        for row in members:
            nodes = int(row["nodes"])
            if nodes <= base:
                continue
            size = float(row["size_bytes"])
            target = calibration_system(system, gpus)
            alone = nccl.collective(target, op, nodes * gpus, size, forced)
            chosen = choose(founds, nodes, gpus, system)
            answer = None
            if chosen:
                other = partner(founds, chosen, nodes, system)
                answer = predict_calibrated(system, chosen, nodes, gpus, size, other)
            at = chosen.nodes if chosen else base
            got_us = answer.time_us if answer else alone.time_us
            carried = bool(answer and answer.between)
            scored.append(HeldOut(row, published_time(row), got_us, alone.time_us, at, carried))
    return scored, left
