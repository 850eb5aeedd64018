"""A run in Prometheus' text exposition format, for node_exporter's textfile collector (and any
scraper): gauges in base units (bytes per second, seconds, FLOP per second, ratios), named
`gpuprof_<what>_<unit>`, each sample labelled with the run, its GPU model (or CPU) and where it
was measured. One HELP and one TYPE line per metric; label values escaped as the format says
(backslash, double quote, newline)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuprof import registry
from gpuprof.analysis import gpu_model
from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.registry import Export, ProbeSpec
from gpuprof.runs.store import open_run, utc_seconds

Sample = tuple[dict[str, Any], float | None]


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric(name: str, help_text: str, samples: Iterable[Sample], base: dict[str, str]) -> str:
    lines = []
    for labels, value in samples:
        if value is None or not math.isfinite(float(value)):
            continue  # missing is absent, never 0
        merged = {**base, **labels}
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in merged.items())
        lines.append(f"{name}{{{text}}} {float(value)!r}")
    if not lines:
        return ""
    return "\n".join([f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *lines])


def _label(value: Any) -> str:
    """A label value as the summary holds it; booleans as Prometheus writes them."""
    return str(value).lower() if isinstance(value, (bool, np.bool_)) else str(value)


def _samples(rows: list[dict[str, Any]], export: Export) -> Iterable[Sample]:
    for row in rows:
        if export.keep is not None and not export.keep(row):
            continue
        value = row.get(export.column)
        labels = {label: _label(row[column]) for label, column in export.labels}
        if value is None or pd.isna(value):
            yield labels, None  # missing: absent from the textfile, never 0
        else:
            yield labels, float(value) * export.scale / export.divisor


def _probe_metrics(analyzed: Analyzed, spec: ProbeSpec, base: dict[str, str]) -> list[str]:
    """Every gauge the probe's spec exports, from its summary (none if it did not run)."""
    if not spec.exports or not analyzed.has(*spec.table_names):
        return []
    frame: pd.DataFrame = analyzed.summary(spec.name)
    rows = [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
    return [_metric(f"gpuprof_{e.name}", e.help, _samples(rows, e), base) for e in spec.exports]


def prometheus_text(analyzed: Analyzed) -> str:
    """Every metric the run has, as one textfile: each probe's exports (its registry entry
    declares them), then the run's own."""
    info = analyzed.info
    base = {
        "run": str(info.get("run_id", "unknown")),
        "gpu_model": gpu_model(info) or "cpu",
    }
    metrics = [
        m for spec in registry.specs().values() for m in _probe_metrics(analyzed, spec, base)
    ]
    status = str(info.get("status", "unknown"))
    hosts = ",".join(str(n.get("host")) for n in info.get("nodes", []))
    metrics.append(
        _metric(
            "gpuprof_run_info",
            "The run: status, device, backend and hosts (value 1).",
            [
                (
                    {
                        "status": status,
                        "device": info.get("device"),
                        "backend": info.get("backend"),
                        "hosts": hosts,
                        "ranks": info.get("world_size"),
                    },
                    1.0,
                )
            ],
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_run_complete",
            "1 if every case of the run completed, else 0.",
            [({}, 1.0 if status == "complete" else 0.0)],
            base,
        )
    )
    start, end = utc_seconds(info.get("created_utc")), utc_seconds(info.get("finished_utc"))
    metrics.append(
        _metric(
            "gpuprof_run_end_timestamp_seconds",
            "When the run ended (Unix time).",
            [({}, end)] if end else [],
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_run_duration_seconds",
            "Wall time of the run.",
            [({}, end - start)] if end and start else [],
            base,
        )
    )
    return "\n".join(m for m in metrics if m) + "\n"


def write_textfile(run_dir: Path, target: Path) -> Path:
    """The run's Prometheus textfile at `target`, written whole or not at all (a temporary
    file beside it, then renamed: node_exporter never reads half a file)."""
    text = prometheus_text(Analyzed(open_run(run_dir)))
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise UsageError(f"cannot write {target}: {exc.strerror}") from None
    return target


def check_textfile_path(path: Path) -> None:
    """Refuse, before anything runs, a --prom-textfile that cannot be written."""
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: {path.parent} is not a folder")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder", "name a .prom file")
