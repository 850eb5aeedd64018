"""A run in Prometheus' text exposition format, for node_exporter's textfile collector (and any
scraper): gauges in base units (bytes per second, seconds, FLOP per second, ratios), named
`gpuprof_<what>_<unit>`, each sample labelled with the run, its GPU model (or CPU) and where it
was measured. One HELP and one TYPE line per metric; label values escaped as the format says
(backslash, double quote, newline)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from gpuprof import registry
from gpuprof.analysis import gpu_model
from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.runs.store import open_run
from gpuprof.specs.collectives import SPEC as COLLECTIVES
from gpuprof.specs.compute import SPEC as COMPUTE
from gpuprof.specs.ddp import SPEC as DDP
from gpuprof.specs.memory import SPEC as MEMORY
from gpuprof.specs.p2p import SPEC as P2P
from gpuprof.specs.pipeline import SPEC as PIPELINE

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


def _records(analyzed: Analyzed, probe: str) -> list[dict[str, Any]]:
    if not analyzed.has(*_tables(probe)):
        return []
    frame: pd.DataFrame = analyzed.summary(probe)
    return [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]


def _tables(probe: str) -> tuple[str, ...]:
    return registry.get(probe).table_names


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def prometheus_text(analyzed: Analyzed) -> str:
    """Every metric the run has, as one textfile."""
    info = analyzed.info
    base = {
        "run": str(info.get("run_id", "unknown")),
        "gpu_model": gpu_model(info) or "cpu",
    }
    metrics = []
    coll = _records(analyzed, COLLECTIVES.name)
    metrics.append(
        _metric(
            "gpuprof_collective_busbw_bytes_per_second",
            "Collective bus bandwidth (nccl-tests busbw), per op, size and scope.",
            (
                (
                    {
                        "op": r["op"],
                        "dtype": r["dtype"],
                        "size_bytes": r["size_bytes"],
                        "in_place": str(bool(r["in_place"])).lower(),
                        "scope": r["scope"],
                        "ranks": r["world_size"],
                        "group": r["group"],
                    },
                    r["busbw_gbps"] * 1e9,
                )
                for r in coll
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_collective_time_seconds",
            "Median time of one collective, per op, size and scope.",
            (
                (
                    {
                        "op": r["op"],
                        "dtype": r["dtype"],
                        "size_bytes": r["size_bytes"],
                        "in_place": str(bool(r["in_place"])).lower(),
                        "scope": r["scope"],
                        "ranks": r["world_size"],
                        "group": r["group"],
                    },
                    r["time_us"] / 1e6,
                )
                for r in coll
            ),
            base,
        )
    )
    pairs = _records(analyzed, P2P.name)
    metrics.append(
        _metric(
            "gpuprof_p2p_bandwidth_bytes_per_second",
            "Point-to-point bandwidth of a pair of ranks (uni or bidirectional).",
            (
                (
                    {
                        "rank_a": r["rank_a"],
                        "rank_b": r["rank_b"],
                        "host": r["host_a"],
                        "host_b": r["host_b"],
                        "link_class": r["link_class"],
                        "mode": r["mode"],
                    },
                    r["bw_gbps"] * 1e9,
                )
                for r in pairs
                if r["mode"] != "latency"
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_p2p_latency_seconds",
            "Point-to-point one-way latency of a pair of ranks (ping-pong / 2).",
            (
                (
                    {
                        "rank_a": r["rank_a"],
                        "rank_b": r["rank_b"],
                        "host": r["host_a"],
                        "host_b": r["host_b"],
                        "link_class": r["link_class"],
                    },
                    r["latency_us"] / 1e6,
                )
                for r in pairs
                if r["mode"] == "latency"
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_memory_bandwidth_bytes_per_second",
            "Copy bandwidth ceiling per rank and kind of copy.",
            (
                (
                    {"rank": r["rank"], "host": r["host"], "kind": r["kind"]},
                    r["bandwidth_gbps"] * 1e9,
                )
                for r in _records(analyzed, MEMORY.name)
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_matmul_flops_per_second",
            "Dense matmul rate per rank and dtype.",
            (
                (
                    {"rank": r["rank"], "host": r["host"], "dtype": r["dtype"], "n": r["n"]},
                    r["tflops"] * 1e12,
                )
                for r in _records(analyzed, COMPUTE.name)
            ),
            base,
        )
    )
    ddp = _records(analyzed, DDP.name)
    metrics.append(
        _metric(
            "gpuprof_ddp_scaling_efficiency_ratio",
            "DDP weak-scaling efficiency: samples/s(n) / (n x samples/s(1)).",
            (
                (
                    {"variant": r["case_id"], "scope": r["scope"], "ranks": r["world_size"]},
                    r.get("efficiency"),
                )
                for r in ddp
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_ddp_step_seconds",
            "DDP training step (slowest rank, median).",
            (
                (
                    {"variant": r["case_id"], "scope": r["scope"], "ranks": r["world_size"]},
                    r["step_us"] / 1e6,
                )
                for r in ddp
            ),
            base,
        )
    )
    metrics.append(
        _metric(
            "gpuprof_pipeline_bubble_ratio",
            "Measured pipeline bubble: 1 - busy compute / step, mean over ranks.",
            (
                (
                    {
                        "schedule": r["schedule"],
                        "stages": r["p"],
                        "micro_batches": r["m"],
                        "chunks": r["v"],
                    },
                    r["bubble_pct"] / 100,
                )
                for r in _records(analyzed, PIPELINE.name)
            ),
            base,
        )
    )
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
    start, end = _seconds(info.get("created_utc")), _seconds(info.get("finished_utc"))
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
