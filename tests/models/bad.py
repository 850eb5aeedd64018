"""Factories that are wrong in the ways users get them wrong (tests/test_own_model.py)."""

from torch import nn


def wrong_return() -> int:
    return 5


def raises() -> None:
    raise RuntimeError("no weights here")


def fine_but_batch_fails() -> tuple[nn.Module, object]:
    def make_batch(device: object) -> None:
        raise ValueError("the input pipeline is broken")

    return nn.Linear(4, 4), make_batch
