"""The compute probe: matmul throughput of each device per dtype (TFLOP/s, % of peak), every
device at once (as under a training job's load) or each alone."""

from __future__ import annotations

from gpuprof.params import csv, positive_int
from gpuprof.registry import Export, Metric, Option, ProbeSpec
from gpuprof.specs.ceilings import (
    COMPUTE_DTYPES,
    CONCURRENCY_OPTION,
    DEVICE_KEYS,
    KEY_DEFAULTS,
    CeilingParams,
    count_matmuls,
)


def suite_compute(suite: str, device: str) -> CeilingParams:
    """Matmul sizes that fill the device: 8192^3 on GPU, 1024-2048 on CPU; every device at
    once (the `ci` suite each alone: a gate wants the device's own number)."""
    gpu = device == "cuda"
    n = 8192 if gpu else {"quick": 1024, "standard": 2048, "full": 2048, "ci": 1024}[suite]
    # CPUs without bf16 matrix units emulate it ~100x slower than float32: float32 only there
    dtypes = COMPUTE_DTYPES if gpu else ("float32",)
    budget = {"quick": 0.3, "ci": 0.5}.get(suite, 1.0)
    return CeilingParams(
        dtypes=dtypes,
        n=n,
        budget_s=budget,
        min_iters=10 if suite == "ci" else 5,
        concurrency=("alone",) if suite == "ci" else ("together",),
    )


SPEC = ProbeSpec(
    name="compute",
    help="Matmul throughput of each device per dtype (TFLOP/s, % of peak), every device at "
    "once (--concurrency alone: one device per node at a time)."
    "\n\nExample: gpuprof run compute --gpus 8 --matmul-n 8192 --matmul-dtypes bfloat16,float8",
    params=CeilingParams,
    suite=suite_compute,
    options=(
        Option(
            flag="--matmul-n",
            field="n",
            type=int,
            parse=positive_int,
            help="compute: matrix size n (n x n x n)",
        ),
        Option(
            flag="--matmul-dtypes",
            field="dtypes",
            parse=csv,
            help=f"compute dtypes: {','.join(COMPUTE_DTYPES)}",
        ),
        CONCURRENCY_OPTION,
    ),
    count_cases=count_matmuls,
    case_overhead_s=0.15,
    rank_module="gpuprof.probes.compute",
    summarize="gpuprof.analysis.ceilings:summarize_compute_run",
    columns=(
        ("rank", "rank"),
        ("host", "host"),
        ("concurrency", "ran"),
        ("dtype", "type"),
        ("n", "n"),
        ("time_us", "time_us"),
        ("tflops", "TFLOP/s"),
        ("pct_of_peak", "%peak"),
    ),
    section="gpuprof.reports.sections.ceilings:compute_section",
    metrics=(
        Metric(
            column="tflops",
            better="higher",
            keys=(*DEVICE_KEYS, "dtype", "n"),
            key_defaults=KEY_DEFAULTS,
            canary="the core's matmul rate (a numpy float32 matmul between the case's iterations)",
        ),
    ),
    ci_devices=("cpu", "cuda"),
    exports=(
        Export(
            name="matmul_flops_per_second",
            help="Dense matmul rate per rank and dtype.",
            column="tflops",
            scale=1e12,
            labels=(
                ("rank", "rank"),
                ("host", "host"),
                ("dtype", "dtype"),
                ("n", "n"),
                ("concurrency", "concurrency"),
            ),
        ),
    ),
)
