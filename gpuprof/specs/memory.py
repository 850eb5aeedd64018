"""The memory probe: copy bandwidth of each device (host<->device pinned and pageable, alone
and together; device to device, together; a host copy on CPU, alone and together)."""

from __future__ import annotations

from gpuprof.params import csv
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.ceilings import (
    CONCURRENCY_OPTION,
    DEVICE_KEYS,
    KEY_DEFAULTS,
    MEMORY_KINDS,
    MEMORY_KINDS_CPU,
    MEMORY_KINDS_CUDA,
    CeilingParams,
    count_copies,
)
from gpuprof.units import parse_size


def suite_memory(suite: str, device: str) -> CeilingParams:
    """Copy sizes that reach the ceiling: 256 MiB-1 GiB on GPU, 64-256 MiB on CPU; host
    copies alone and together (the `ci` suite alone: a gate wants the device's own number,
    not its neighbours' load)."""
    gpu = device == "cuda"
    size = (
        {"quick": 256 << 20, "standard": 1 << 30, "full": 1 << 30, "ci": 256 << 20}[suite]
        if gpu
        else {"quick": 64 << 20, "standard": 256 << 20, "full": 256 << 20, "ci": 64 << 20}[suite]
    )
    kinds = MEMORY_KINDS_CUDA if gpu else MEMORY_KINDS_CPU
    budget = {"quick": 0.2, "ci": 0.5}.get(suite, 1.0)
    return CeilingParams(
        kinds=kinds,
        size_bytes=size,
        budget_s=budget,
        min_iters=10 if suite == "ci" else 5,
        concurrency=("alone",) if suite == "ci" else ("alone", "together"),
    )


SPEC = ProbeSpec(
    name="memory",
    help="Copy bandwidth of each device: H2D/D2H pinned and pageable (alone and all devices "
    "together), D2D (together); host copy on CPU. Every node at once."
    "\n\nExample: gpuprof run memory --gpus 8 --copy-bytes 1G",
    params=CeilingParams,
    suite=suite_memory,
    options=(
        Option(
            flag="--copy-bytes",
            field="size_bytes",
            parse=parse_size,
            help="memory: bytes per copy, e.g. 1G",
        ),
        Option(
            flag="--kinds",
            field="kinds",
            parse=csv,
            help=f"memory copy kinds: {','.join(MEMORY_KINDS)}",
        ),
        CONCURRENCY_OPTION,
    ),
    count_cases=count_copies,
    case_overhead_s=0.75,  # filling and checking the buffers
    rank_module="gpuprof.probes.memory",
    summarize="gpuprof.analysis.ceilings:summarize_memory_run",
    columns=(
        ("rank", "rank"),
        ("host", "host"),
        ("concurrency", "ran"),
        ("kind", "kind"),
        ("size_bytes", "size"),
        ("time_us", "time_us"),
        ("bandwidth_gbps", "GB/s"),
        ("pct_of_peak", "%peak"),
        ("nwrong", "#wrong"),
    ),
    section="gpuprof.reports.sections.ceilings:memory_section",
    advice="gpuprof.advice.ceilings:findings",
    metrics=(
        Metric(
            column="bandwidth_gbps",
            better="higher",
            keys=(*DEVICE_KEYS, "kind", "size_bytes"),
            key_defaults=KEY_DEFAULTS,
            canary="host memory bandwidth (a numpy elementwise copy between the host copy's "
            "iterations)",
        ),
    ),
    ci_devices=("cpu", "cuda"),
    exports=(
        Export(
            name="memory_bandwidth_bytes_per_second",
            help="Copy bandwidth ceiling per rank and kind of copy.",
            column="bandwidth_gbps",
            scale=1e9,
            labels=(
                ("rank", "rank"),
                ("host", "host"),
                ("kind", "kind"),
                ("concurrency", "concurrency"),
            ),
        ),
    ),
)
