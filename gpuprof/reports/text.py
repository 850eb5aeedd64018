"""Plain-text tables for the terminal, nccl-tests style (sizes binary, bandwidth in GB/s)."""

from __future__ import annotations

import pandas as pd

from gpuprof.units import format_size

# (column, title) per summary; cells are formatted by the column's unit suffix.
COLUMNS = {
    "collectives": [
        ("scope", "scope"), ("world_size", "n"), ("group", "group"), ("op", "op"),
        ("size_bytes", "size"), ("dtype", "type"), ("redop", "redop"), ("in_place", "place"),
        ("time_us", "time_us"), ("time_us_p99", "p99_us"), ("algbw_gbps", "algbw_GB/s"),
        ("busbw_gbps", "busbw_GB/s"), ("pct_of_peak", "%link"), ("nwrong", "#wrong"),
    ],
    "p2p": [
        ("mode", "mode"), ("rank_a", "a"), ("rank_b", "b"), ("host_a", "host_a"),
        ("host_b", "host_b"), ("link_class", "link"), ("size_bytes", "size"),
        ("time_us", "time_us"), ("bw_gbps", "GB/s"), ("latency_us", "lat_us"),
        ("pct_of_class", "%class"), ("flagged", "flag"), ("nwrong", "#wrong"),
    ],
    "memory": [
        ("rank", "rank"), ("host", "host"), ("kind", "kind"), ("size_bytes", "size"),
        ("time_us", "time_us"), ("bandwidth_gbps", "GB/s"), ("pct_of_peak", "%peak"),
        ("nwrong", "#wrong"),
    ],
    "compute": [
        ("rank", "rank"), ("host", "host"), ("dtype", "type"), ("n", "n"),
        ("time_us", "time_us"), ("tflops", "TFLOP/s"), ("pct_of_peak", "%peak"),
    ],
    "ddp": [
        ("scope", "scope"), ("world_size", "n"), ("group", "group"), ("case_id", "variant"),
        ("step_us", "step_us"), ("forward_us", "fwd_us"), ("backward_compute_us", "bwd_us"),
        ("exposed_comm_us", "exposed_us"), ("optimizer_us", "optim_us"), ("sum_pct", "sum%"),
        ("comm_us", "comm_us"), ("overlap_log_pct", "overlap%log"),
        ("comm_only_us", "comm_only_us"), ("comm_cost_ab_us", "cost_ab_us"),
        ("overlap_ab_pct", "overlap%ab"), ("headroom_pct", "noop%"),
        ("samples_per_s", "samples/s"), ("efficiency", "eff"),
    ],
    "pipeline": [
        ("schedule", "schedule"), ("p", "p"), ("m", "m"), ("v", "v"), ("step_us", "step_us"),
        ("bubble_pct", "bubble%"), ("bubble_max_pct", "worst%"), ("theory_pct", "theory%"),
        ("simulated_pct", "sim%"), ("t_f_us", "T_F_us"), ("t_b_us", "T_B_us"),
        ("t_w_us", "T_W_us"), ("wait_us", "wait_us"), ("imbalance_pct", "imbal%"),
        ("bottleneck_rank", "slowest"), ("model_step_us", "model_us"),
        ("model_error_pct", "model_err%"), ("clock_error_us", "clock_err_us"),
    ],
}


def _cell(column: str, value: object) -> str:
    if value is None or value is pd.NA or value != value:  # missing: not measured or unknown
        return "-"
    if column == "in_place":
        return "in" if value else "out"
    if column == "flagged":
        return "SLOW" if value else ""
    if column.endswith("_bytes"):
        return format_size(float(value))  # type: ignore[arg-type]
    if column.endswith("_gbps"):
        return f"{float(value):.3f}"  # type: ignore[arg-type]
    if column.endswith(("_us", "_p99", "_pct")) or column in ("pct_of_peak", "pct_of_class"):
        return f"{float(value):.1f}"  # type: ignore[arg-type]
    if column == "samples_per_s":
        return f"{float(value):.4g}"  # type: ignore[arg-type]
    if column == "efficiency":
        return f"{float(value):.2f}"  # type: ignore[arg-type]
    if column == "tflops":
        return f"{float(value):.4g}"  # type: ignore[arg-type]
    return str(value)


def table_cells(summary: pd.DataFrame, table: str = "collectives"
                ) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of a summary (shared by terminal and HTML)."""
    present = [c for c in COLUMNS[table] if c[0] in summary.columns]
    header = [title for _, title in present]
    rows = [[_cell(col, record[col]) for col, _ in present]
            for record in summary.to_dict("records")]
    return header, rows


def format_table(summary: pd.DataFrame, table: str = "collectives") -> str:
    """A fixed-width table of a summary."""
    header, rows = table_cells(summary, table)
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
             for row in rows]
    return "\n".join(lines)
