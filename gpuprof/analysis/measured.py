"""A run's metrics as a measured set: for every case and metric the probes declare in the
registry (`Metric`: summary column, which way is better, key columns), the run's value (the
probe's summary) and a sample of per-iteration values. The regression gate compares these sets
(`gpuprof.gate.stats`); a baseline file stores one. Pure pandas, no torch."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.analysis import RunTables, grouped
from gpuprof.analysis.health import CASE_KEYS
from gpuprof.analysis.summary import Analyzed
from gpuprof.units import format_size

SAMPLE_SLOTS = 20  # iterations per run and case whose values are kept as samples
VALUE_COLUMNS = [
    "probe",
    "metric",
    "better",
    "key",
    "case",
    "run",
    "value",
    "throttled",
    "nwrong",
    "canary",  # the case's canary (`Metric.canary`), NaN where it has none
]
SAMPLE_COLUMNS = ["probe", "metric", "key", "value"]


@dataclass(frozen=True)
class Measured:
    """Metric values of one or more runs: `values` one row per run and case-metric,
    `samples` per-iteration values (any number per case-metric)."""

    values: pd.DataFrame
    samples: pd.DataFrame

    @property
    def num_runs(self) -> int:
        return int(self.values["run"].nunique()) if len(self.values) else 0

    @staticmethod
    def combine(parts: list[Measured]) -> Measured:
        """Several runs' sets as one, runs numbered in order."""
        values, samples = [], []
        for index, part in enumerate(parts):
            values.append(part.values.assign(run=index))
            samples.append(part.samples)
        return Measured(
            values=pd.concat(values, ignore_index=True) if values else _empty(VALUE_COLUMNS),
            samples=pd.concat(samples, ignore_index=True) if samples else _empty(SAMPLE_COLUMNS),
        )


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def _plain(value: Any) -> Any:
    """A key value as JSON keeps it: numpy scalars unwrapped, NaN as None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def case_key(values: Mapping[Any, Any]) -> str:
    """The canonical identity of a case across runs (JSON of its key columns)."""
    return json.dumps({k: _plain(v) for k, v in values.items()}, sort_keys=True)


def case_label(probe: str, keys: Mapping[Any, Any]) -> str:
    """'collectives all_reduce float32 sum 1 MiB in-place global all n=2': the key values, in
    the order the metric lists them, in a readable line."""
    parts = [probe]
    for name, value in keys.items():
        value = _plain(value)
        if value is None or value == "none":  # e.g. the reduce op of an op that does not reduce
            continue
        if name == "size_bytes":
            parts.append(format_size(value))
        elif name == "in_place":
            parts.append("in-place" if value else "out-of-place")
        elif name in ("world_size", "rank", "n"):
            parts.append(f"{'n' if name == 'world_size' else name}={value}")
        else:
            parts.append(str(value))
    return " ".join(parts)


def _keys_present(frame: pd.DataFrame, keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if k in frame.columns]


class _Slot:
    """A run whose probe tables hold one sampled iteration of every case: the probe's own
    summarizer over it gives that iteration's value of every metric."""

    def __init__(
        self, run: RunTables, frames: dict[str, dict[int, pd.DataFrame]], slot: int
    ) -> None:
        self.info = run.info
        self._run, self._frames, self._slot = run, frames, slot

    def tables(self) -> list[str]:
        return self._run.tables()

    def table(self, name: str) -> pd.DataFrame:
        by_slot = self._frames.get(name)
        if by_slot is None:
            return self._run.table(name)
        return by_slot.get(self._slot, by_slot[-1].iloc[:0])


def _split_slots(frame: pd.DataFrame, slots: int) -> dict[int, pd.DataFrame]:
    """A table's sampled rows by sample slot, each slot's rows taken once (-1: the table
    without rows). Neither the table copied nor its rows that no slot samples: at 1,024 ranks
    a copy of the collectives table and then all its rows split by slot took over 24 GB, and
    `baseline` was killed for it."""
    slot = sample_slots(frame, slots)
    sampled = np.flatnonzero(slot >= 0)
    order = sampled[np.argsort(slot[sampled], kind="stable")]  # by slot, in table order
    bounds = np.searchsorted(slot[order], np.arange(slots + 1))
    parts = {k: frame.iloc[order[lo:hi]] for k, (lo, hi) in enumerate(pairwise(bounds)) if hi > lo}
    parts[-1] = frame.iloc[:0]
    return parts


def sample_slots(frame: pd.DataFrame, slots: int) -> np.ndarray:
    """Each row's sample slot: iteration i of a case of n iterations is slot k when it is the
    k-th of `slots` iterations spread evenly over the n (-1: not sampled)."""
    case = [c for c in ("probe", "case_id", "scope", "world_size", "group") if c in frame]
    it = frame["iteration"].to_numpy(np.int64)
    codes = grouped(frame, case)[0] if case else np.zeros(len(frame), dtype=np.int64)
    n = pd.Series(it).groupby(codes).transform("max").to_numpy(np.int64) + 1
    spread = n > slots
    k = np.where(spread, np.rint(it * (slots - 1) / np.clip(n - 1, 1, None)), it)
    back = np.where(spread, np.rint(k * (n - 1) / (slots - 1)), it)
    return np.where(back == it, k, -1).astype(np.int64)


