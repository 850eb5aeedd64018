"""What every probe's parameters share (no torch, no pandas): the iteration fields, their
check, the JSON form they travel in (`plan.json`), and the parsers of option values.

Parameters are frozen keyword-only dataclasses; they travel from the launcher to the ranks as
JSON, so the rank side measures exactly what the user asked for.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, TypeVar, cast

from gpuprof.errors import UsageError

ParamsT = TypeVar("ParamsT", bound="ProbeParams")


class ProbeParams:
    """Base of every probe's parameters: iteration counts and a per-case time budget."""

    warmup_iters: int
    min_iters: int
    max_iters: int
    budget_s: float

    def _check_iterations(self, hint: str | None = None) -> None:
        if self.warmup_iters < 0 or self.min_iters < 1 or self.max_iters < self.min_iters:
            raise UsageError(
                "iteration counts need warmup >= 0 and 1 <= min-iters <= max-iters", hint
            )
        if not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise UsageError("--budget-ms must be a positive number")

    def check_job(self, num_nodes: int, gpus_per_node: int, device: str) -> None:
        """Raise a UsageError when these parameters cannot run on this job (shape, device)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(cast(Any, self))  # every subclass is a dataclass

    @classmethod
    def from_dict(cls: type[ParamsT], data: dict[str, Any]) -> ParamsT:
        """Inverse of to_dict (lists become tuples)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**fields)


def check_choices(kind: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    """A UsageError unless `values` is a non-empty selection of `allowed`."""
    if not values:
        raise UsageError(f"no {kind} given", f"choose from {', '.join(allowed)}")
    for value in values:
        if value not in allowed:
            raise UsageError(f"unknown {kind} {value!r}", f"choose from {', '.join(allowed)}")


def csv(text: str) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c'); an empty list or an empty item is an error."""
    parts = tuple(p.strip() for p in str(text).split(","))
    if not any(parts):
        raise ValueError("an empty list")
    if not all(parts):
        raise ValueError("an empty item")
    return parts


def ints(text: str) -> tuple[int, ...]:
    """'4,8,16' -> (4, 8, 16)."""
    return tuple(int(p) for p in csv(text))


def floats(text: str) -> tuple[float, ...]:
    """'1,1,2' -> (1.0, 1.0, 2.0); nan and inf are refused."""
    return tuple(finite(float(p)) for p in csv(text))


def finite(value: float) -> float:
    """A finite number (nan and inf are refused)."""
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def positive(value: float) -> float:
    """A finite number above zero."""
    if not finite(value) > 0:
        raise ValueError("must be positive")
    return value


def positive_int(value: int) -> int:
    """A whole number above zero."""
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def non_negative_int(value: int) -> int:
    """A whole number of zero or more."""
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def ms_to_s(value: float) -> float:
    """A positive number of milliseconds, in seconds."""
    return positive(value) / 1e3
