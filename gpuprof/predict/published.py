"""Published nccl-tests results of real clusters (data/published.tsv: system, preset, ranks,
op, size, metric, value, the NCCL version, the source's URL and a quote of the row) and what
NCCL's model predicts for each: the set the predictor is validated on (docs/validation.md),
also drawn in the report beside the model's curves. Stdlib only."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from gpuprof.machine.systems import PRESETS
from gpuprof.predict.nccl import collective

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
    """The row's metric as the model predicts it on the row's preset (the algorithm forced
    only where the source states it), and the algorithm/protocol it chose."""
    system = PRESETS[row["preset"]]
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