def _summary_values(summary: pd.DataFrame, spec: registry.ProbeSpec) -> pd.DataFrame:
    """Long form of a summary: probe, metric, better, key, value (one row per case-metric)."""
    rows = []
    for metric in spec.metrics:
        if metric.column not in summary.columns:
            continue
        keys = _keys_present(summary, metric.keys)
        canaries = (
            summary["canary"].to_numpy(float)
            if metric.canary and "canary" in summary.columns
            else np.full(len(summary), np.nan)
        )
        records = summary[[*keys, metric.column]].to_dict("records")
        for rec, canary in zip(records, canaries, strict=True):
            value = _plain(rec.pop(metric.column))
            if value is None:
                continue
            rows.append(
                {
                    "probe": spec.name,
                    "metric": metric.column,
                    "better": metric.better,
                    "key": case_key(rec),
                    "case": case_label(spec.name, rec),
                    "value": float(value),
                    "canary": float(canary) if canary > 0 else np.nan,
                }
            )
    return pd.DataFrame(rows)


def _case_flags(
    analyzed: Analyzed, spec: registry.ProbeSpec, summary: pd.DataFrame
) -> dict[tuple[str, str], tuple[bool, float]]:
    """(metric, key) -> (throttled during the case, wrong elements) for one probe."""
    flags: dict[tuple[str, str], tuple[bool, float]] = {}
    attributed = analyzed.attributed()
    raw = analyzed.run.table(spec.table_names[0])
    for metric in spec.metrics:
        keys = _keys_present(summary, metric.keys)
        throttled: dict[str, bool] = {}
        joinable = [k for k in keys if k in raw.columns]
        if len(attributed) and "throttled" in attributed and joinable == keys:
            on = CASE_KEYS
            merged = raw[[*set(keys) | set(on)]].merge(attributed[[*on, "throttled"]], on=on)
            if len(merged):
                by = merged.groupby(keys, dropna=False)["throttled"].any()
                for index, value in by.items():
                    parts = index if isinstance(index, tuple) else (index,)
                    throttled[case_key(dict(zip(keys, parts, strict=True)))] = bool(value)
        for rec in summary[[*keys, *(["nwrong"] if "nwrong" in summary else [])]].to_dict(
            "records"
        ):
            wrong = _plain(rec.pop("nwrong", None))
            key = case_key(rec)
            flags[(metric.column, key)] = (
                throttled.get(key, False),
                float("nan") if wrong is None else float(wrong),
            )
    return flags


def measure_run(run: RunTables, slots: int = SAMPLE_SLOTS) -> Measured:
    """Every registered metric of every probe the run has: the summary's value per case and
    up to `slots` per-iteration values (the probe's summarizer over each sampled iteration)."""
    analyzed = Analyzed(run)
    values, samples = [], []
    for name, spec in registry.specs().items():
        if not spec.metrics or not analyzed.has(*spec.table_names):
            continue
        summary = analyzed.summary(name)
        long = _summary_values(summary, spec)
        if long.empty:
            continue
        flags = _case_flags(analyzed, spec, summary)
        long["throttled"] = [
            flags.get((m, k), (False, 0))[0]
            for m, k in zip(long["metric"], long["key"], strict=True)
        ]
        long["nwrong"] = [
            flags.get((m, k), (False, float("nan")))[1]
            for m, k in zip(long["metric"], long["key"], strict=True)
        ]
        values.append(long.assign(run=0))
        samples.append(_iteration_samples(run, spec, slots))
    return Measured(
        values=pd.concat(values, ignore_index=True)[VALUE_COLUMNS]
        if values
        else _empty(VALUE_COLUMNS),
        samples=pd.concat(samples, ignore_index=True) if samples else _empty(SAMPLE_COLUMNS),
    )


def _iteration_samples(run: RunTables, spec: registry.ProbeSpec, slots: int) -> pd.DataFrame:
    """Per-iteration metric values: the probe's summarizer over one sampled iteration of every
    case at a time. A probe whose summarizer cannot summarize one iteration gives none."""
    frames: dict[str, dict[int, pd.DataFrame]] = {}
    for name in spec.table_names:
        frame = run.table(name)
        if "iteration" in frame.columns and len(frame):
            frames[name] = _split_slots(frame, slots)
    if not frames:
        return _empty(SAMPLE_COLUMNS)
    summarizer: Any = registry.load(spec.summarize)
    parts = []
    for slot in range(slots):
        view = _Slot(run, frames, slot)
        if all(view.table(n).empty for n in frames):
            break
        try:
            summary = summarizer(view)
        except Exception:
            return _empty(SAMPLE_COLUMNS)
        long = _summary_values(summary, spec)
        if not long.empty:
            parts.append(long[SAMPLE_COLUMNS])

    return pd.concat(parts, ignore_index=True) if parts else _empty(SAMPLE_COLUMNS)
