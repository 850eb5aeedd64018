"""One summary per probe table, as `gpuprof show` prints it: dispatched by the registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from gpuprof import registry
from gpuprof.analysis import RunTables
from gpuprof.analysis.health import attribute, case_windows
from gpuprof.runs.saved import save_summary, saved_summary

T = TypeVar("T")


def summarize_run(run: RunTables, probe: str) -> pd.DataFrame:
    """The summary of probe `probe` in `run` (one row per case and group or device): the one
    the report saved with the run's tables where it is current, else computed."""
    saved = _saved(run, probe)
    return saved if saved is not None else computed_summary(run, probe)


def computed_summary(run: RunTables, probe: str) -> pd.DataFrame:
    """The summary of probe `probe`, computed from the run's tables."""
    summarizer: Any = registry.load(registry.get(probe).summarize)
    summary = summarizer(run)
    assert isinstance(summary, pd.DataFrame)
    return summary


def _folder(run: RunTables) -> Path | None:
    """The folder of a run whose tables were written (a summary can be saved with them)."""
    path = getattr(run, "path", None)
    return Path(path) if path is not None and getattr(run, "consolidated", False) else None


def _saved(run: RunTables, probe: str) -> pd.DataFrame | None:
    folder = _folder(run)
    return saved_summary(folder, probe) if folder is not None else None


class Analyzed:
    """A run with its summaries computed once each (the report's sections and the advice
    share them)."""

    def __init__(self, run: RunTables) -> None:
        self.run = run
        self.info = run.info
        self._summaries: dict[str, pd.DataFrame] = {}
        self._computed: set[str] = set()
        self._cache: dict[str, Any] = {}

    def has(self, *tables: str) -> bool:
        """Whether the run has every one of `tables`."""
        return all(t in self.run.tables() for t in tables)

    def summary(self, probe: str) -> pd.DataFrame:
        """The probe's summary (saved with the run, or computed on first use)."""
        if probe not in self._summaries:
            saved = _saved(self.run, probe)
            if saved is None:
                saved = computed_summary(self.run, probe)
                self._computed.add(probe)
            self._summaries[probe] = saved
        return self._summaries[probe]

    def measured(self, probe: str) -> pd.DataFrame | None:
        """The probe's summary when the run measured any of its cases, else None."""
        if not self.has(*registry.get(probe).table_names):
            return None
        summary = self.summary(probe)
        return None if summary.empty else summary

    def save_summaries(self) -> None:
        """Save the summaries computed here with the run's tables (the report does: `show`,
        `predict` and the gate then read them instead of the tables)."""
        folder = _folder(self.run)
        if folder is None:
            return
        for probe in sorted(self._computed):
            save_summary(folder, probe, self._summaries[probe])

    def cached(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()` once per run for `key` (a table several sections and rules share)."""
        if key not in self._cache:
            self._cache[key] = compute()
        result: T = self._cache[key]
        return result

    def timed_tables(self) -> dict[str, pd.DataFrame]:
        """Every table with case time windows (what telemetry is attributed to)."""
        frames = {t: self.run.table(t) for t in self.run.tables() if t != "telemetry"}
        return {t: f for t, f in frames.items() if "end_unix_ns" in f.columns}

    def attributed(self) -> pd.DataFrame:
        """Each case's telemetry (NIC bytes, throttling), computed once; empty without it."""

        def compute() -> pd.DataFrame:
            if "telemetry" not in self.run.tables():
                return pd.DataFrame()
            telemetry = self.run.table("telemetry")
            tables = self.timed_tables()
            if not tables:
                return pd.DataFrame()
            # every table's windows at once: each host's samples are prepared once
            windows = [w for w in (case_windows(t) for t in tables.values()) if len(w)]
            return (
                attribute(pd.concat(windows, ignore_index=True), telemetry)
                if windows
                else (pd.DataFrame())
            )

        return self.cached("attributed", compute)
