"""What the probes' one checked iteration compares against: a byte pattern that names its
source, and the count of elements that differ, both cheap at any size.

A copy of 256 MiB checked with `(torch.arange(n, dtype=int32) % 251)` and `(a != b).sum()`
spent about 3.5 s of host time per case (one thread) on an H100 box, against 0.5 s of copies;
repeating one period of the pattern and comparing with `torch.equal` first take a tenth of it.
"""

from __future__ import annotations

import torch

PERIOD = 251  # prime: a shifted or truncated copy does not line up with the pattern by chance


def byte_pattern(count: int, source: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """`count` bytes where byte i is (i + 7 * source) % 251, built on `device`."""
    period = (torch.arange(PERIOD, dtype=torch.int32, device=device) + 7 * source) % PERIOD
    repeats = -(-count // PERIOD)
    return period.to(torch.uint8).repeat(repeats)[:count].contiguous()


def count_wrong(actual: torch.Tensor, expected: torch.Tensor) -> int:
    """Elements of `actual` that differ from `expected` (same device); 0 at memcmp speed."""
    if torch.equal(actual, expected):
        return 0
    return int((actual != expected).sum().item())
