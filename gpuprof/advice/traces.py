"""Findings from a job's profiler traces: exposed communication, a straggler rank,
communication below the machine's measured ceiling, and a device idle for a large share of
the step. Each says what was seen, where, and what to change."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpuprof.traces.job import TraceTables
from gpuprof.units import format_size

EXPOSED_SHARE = 0.10  # exposed communication worth hiding, as a share of the span
IDLE_SHARE = 0.30  # a device idle this share of its span is waiting for the host
INPUT_OF_IDLE = 0.5  # ... and input-bound when the host's input covers this share of it
INPUT_SHARE = 0.10  # a GPU step waiting this share of it for the data loader is input-bound
BELOW_CEILING = 0.5  # achieved busbw under this share of the measured one


def _ms(us: float) -> str:
    return f"{us / 1e3:,.1f} ms"


def _share(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column] / frame["span_us"]


def with_ceiling(collectives: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """The collectives with the busbw a sweep measured for the same op at the nearest size
    (and the same number of ranks where the sweep had it)."""
    out = collectives.copy()
    out["measured_busbw_gbps"] = math.nan
    if out.empty or measured.empty:
        return out
    for i, row in out.iterrows():  # a handful of (op, size) per job
        same = measured[measured["op"] == row["op"]]
        if same.empty or pd.isna(row["nbytes"]):
            continue
        ranks = same[same["world_size"] == row["group_size"]]
        pool = ranks if not ranks.empty else same[same["world_size"] == same["world_size"].max()]
        distance = (
            pool["size_bytes"].clip(lower=1).map(math.log) - math.log(max(row["nbytes"], 1))
        ).abs()
        nearest = int(distance.to_numpy().argmin())
        out.loc[i, "measured_busbw_gbps"] = float(pool["busbw_gbps"].iloc[nearest])
    out["share_of_measured"] = out["busbw_gbps"] / out["measured_busbw_gbps"]
    return out


def with_compute_ceiling(ranks: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """The ranks with the matmul ceiling a sweep measured for their FLOPs' dtype (the best
    case of any rank and size) and the utilization against it."""
    out = ranks.copy()
    if "flops_dtype" not in out or compute.empty:
        return out
    best = compute.groupby("dtype")["tflops"].max()
    out["measured_tflops"] = out["flops_dtype"].map(best).astype(float)
    out["mfu_measured_pct"] = 100 * out["tflops"] / out["measured_tflops"]
    return out


def straggler_finding(tables: TraceTables) -> list[str]:
    """The rank the others wait for, by how much, and whether its compute or input is slower."""
    frame = tables.stragglers
    if frame.empty:
        return []
    found = []
    for _, row in frame[frame["straggler"].astype(bool)].iterrows():
        cause = {
            "input": f"its input (data loading) takes {_ms(row['input_delta_us'])} more per step "
            "than the others': give its DataLoader more workers (num_workers), pinned memory "
            "and prefetching, or move the input off its critical path",
            "computation": f"its compute takes {_ms(row['compute_delta_us'])} more per step than "
            "the others': check that GPU's clocks, throttling and health (gpuprof sweep on its "
            "node), and that the work is split evenly",
            "neither": "neither its compute nor its input is slower than the others': look at "
            "its host (CPU contention, launch overheads) and its network link",
        }[row["cause"]]
        found.append(
            f"Rank {row['rank']} holds the job back: it arrives last at "
            f"{row['times_last']} of {len(tables.collectives)} collectives, by a median "
            f"{_ms(row['held_median_us'])}, and the others wait "
            f"{_ms(row['caused_wait_per_step_us'])} per step for it; {cause}."
        )
    return found


def findings(tables: TraceTables) -> list[str]:
    """Every trace finding, the straggler first (it explains the others' waits)."""
    found = straggler_finding(tables)
    ranks = tables.ranks
    if ranks.empty:
        return found
    exposed = _share(ranks, "exposed_comm_us").to_numpy()
    worst = int(exposed.argmax())
    if exposed[worst] >= EXPOSED_SHARE:
        row = ranks.iloc[worst]
        why = (
            " Much of it is waiting for the straggler above: fix that first."
            if found
            else " A larger DDP bucket (bucket_cap_mb) or FSDP prefetching starts the "
            "collectives earlier, gradient accumulation (no_sync) makes them rarer, and "
            "a faster interconnect or compression (bf16 hooks) makes them shorter."
        )
        found.append(
            f"Exposed communication is {100 * exposed[worst]:.0f}% of rank {row['rank']}'s "
            f"{row['timeline']} time ({_ms(row['exposed_comm_us'])} over {row['steps']} "
            f"step(s); median over ranks {100 * float(np.median(exposed)):.0f}%): "
            f"communication that no compute hides.{why}"
        )
    waits = step_waits(tables.steps)
    if not waits.empty:  # a GPU's steps as users know them: what the device waited for
        found += _wait_findings(waits)
        return found + _below_ceiling(tables.collectives)
    idle = _share(ranks, "idle_us").to_numpy()
    worst = int(idle.argmax())
    if idle[worst] >= IDLE_SHARE:
        row = ranks.iloc[worst]
        where = "GPU" if row["timeline"] == "device" else "process"
        bound = (
            "input-bound: more DataLoader workers, pinned memory (pin_memory=True) and "
            "prefetching keep it fed"
            if row["input_us"] >= INPUT_OF_IDLE * row["idle_us"]
            else "waiting for the host: fewer, larger kernels (torch.compile, CUDA graphs) "
            "and less Python work per step keep it busy"
        )
        found.append(
            f"Rank {row['rank']}'s {where} is idle {100 * idle[worst]:.0f}% of its time "
            f"({_ms(row['idle_us'])}; the data loader took {_ms(row['input_us'])}): {bound}."
        )
    return found + _below_ceiling(tables.collectives)


def step_waits(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank of a GPU trace, over its window's steps (all but the last of two or more):
    the median step and the median shares of it the device waited for the data loader
    (input) and for the rest of the host (idle)."""
    if steps.empty or not {"timeline", "input_us", "idle_us"} <= set(steps.columns):
        return pd.DataFrame()
    rows = []
    for rank, mine in steps[steps["timeline"] == "device"].groupby("rank"):
        mine = mine.sort_values("step")
        window = mine.iloc[:-1] if len(mine) >= 2 else mine
        span = window["span_us"].clip(lower=1e-9)
        rows.append(
            {
                "rank": rank,
                "steps": len(window),
                "step_us": float(window["span_us"].median()),
                "input_share": float((window["input_us"] / span).median()),
                "host_share": float((window["idle_us"] / span).median()),
            }
        )
    return pd.DataFrame(rows)


def _wait_findings(waits: pd.DataFrame) -> list[str]:
    """Input-bound or host-bound, from the rank that waits the most; else device-bound."""
    found = []
    row = waits.iloc[int(waits["input_share"].to_numpy().argmax())]
    if row["input_share"] >= INPUT_SHARE:
        found.append(
            f"Rank {int(row['rank'])}'s steps are input-bound: its GPU waits for the data "
            f"loader {100 * row['input_share']:.0f}% of each step (median over "
            f"{int(row['steps'])} steps of {_ms(row['step_us'])}): more DataLoader workers "
            "(num_workers), pinned memory "
            "(pin_memory=True) and prefetching (prefetch_factor, persistent_workers) keep it fed."
        )
    row = waits.iloc[int(waits["host_share"].to_numpy().argmax())]
    if row["host_share"] >= IDLE_SHARE:
        found.append(
            f"Rank {int(row['rank'])}'s GPU waits for the host {100 * row['host_share']:.0f}% of "
            f"each step beyond the data loader (median over {int(row['steps'])} steps of "
            f"{_ms(row['step_us'])}): host-bound; fewer, larger kernels (torch.compile, CUDA "
            "graphs) and less Python work per step keep it busy."
        )
    if not found:  # neither waits: the device's own work sets the step
        busy = 1 - waits["input_share"] - waits["host_share"]
        row = waits.iloc[int(busy.to_numpy().argmin())]
        found.append(
            f"Every rank's steps are device-bound: the GPU is busy at least "
            f"{100 * float(busy.min()):.0f}% of each step (rank {int(row['rank'])}, median over "
            f"{int(row['steps'])} steps of {_ms(row['step_us'])}): faster kernels shorten the "
            "step (the top kernels say which: lower precision, fused kernels with "
            "torch.compile, fused attention), or a faster GPU."
        )
    return found


def _below_ceiling(colls: pd.DataFrame) -> list[str]:
    """Collectives that move data well under what a sweep measured on this machine."""
    found = []
    if "share_of_measured" in colls and colls["share_of_measured"].notna().any():
        low = colls[colls["share_of_measured"] < BELOW_CEILING]
        if not low.empty:
            worst_row = low.iloc[int(low["nbytes"].to_numpy().argmax())]
            found.append(
                f"{len(low)} of {len(colls)} collectives move data at under "
                f"{100 * BELOW_CEILING:.0f}% of the bus bandwidth gpuprof measured on this "
                f"machine (e.g. {worst_row['op']} of {format_size(worst_row['nbytes'])}: "
                f"{worst_row['busbw_gbps']:.2f} GB/s against {worst_row['measured_busbw_gbps']:.2f}"
                "): the job's collectives run slower than the machine can; compare its NCCL "
                "settings and process groups with the sweep's, and look for traffic they share."
            )
    return found
