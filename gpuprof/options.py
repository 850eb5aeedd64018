"""Click options made from the registry's declarations, for `gpuprof sweep`, `gpuprof run
<probe>` and the rank-side `torchrun -m gpuprof.probes.<probe>` mains."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from gpuprof import registry
from gpuprof.registry import ITERATION_OPTIONS, Option

F = TypeVar("F", bound=Callable[..., Any])


def stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply decorators in the order written (the first is outermost)."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def click_option(option: Option) -> Callable[[F], F]:
    """One declared option as a click option whose default None means "not given"."""
    flags = [f"{option.flag}/--no-{option.flag[2:]}" if option.boolean else option.flag]
    if option.short:
        flags.append(option.short)
    kind = click.Choice(list(option.type)) if isinstance(option.type, tuple) else option.type
    return click.option(*flags, option.name, type=kind, default=None, help=option.help)


def _decorate(options: Iterable[Option]) -> Callable[[F], F]:
    return stack(*(click_option(o) for o in options))


def probe_options(name: str) -> Callable[[F], F]:
    """The options of one probe, iteration options included."""
    return _decorate((*registry.get(name).options, *ITERATION_OPTIONS))


def all_probe_options(func: F) -> F:
    """Every probe's options (for `gpuprof sweep`)."""
    return _decorate(registry.all_options())(func)


def pop_probe_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove every probe option from a command's kwargs."""
    return {key: kwargs.pop(key) for key in registry.option_names() if key in kwargs}


def out_option(func: F) -> F:
    """--out: the folder that holds the runs."""
    return click.option(
        "--out",
        default="reports",
        show_default=True,
        type=click.Path(),
        help="folder that holds the runs",
    )(func)
