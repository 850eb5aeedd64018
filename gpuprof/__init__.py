"""gpuprof: GPU cluster profiler and scaling analyzer.

Public API (kept honest by tests/test_api.py):

    open_run(spec, out="reports") -> Run     a run folder by path, 'latest' or number
    Run.info, Run.table(name), Run.tables()  run.json and per-iteration DataFrames
    GpuprofError, UsageError, MeasurementError

`open_run` and `Run` load pandas on first use, so `gpuprof.runs.records` stays stdlib-only.
"""

from typing import TYPE_CHECKING, Any

from gpuprof._version import __version__
from gpuprof.errors import GpuprofError, MeasurementError, UsageError
from gpuprof.runs.records import SCHEMA_VERSION

if TYPE_CHECKING:
    from gpuprof.runs.store import Run, open_run


__all__ = [
    "SCHEMA_VERSION",
    "GpuprofError",
    "MeasurementError",
    "Run",
    "UsageError",
    "__version__",
    "open_run",
]


def __getattr__(name: str) -> Any:
    if name in ("Run", "open_run"):
        # deferred: loads pandas
        from gpuprof.runs import store

        return getattr(store, name)
    raise AttributeError(f"module 'gpuprof' has no attribute {name!r}")
