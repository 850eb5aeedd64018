"""The GPU paths against what NVML, NCCL and PyTorch document, on a machine without a GPU:
the fake NVML models nvml.h's semantics (scopeId, NVSwitch links, bus id form, missing
functions), and the CUDA-only code is driven with recording stubs where a GPU would be.
Each test names the defect it guards against; each failed on the code before the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

from gpuprof.analysis.p2p import link_class, topology_links
from gpuprof.machine import fake_machines
from gpuprof.machine.fake_nvml import FakeNVML
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.topology import format_topology, gpu_topology, normalize_bus_id
from gpuprof.telemetry.nvml import GpuSampler

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _rates(nvml: FakeNVML, bus_ids: list[str] | None = None) -> list[dict[str, Any]]:
    clock = Clock()
    nvml.clock, nvml.t0 = clock, 0.0
    sampler = GpuSampler(nvml, bus_ids)
    sampler.sample(0)
    clock.now = 1.0
    return sampler.sample(1_000_000_000)


# -- 1. NVLink counters: the sum over every link (scopeId UINT_MAX), not link 0 -------------


def test_fake_nvml_field_values_follow_the_scope_id() -> None:
    nvml = fake_machines.hgx_h100()
    gpu = nvml.gpus[0]
    nvml.clock, nvml.t0 = (lambda: 1.0), 0.0
    link0 = nvml.nvmlDeviceGetFieldValues(gpu, [138])[0].value.ullVal  # plain id: scopeId 0
    link5 = nvml.nvmlDeviceGetFieldValues(gpu, [(138, 5)])[0].value.ullVal
    total = nvml.nvmlDeviceGetFieldValues(gpu, [(138, 0xFFFFFFFF)])[0].value.ullVal
    assert link0 == link5 == int(gpu.nvlink_kib_per_s) and total == 18 * link0
    assert nvml.nvmlDeviceGetFieldValues(gpu, [(138, 40)])[0].nvmlReturn != 0  # no link 40


def test_nvlink_rate_sums_every_link() -> None:
    nvml = fake_machines.hgx_h100()
    per_link = nvml.gpus[0].nvlink_kib_per_s * 1024 / 1e9
    rows = _rates(nvml)
    assert rows[0]["nvlink_tx_gbps"] == pytest.approx(18 * per_link)
    assert rows[0]["nvlink_rx_gbps"] == pytest.approx(18 * per_link)


# -- 2. NVSwitch systems: every GPU pair is an NVLink pair ----------------------------------


def test_nvswitch_node_labels_every_pair_nv18() -> None:
    topo = gpu_topology(fake_machines.hgx_h100(), [])
    for i, row in enumerate(topo["matrix"]):
        assert row[i] == "X"
        assert all(label == "NV18" for j, label in enumerate(row) if j != i), row
    assert topo["numa"] == [0, 0, 0, 0, 1, 1, 1, 1]


# -- 3. PCI bus ids in one form on both sides of the join -----------------------------------


def test_bus_ids_normalize_to_nvml_form() -> None:
    assert normalize_bus_id("00000000:d8:00.0") == "00000000:D8:00.0"
    assert normalize_bus_id("0000:d8:00.0") == "00000000:D8:00.0"  # sysfs, 4-digit domain
    assert normalize_bus_id("d8:0.0") == "00000000:D8:00.0"


def test_lower_case_rank_bus_ids_join_the_nvml_topology() -> None:
    nvml = fake_machines.hgx_h100()
    topo = gpu_topology(nvml, [])
    info = {"nodes": [{"host": "h", "topology": topo}]}
    links = topology_links(info)
    # ranks of older runs recorded torch's lower-case ids; 0xAB has hex letters in it
    a = {"host": "h", "pci_bus_id": "00000000:2a:00.0"}
    b = {"host": "h", "pci_bus_id": "00000000:ab:00.0"}
    assert link_class(a, b, links) == "nvlink"


# -- 4 and 7. Pipeline clocks and timers on NCCL --------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def note(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return call


def test_clock_ping_pong_waits_for_each_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import pipeline

    rec = Recorder()
    monkeypatch.setattr(pipeline.dist, "send", rec.note("send"))
    monkeypatch.setattr(pipeline.dist, "recv", rec.note("recv"))
    ctx = SimpleNamespace(rank=1, device=torch.device("cpu"), sync=rec.note("sync"))
    scope = SimpleNamespace(ranks=(0, 1), group=None)
    pipeline.clock_offset(ctx, scope)  # type: ignore[arg-type]
    # send/recv return once queued on NCCL: every transfer is waited for before the clock
    assert rec.calls[:4] == ["send", "sync", "recv", "sync"]
    assert rec.calls.count("sync") == rec.calls.count("send") + rec.calls.count("recv")


def test_pipeline_timers_sync_the_compute_stream_only() -> None:
    from gpuprof.probes.pipeline import PipelineBench

    rec = Recorder()
    bench = object.__new__(PipelineBench)
    bench.ctx = SimpleNamespace(sync=rec.note("device"), sync_stream=rec.note("stream"))  # type: ignore[assignment]
    bench.offset_us = 0.0
    bench._now()
    assert rec.calls == ["stream"]  # never a device-wide sync that waits for NCCL's streams


# -- 6. Small-message timing: the stream is held before the first start event ---------------


def test_cuda_timing_holds_the_stream_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import _timing

    rec = Recorder()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self) -> None:
            rec.calls.append("record")

        def elapsed_time(self, other: Event) -> float:
            return 0.01

    monkeypatch.setattr(_timing.torch.cuda, "Event", Event)
    monkeypatch.setattr(_timing.torch.cuda, "_sleep", rec.note("spin"))
    monkeypatch.setattr(_timing.torch.cuda, "synchronize", rec.note("synchronize"))
    times = _timing._time_cuda(rec.note("op"), 3)
    assert rec.calls[0] == "spin" and rec.calls[1] == "record"
    assert times == pytest.approx([10.0, 10.0, 10.0])


def test_concurrent_ops_each_end_on_their_own_stream_from_one_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two collectives at once on a GPU: each op's end is an event on its own side stream
    that waits for that op's work (an end recorded on the current stream would wait for
    both), and both are timed from the one start event recorded before either launch."""
    from gpuprof.probes import concurrent

    rec = Recorder()
    current = ["default"]

    class Stream:
        def __init__(self, device: Any = None) -> None:
            self.name = f"side{len([c for c in rec.calls if c == 'stream'])}"
            rec.calls.append("stream")

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = 0.0

        def record(self, stream: Any = None) -> None:
            where = stream.name if stream is not None else current[0]
            rec.calls.append(f"record on {where}")
            self.at = {"default": 0.0, "side0": 2.0, "side1": 5.0}[where]

        def elapsed_time(self, other: Event) -> float:
            return other.at - self.at  # ms

    class StreamContext:
        def __init__(self, stream: Stream) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            current[0] = self.stream.name

        def __exit__(self, *exc: object) -> None:
            current[0] = "default"

    class Work:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait(self) -> None:
            rec.calls.append(f"{self.name} waited on {current[0]}")

    monkeypatch.setattr(concurrent.torch.cuda, "Stream", Stream)
    monkeypatch.setattr(concurrent.torch.cuda, "Event", Event)
    monkeypatch.setattr(concurrent.torch.cuda, "stream", StreamContext)
    monkeypatch.setattr(concurrent.torch.cuda, "synchronize", rec.note("synchronize"))
    monkeypatch.setattr(concurrent.dist, "barrier", rec.note("barrier"))
    ctx = SimpleNamespace(device=torch.device("cuda", 0), sync=rec.note("sync"))
    clock = concurrent.Finishes(ctx)  # type: ignore[arg-type]
    rec.calls.clear()
    clock.start()
    clock.watch(Work("a"))
    clock.watch(Work("b"))
    times = clock.times_us()
    assert rec.calls == [
        "barrier", "sync", "record on default",
        "a waited on side0", "record on side0",
        "b waited on side1", "record on side1",
        "synchronize",
    ]  # fmt: skip
    assert times == [2000.0, 5000.0]


