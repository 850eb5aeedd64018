"""The sides of a comparison: a measured set (`gpuprof.analysis.measured`) of one or more runs
of one environment, with the environment's fingerprint (device and its model, the job's
shape, the suite, the software versions) and where its runs came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprof.analysis import gpu_model
from gpuprof.analysis.measured import Measured, measure_run
from gpuprof.errors import UsageError
from gpuprof.runs.store import Run, utc_seconds

# fingerprint fields that must agree for numbers to be comparable (the rest are notes): the
# suite too, since its budgets and iteration counts are part of what a case's number means
MUST_MATCH = ("device", "device_model", "num_nodes", "gpus_per_node", "suite", "model")
# a baseline whose runs span less than this was measured in one window: its spread is the
# runs' noise in that window, not how far a case drifts on its own over the next hours. On a
# shared 2-core VM, against 10 runs made in 3 minutes, 13 of 40 unchanged checks named the DDP
# step, the CPU matmuls or gloo cases, 10-20% apart from the machine factor; against runs
# gathered over 28 minutes, 2 of 60 checks of the next four hours named a case
WINDOW_S = 1200.0


def fingerprint(info: dict[str, Any]) -> dict[str, Any]:
    """What a run's numbers depend on: device and its model (the GPU, or the CPU on CPU runs),
    the job's shape, the suite, the user's model the training probes trained, and the software
    versions."""
    nodes = info.get("nodes") or [{}]
    cpu = (nodes[0].get("cpu") or {}).get("model")
    versions = info.get("versions") or {}
    return {
        "device": info.get("device"),
        "device_model": gpu_model(info) or (cpu if info.get("device") == "cpu" else None),
        "backend": info.get("backend"),
        "num_nodes": info.get("num_nodes"),
        "gpus_per_node": info.get("gpus_per_node"),
        "world_size": info.get("world_size"),
        "suite": info.get("suite"),
        "model": info.get("model"),  # the user's (--model), None for the synthetic one
        "versions": {
            k: versions.get(k) for k in ("gpuprof", "torch", "cuda", "nccl", "driver", "python")
        },
    }


def differences(a: dict[str, Any], b: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    """'device cpu != cuda' for each field that differs."""
    return [f"{f} {a.get(f)} != {b.get(f)}" for f in fields if a.get(f) != b.get(f)]


def version_notes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The software differences (allowed: checking an upgrade is the point)."""
    return differences(a.get("versions") or {}, b.get("versions") or {}, tuple(a["versions"]))


@dataclass
class Side:
    """One side of a comparison: its measured set, where it came from, and its runs."""

    label: str
    measured: Measured
    fingerprint: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)  # run_id, created_utc, status

    @property
    def complete(self) -> bool:
        return all(r.get("status") == "complete" for r in self.runs)

    @property
    def span_s(self) -> float | None:
        return span_s(self.runs)


def span_s(runs: list[dict[str, Any]]) -> float | None:
    """Seconds from the first run's start to the last's (None: fewer than two runs with a
    start time; an imported log's measurement has none: `measured_utc`)."""
    times = (utc_seconds(r.get("measured_utc", r.get("created_utc"))) for r in runs)
    starts = sorted(t for t in times if t is not None)
    return starts[-1] - starts[0] if len(starts) > 1 else None


def _run_entry(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.info.get("run_id", run.path.name),
        "path": str(run.path),
        "created_utc": run.info.get("created_utc"),
        "measured_utc": run.info.get("measured_utc", run.info.get("created_utc")),
        "status": run.status,
    }


def side_of_runs(runs: list[Run], label: str | None = None) -> Side:
    """The measured set of one or more runs that agree on the environment."""
    prints = [fingerprint(r.info) for r in runs]
    for run, other in zip(runs[1:], prints[1:], strict=True):
        diff = differences(prints[0], other, MUST_MATCH)
        if diff:
            raise UsageError(
                f"runs {runs[0].path} and {run.path} differ: {'; '.join(diff)}",
                "give runs of one environment",
            )
    measured = Measured.combine([measure_run(r) for r in runs])
    return Side(
        label=label or ", ".join(r.path.name for r in runs),
        measured=measured,
        fingerprint=prints[0],
        runs=[_run_entry(r) for r in runs],
    )
