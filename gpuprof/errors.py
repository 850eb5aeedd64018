"""The one exception tree of gpuprof; every user-facing failure is a GpuprofError.

    GpuprofError                 exit 1: a failure (or a regression, for `check`)
    ├── UsageError               exit 2: bad option, bad size, missing run; nothing was touched
    │   └── RunNotFoundError     exit 2: RUN names no run folder
    └── MeasurementError         exit 3: could not measure (a rank died, hung or timed out)

Messages are one line that names the problem and, where there is one, the next step.
"""

from __future__ import annotations


class GpuprofError(Exception):
    """Base of every error gpuprof raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and its next step on one line."""
        text = self.message.replace("\n", " ")
        return f"{text} ({self.hint})" if self.hint else text


class UsageError(GpuprofError):
    """The user asked for something invalid; nothing was measured or written."""

    exit_code = 2


class RunNotFoundError(UsageError):
    """A RUN argument names no run folder."""


class MeasurementError(GpuprofError):
    """Something could not be measured: a rank died, hung, or a case timed out."""

    exit_code = 3