# -- 8. p2p: one communicator for every mode ------------------------------------------------


@pytest.mark.parametrize("mode", ["uni", "bidir", "latency"])
@pytest.mark.parametrize("rank", [0, 1])
def test_every_p2p_mode_batches_on_the_round_group(
    monkeypatch: pytest.MonkeyPatch, mode: str, rank: int
) -> None:
    from gpuprof.probes import p2p

    groups: list[Any] = []

    def batch(ops: list[Any]) -> list[Any]:
        groups.extend(op.group for op in ops)
        return []

    monkeypatch.setattr(p2p.dist, "batch_isend_irecv", batch)
    monkeypatch.setattr(p2p.dist, "send", lambda *a, **k: groups.append("plain send"))
    monkeypatch.setattr(p2p.dist, "recv", lambda *a, **k: groups.append("plain recv"))
    monkeypatch.setattr(p2p.dist, "P2POp", lambda op, t, peer, group: SimpleNamespace(group=group))
    round_group = object()
    ctx = SimpleNamespace(rank=rank)
    tensor = torch.zeros(4)
    p2p._exchange(ctx, mode, 1 - rank, tensor, tensor, round_group)()  # type: ignore[arg-type]
    assert groups and all(g is round_group for g in groups), groups


# -- 9. The sampler keeps the job's GPUs -----------------------------------------------------


