"""Check the runs scripts/gpu-smoke.sh made against what the hardware should reach; print one
line per check (ok / CHECK / n/a) and a verdict; keep a one-GPU ci run (else the first run)
as golden data in OUT.

    python scripts/gpu_smoke_check.py OUT [MORE_RUN_FOLDERS...]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from gpuprof import open_run
from gpuprof.analysis import gpu_model
from gpuprof.analysis.summary import summarize_run
from gpuprof.machine.hardware import gpu_peaks
from gpuprof.machine.topology import normalize_bus_id
from gpuprof.runs.store import Run

# ranges a healthy machine lands in (measured share of the datasheet figure)
H2D_PINNED = (0.60, 1.00)  # PCIe Gen4 ~26 of 31.5 GB/s, Gen5 ~55 of 63
D2D = (0.50, 1.00)  # H100 SXM ~3.0 of 3.35 TB/s (read + write)
BF16_MATMUL = (0.40, 1.00)  # H100 SXM ~800 of 989 TFLOP/s at 8192^3
NVLINK_MOVING_GBPS = 1.0


def _line(ok: bool | None, what: str, detail: str) -> bool:
    mark = "n/a  " if ok is None else "ok   " if ok else "CHECK"
    print(f"{mark} {what}: {detail}")
    return ok is not False


def _share(value: float, peak: float | None, bounds: tuple[float, float]) -> bool | None:
    return None if not peak else bounds[0] <= value / peak <= bounds[1]


def check_run(run: Run) -> bool:
    """Every check of one run; False if any failed."""
    info, tables = run.info, run.tables()
    name = run.path.name
    good = _line(run.status == "complete", f"{name} status", str(run.status))
    if info.get("device") != "cuda":
        return _line(None, f"{name} device", f"{info.get('device')}: not a GPU run") and good
    peaks = gpu_peaks(gpu_model(info))
    good &= _line(peaks is not None or None, f"{name} GPU", str(gpu_model(info)))
    if "collectives" in tables:
        wrong = int(summarize_run(run, "collectives")["nwrong"].fillna(0).sum())
        good &= _line(wrong == 0, f"{name} collectives", f"{wrong} wrong elements")
    if "memory" in tables:
        memory = summarize_run(run, "memory")
        for kind, peak, bounds in (
            ("h2d_pinned", peaks.host_gbps if peaks else None, H2D_PINNED),
            ("d2d", peaks.memory_gbps if peaks else None, D2D),
        ):
            rows = memory[memory["kind"] == kind]
            if not rows.empty:
                bw = float(rows["bandwidth_gbps"].median())
                detail = f"{bw:.1f} GB/s against {peak} GB/s datasheet (expect {bounds})"
                good &= _line(_share(bw, peak, bounds), f"{name} {kind}", detail)
    if "compute" in tables:
        compute = summarize_run(run, "compute")
        bf16 = compute[compute["dtype"] == "bfloat16"]
        if not bf16.empty:
            tflops = float(bf16["tflops"].median())
            peak = peaks.tflops.get("bfloat16") if peaks else None
            detail = f"{tflops:.0f} TFLOP/s against {peak} (expect {BF16_MATMUL})"
            good &= _line(_share(tflops, peak, BF16_MATMUL), f"{name} bf16 matmul", detail)
    if "telemetry" in tables:
        good &= _check_telemetry(run)
    return good


def _check_telemetry(run: Run) -> bool:
    """The sampler saw exactly the job's GPUs; NVLink counters moved during p2p (NVLink)."""
    name, info = run.path.name, run.info
    telemetry = run.table("telemetry")
    if "bus_id" not in telemetry.columns:
        return _line(False, f"{name} telemetry", "no GPU rows: NVML unavailable?")
    sampled = {normalize_bus_id(b) for b in telemetry["bus_id"].dropna()}
    job = {normalize_bus_id(r["pci_bus_id"]) for r in info.get("ranks", []) if "pci_bus_id" in r}
    good = _line(sampled == job, f"{name} sampled GPUs", f"{sorted(sampled)} vs job {sorted(job)}")
    labels = [
        label
        for node in info.get("nodes", [])
        for row in (node.get("topology") or {}).get("matrix", [])
        for label in row
    ]
    if "p2p" in run.tables() and any(label.startswith("NV") for label in labels):
        p2p = run.table("p2p")
        start, end = p2p["start_unix_ns"].min(), p2p["end_unix_ns"].max()
        during = telemetry[(telemetry["t_ns"] >= start) & (telemetry["t_ns"] <= end)]
        peak = float(during["nvlink_tx_gbps"].max()) if "nvlink_tx_gbps" in during else 0.0
        detail = f"max {peak:.1f} GB/s during p2p (expect > {NVLINK_MOVING_GBPS})"
        good &= _line(peak > NVLINK_MOVING_GBPS, f"{name} NVLink counters", detail)
    return good


def keep_golden(run: Run, out: Path) -> Path:
    """A copy of the run without its derived files (parquet, report), for tests/data/."""
    model = (gpu_model(run.info) or "gpu").replace("NVIDIA ", "").replace(" ", "-").lower()
    target = out / f"golden-{model}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        run.path, target, ignore=shutil.ignore_patterns("*.parquet", "report.html", "*.tmp")
    )
    return target


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or [Path("reports/gpu-smoke")]
    out = folders[0]
    runs = [
        open_run(p)
        for folder in folders
        if folder.is_dir()
        for p in sorted(folder.iterdir())
        if (p / "run.json").is_file()
    ]
    if not runs:
        print(f"gpu-smoke: no runs under {', '.join(map(str, folders))}", file=sys.stderr)
        return 2
    results = [check_run(run) for run in runs]  # every run checked, even after a failure
    good = all(results)
    one = next((r for r in runs if r.path.name.endswith(("_ci", "one-gpu"))), runs[0])
    golden = keep_golden(one, out)
    print(f"golden data: {golden} (commit it as tests/data/{golden.name.removeprefix('golden-')})")
    print("verdict: " + ("every check passed" if good else "some checks need a look (CHECK)"))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
