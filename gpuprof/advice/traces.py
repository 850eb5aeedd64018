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
    colls = tables.collectives
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
