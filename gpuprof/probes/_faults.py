"""Test-only fault hooks, off unless their variable is set: a rank that perturbs its inputs
(wrong elements), and a rank that raises inside a case (a failing rank, its traceback)."""

from __future__ import annotations

import fnmatch
import os

FAULT_ENV = "GPUPROF_FAULT_RANK"  # this rank perturbs its inputs before each check
RAISE_ENV = "GPUPROF_FAULT_RAISE"  # "<rank>:<probe>/<case glob>": that rank raises there


def fault_rank() -> int | None:
    """The rank the test-only fault hook perturbs, if any."""
    value = os.environ.get(FAULT_ENV)
    return int(value) if value else None


def raise_if_asked(rank: int, probe: str, case_id: str) -> None:
    """Raise in the case GPUPROF_FAULT_RAISE names, on the rank it names."""
    value = os.environ.get(RAISE_ENV)
    if not value:
        return
    target, _, pattern = value.partition(":")
    if int(target) == rank and fnmatch.fnmatchcase(f"{probe}/{case_id}", pattern or "*"):
        raise RuntimeError(f"test fault: {RAISE_ENV}={value}")