def test_sampler_keeps_only_the_jobs_gpus() -> None:
    nvml = fake_machines.hgx_h100()  # NVML lists all 8, whatever CUDA_VISIBLE_DEVICES says
    job = ["00000000:2a:00.0", "00000000:db:00.0"]  # the job's ranks, in torch's form
    rows = _rates(nvml, job)
    assert [r["source"] for r in rows] == ["gpu1", "gpu7"]
    assert [r["bus_id"] for r in rows] == ["00000000:2A:00.0", "00000000:DB:00.0"]


# -- 10, 11, 12. Compute and DDP feature checks ---------------------------------------------


def _cuda_ctx() -> Any:
    return SimpleNamespace(device=torch.device("cuda", 0), rank=0)


def test_float8_needs_n_divisible_by_16(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import compute
    from gpuprof.probes._harness import Unsupported

    monkeypatch.setattr(compute.torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(compute.torch, "Generator", lambda device: SimpleNamespace(
        manual_seed=lambda seed: None))  # fmt: skip
    with pytest.raises(Unsupported, match="divisible by 16"):
        compute._matmul(_cuda_ctx(), "float8", 1000)


def test_tf32_is_restored_after_each_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import compute

    fake = SimpleNamespace(manual_seed=lambda seed: fake)
    monkeypatch.setattr(compute.torch, "Generator", lambda device: fake)
    monkeypatch.setattr(compute.torch, "randn", lambda *a, **k: torch.zeros(2, 2))
    seen: list[bool] = []
    monkeypatch.setattr(
        compute.torch,
        "matmul",
        lambda a, b, out: seen.append(torch.backends.cuda.matmul.allow_tf32),
    )
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        compute._matmul(_cuda_ctx(), "tf32", 2)()
        assert seen == [True]  # TF32 during the tf32 case's matmul
        assert torch.backends.cuda.matmul.allow_tf32 is False  # and not after it
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_bf16_autocast_needs_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import ddp
    from gpuprof.probes._harness import Unsupported
    from gpuprof.specs.ddp import DDPParams

    # a pre-Ampere GPU: bf16 only by emulation, which torch counts unless told not to
    monkeypatch.setattr(
        ddp.torch.cuda,
        "is_bf16_supported",
        lambda including_emulation=True: including_emulation,
    )
    with pytest.raises(Unsupported, match="bfloat16"):
        ddp.DDPBench(_cuda_ctx(), None, DDPParams(hidden=64, layers=1), "amp")  # type: ignore[arg-type]


# -- 13. One NCCL communicator bound at init; sub-groups destroyed after each probe ---------


def test_init_binds_the_device_and_scopes_are_released(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.probes import _harness

    seen: dict[str, Any] = {}
    monkeypatch.setattr(_harness.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_harness.torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(_harness.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(_harness.dist, "init_process_group", lambda *a, **k: seen.update(k))
    monkeypatch.setattr(_harness.dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(_harness.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(_harness, "Watchdog", lambda **kw: None)
    _harness.init(None, "cuda", 10.0)
    assert seen["device_id"] == torch.device("cuda", 0)

    destroyed: list[Any] = []
    monkeypatch.setattr(_harness.dist, "destroy_process_group", destroyed.append)
    groups = [object(), object()]
    scopes = [SimpleNamespace(group=g) for g in groups] + [None, SimpleNamespace(group=None)]
    _harness.release_scopes(scopes)  # type: ignore[arg-type]
    assert destroyed == groups  # the world group (None) stays


# -- 14. An older nvidia-ml-py without the clock-event call ---------------------------------


def test_older_nvml_falls_back_to_the_throttle_reasons_call() -> None:
    nvml = fake_machines.hgx_h100()
    nvml.missing = {"nvmlDeviceGetCurrentClocksEventReasons"}
    nvml.gpus[0].clock_reasons = 0x40
    with pytest.raises(AttributeError):
        nvml.nvmlDeviceGetCurrentClocksEventReasons(nvml.gpus[0])
    rows = _rates(nvml)
    assert rows[0]["throttled"] is True and rows[1]["throttled"] is False


# -- The three preset machines: topology, link classes, NVLink rates, peaks -----------------


PRESETS = {
    # name: (expected matrix rows for GPU 0 and GPU 2, links per GPU, peak model)
    "hgx-h100": (["X", *["NV18"] * 7], ["NV18", "NV18", "X", *["NV18"] * 5], 18, "H100 SXM"),
    "a100-pcie-bridged": (
        ["X", "NV12", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"],
        ["NODE", "NODE", "X", "NV12", "SYS", "SYS", "SYS", "SYS"],
        12,
        "A100 PCIe 80GB",
    ),
    "pcie-4gpu": (["X", "PIX", "PHB", "PHB"], ["PHB", "PHB", "X", "PIX"], 0, "L40S"),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_machines(preset: str) -> None:
    row0, row2, links, model = PRESETS[preset]
    nvml = fake_machines.from_spec(preset)
    topo = gpu_topology(nvml, [])
    assert topo["matrix"][0] == row0 and topo["matrix"][2] == row2
    assert all(topo["matrix"][i][i] == "X" for i in range(len(nvml.gpus)))
    assert "GPU0" in format_topology(topo)
    # every pair's class, as the p2p table would show it
    info = {"nodes": [{"host": "h", "topology": topo}]}
    table = topology_links(info)
    ranks = [{"host": "h", "pci_bus_id": bus.lower()} for bus in topo["gpus"]]
    for i, a in enumerate(ranks):
        for j, b in enumerate(ranks):
            if i != j:
                label = topo["matrix"][i][j]
                expected = "nvlink" if label.startswith("NV") else "pcie"
                assert link_class(a, b, table) == expected, (i, j, label)
    rows = _rates(nvml)
    per_link = nvml.gpus[0].nvlink_kib_per_s * 1024 / 1e9
    expected_rate = links * per_link if links else None
    assert rows[0]["nvlink_tx_gbps"] == (pytest.approx(expected_rate) if links else None)
    peaks = gpu_peaks(nvml.gpus[0].name)
    assert peaks is not None and peaks.model == model


def smoke_check(folder: Path) -> subprocess.CompletedProcess[str]:
    """scripts/gpu_smoke_check.py on the runs in `folder`."""
    script = ROOT / "scripts" / "gpu_smoke_check.py"
    return subprocess.run(
        [sys.executable, str(script), str(folder)], capture_output=True, text=True, timeout=120
    )


def test_gpu_smoke_checker_reads_a_run_and_keeps_golden_data(
    two_rank_run: Path, tmp_path: Path
) -> None:
    """The GPU smoke script's checker, on the CPU run this machine can make: it reads the
    run, says the GPU checks do not apply, and keeps a copy without derived files."""
    shutil.copytree(two_rank_run, tmp_path / "0001_one-gpu")
    done = smoke_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not a GPU run" in done.stdout and "verdict: every check passed" in done.stdout
    golden = tmp_path / "golden-gpu"
    assert (golden / "run.json").is_file() and not list(golden.glob("*.parquet"))


def test_gpu_smoke_runs_every_step_and_lists_each_in_its_verdict(tmp_path: Path) -> None:
    """The smoke script with a stand-in `gpuprof` whose standard sweep fails: every later
    step still runs (the ci suite, the baseline, the check), and the verdict lists each
    step with its result; the exit status says one failed."""
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "gpuprof"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in *"--suite standard"*) echo "boom" >&2; exit 3;; esac\n'
    )
    stub.chmod(0o755)
    out = tmp_path / "smoke"
    env = {**os.environ, "GPUPROF": str(stub), "GPU_SMOKE_GPUS": "2", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-smoke.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    ran = calls.read_text().splitlines()
    assert [line.split()[0] for line in ran[:5]] == ["env", "sweep", "sweep", "baseline", "check"]
    verdict = done.stdout[done.stdout.index("gpu-smoke verdict:") :].splitlines()
    assert "  FAILED standard suite on 2 GPU(s) (exit 3)" in verdict
    assert any(line.strip() == "ok     environment" for line in verdict)
    assert any("checks against the hardware (exit 2)" in line for line in verdict)  # no runs
    assert (out / "gpu-smoke.log").read_text().count("== gpu-smoke:") == len(verdict) - 2


@pytest.mark.parametrize(
    ("name", "model", "host_gbps"),
    [
        ("NVIDIA H200 NVL", "H200 NVL", 63.0),  # PCIe cards with NVLink bridges, not SXM
        ("NVIDIA H200", "H200 SXM", 63.0),
        ("NVIDIA GH200 480GB", "GH200", 450.0),  # NVLink-C2C to the Grace CPU, not PCIe
        ("NVIDIA GH200 144G HBM3e", "GH200 144G HBM3e", 450.0),
        ("NVIDIA B200", "B200", 63.0),
        ("NVIDIA GB200", "GB200", 450.0),  # Grace-Blackwell: C2C too
    ],
)
def test_gpu_names_reach_their_own_peaks(name: str, model: str, host_gbps: float) -> None:
    """NVML's names (NVIDIA's open-gpu-kernel-modules list) find their own entries; a host
    copy's % of peak is against the host link the GPU has."""
    peaks = gpu_peaks(name)
    assert peaks is not None and peaks.model == model
    assert peaks.host_gbps == pytest.approx(host_gbps, rel=0.01)


def test_a_gh200_host_copy_is_judged_against_nvlink_c2c() -> None:
    from gpuprof.analysis.ceilings import summarize_memory

    frame = pd.DataFrame(
        [{"rank": 0, "host": "h", "group": "rank0", "kind": "h2d_pinned", "size_bytes": 1 << 30,
          "bytes_moved": 1 << 30, "time_us": (1 << 30) / 346e3, "nwrong": 0, "iteration": 0}]
    )  # fmt: skip
    summary = summarize_memory(frame, {0: "NVIDIA GH200 480GB"})
    # nvbandwidth measured 346 GB/s host to device on GH200 (NVIDIA/nvbandwidth#23): 77% of 450
    assert summary["pct_of_peak"].iloc[0] == pytest.approx(100 * 346 / 450, rel=0.01)


GOLDEN_H100 = ROOT / "tests" / "data" / "h100-80gb-hbm3"
GOLDEN_H200 = ROOT / "tests" / "data" / "h200"


def read_golden(folder: Path, tmp_path: Path) -> tuple[Any, pd.DataFrame, pd.DataFrame, list[str]]:
    """A golden GPU run copied to `tmp_path`/0001_ci (as scripts/gpu-smoke.sh keeps it): the
    run, its memory summary by kind, its compute summary by dtype, the telemetry findings."""
    from gpuprof import open_run
    from gpuprof.advice import telemetry as telemetry_advice
    from gpuprof.analysis.summary import Analyzed, summarize_run

    run_dir = tmp_path / "0001_ci"
    shutil.copytree(folder, run_dir)
    run = open_run(run_dir)
    memory = summarize_run(run, "memory").set_index("kind")
    compute = summarize_run(run, "compute").set_index("dtype")
    return run, memory, compute, telemetry_advice.findings(Analyzed(run))


def test_a_real_h100_run_reads_as_the_hardware_it_ran_on(tmp_path: Path) -> None:
    """The ci suite as it ran on one H100 80GB HBM3 (torch 2.11 + CUDA 13.0, NCCL 2.28.9),
    kept as scripts/gpu-smoke.sh keeps it (shards, no parquet). Read here without a GPU: every
    copy checked right; pinned copies at PCIe Gen5 x16's measured ~55 of 63 GB/s; the device
    copy near the ~3.0 TB/s (read + written) others measure of 3.35; bf16 matmuls at 70-75%
    of 989 TFLOP/s, because the telemetry shows them at the power limit (SwPowerCap, clocks
    down from 1980 MHz), which the advice says; the sampler watched the rank's own GPU."""
    run, memory, compute, capped = read_golden(GOLDEN_H100, tmp_path)
    assert run.info["device"] == "cuda" and run.info["backend"] == "nccl"
    assert memory["nwrong"].sum() == 0
    assert 50 <= memory.loc["h2d_pinned", "bandwidth_gbps"] <= 60
    assert 50 <= memory.loc["d2h_pinned", "bandwidth_gbps"] <= 60
    assert 2800 <= memory.loc["d2d", "bandwidth_gbps"] <= 3100
    assert memory.loc["d2d", "pct_of_peak"] == pytest.approx(
        100 * memory.loc["d2d", "bandwidth_gbps"] / 3350, rel=1e-3
    )
    assert 650 <= compute.loc["bfloat16", "tflops"] <= 800
    assert compute.loc["float8", "tflops"] > compute.loc["bfloat16", "tflops"]
    assert compute.loc["float32", "tflops"] < compute.loc["tf32", "tflops"]
    assert len(capped) == 1 and "(compute) ran at the GPU's power limit (SwPowerCap)" in capped[0]
    done = smoke_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for what in ("h2d_pinned", "d2d", "bf16 matmul", "sampled GPUs", "GPU"):
        assert any(line.startswith(f"ok    0001_ci {what}") for line in lines), done.stdout
    assert not any(line.startswith(("n/a", "CHECK")) for line in lines), done.stdout


def test_a_real_h200_run_reads_as_the_hardware_it_ran_on(tmp_path: Path) -> None:
    """The ci suite on one H200 (141 GB HBM3e at 4.8 TB/s; torch 2.11 + CUDA 13.0, NCCL
    2.28.9), kept as the H100's: the device copy
    at 86% of 4.8 TB/s (read + written; the same machines gave ~4.3 TB/s in a plain torch
    copy), pinned copies at PCIe Gen5 x16's ~55 of 63 GB/s as on the H100, bf16 matmuls under
    the ~790 TFLOP/s of a ten-iteration benchmark because, as on the H100, the telemetry shows
    them at the power limit."""
    run, memory, compute, capped = read_golden(GOLDEN_H200, tmp_path)
    assert run.info["ranks"][0]["gpu_name"] == "NVIDIA H200"
    assert memory["nwrong"].sum() == 0
    assert 50 <= memory.loc["h2d_pinned", "bandwidth_gbps"] <= 60
    assert 3900 <= memory.loc["d2d", "bandwidth_gbps"] <= 4500
    assert memory.loc["d2d", "pct_of_peak"] == pytest.approx(
        100 * memory.loc["d2d", "bandwidth_gbps"] / 4800, rel=1e-3
    )
    assert 600 <= compute.loc["bfloat16", "tflops"] <= 800
    assert len(capped) == 1 and "(compute) ran at the GPU's power limit (SwPowerCap)" in capped[0]
    done = smoke_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(line.startswith(("n/a", "CHECK")) for line in done.stdout.splitlines())


def test_a_rank_names_its_gpu_as_nvml_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H100, run.json's ranks[].gpu_uuid was torch's bare 'b61e325a-...' while
    nodes[].gpus[].uuid was NVML's 'GPU-b61e325a-...' (nvmlDeviceGetUUID: 'GPU-' then the
    hex), so the two never matched; the bus id came out in NVML's form already."""
    from gpuprof.probes.sweep import rank_info

    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", uuid="b61e325a-d558-a3e9-973f-2fa41cdebcfa",
        pci_domain_id=0, pci_bus_id=0, pci_device_id=6,
    )  # fmt: skip
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    cuda = torch.device("cuda", 0)
    ctx = SimpleNamespace(rank=0, local_rank=0, node_rank=0, host="vm", device=cuda)
    info = rank_info(ctx)  # type: ignore[arg-type]
    golden = json.loads((GOLDEN_H100 / "run.json").read_text())
    assert info["gpu_uuid"] == golden["nodes"][0]["gpus"][0]["uuid"]
    assert info["pci_bus_id"] == golden["nodes"][0]["gpus"][0]["pci_bus_id"]
