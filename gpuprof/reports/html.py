"""The self-contained HTML report: plotly.js embedded once, every string escaped, verdict first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from plotly.offline import get_plotlyjs

from gpuprof.advice import collective_findings, ddp_findings, p2p_findings, pipeline_findings
from gpuprof.analysis.bandwidth import summarize_collectives
from gpuprof.analysis.summary import summarize_run
from gpuprof.plan import OPS
from gpuprof.reports.figures import (
    bubble_figure,
    busbw_figure,
    gantt_figure,
    ddp_breakdown_figure,
    ddp_overlap_figure,
    node_figure,
    pair_heatmap,
    scaling_figure,
)
from gpuprof.reports.text import table_cells
from gpuprof.store import Run
from gpuprof.units import format_size

REPORT_NAME = "report.html"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("gpuprof.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def method_lines(info: dict[str, Any], plan: dict[str, Any] | None) -> list[str]:
    """How each number in the report was measured, in words."""
    cuda = info.get("device") == "cuda"
    params = (plan or {}).get("collectives", {})
    timer = ("CUDA events recorded around every iteration on the current stream" if cuda else
             "time.perf_counter_ns around every blocking gloo call")
    return [
        f"Timing: {timer}; every iteration of every rank is kept in collectives.parquet.",
        f"Each case: {params.get('warmup_iters', '?')} warmup iteration(s), one correctness "
        "iteration with exactly predictable inputs (#wrong counts elements that differ), then "
        f"timed iterations filling a {1e3 * float(params.get('budget_s', 0)):g} ms budget "
        f"(between {params.get('min_iters', '?')} and {params.get('max_iters', '?')}), the "
        "count agreed across the group from the slowest rank's warmup.",
        "time_us is the median over iterations of the slowest rank's time (a collective ends "
        "when its last rank does); p99_us likewise.",
        "algbw = size / time; busbw = algbw x factor: all_reduce 2(n-1)/n; all_gather, "
        "reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, sendrecv 1 (nccl-tests "
        "semantics). Sizes are binary (KiB, MiB), bandwidth decimal (1 GB/s = 1e9 B/s).",
        "size is the whole buffer for all_reduce, broadcast, reduce and sendrecv, the total "
        "output for all_gather, the total input for reduce_scatter, and the per-rank send "
        "buffer for all_to_all.",
        "torch.distributed offers all_reduce, broadcast and reduce only in place, and "
        "all_to_all and send/recv only out of place; those ops are measured in that one mode.",
        "Scopes, all measured inside one launch with sub-groups: intra = ranks of one node "
        "(sizes 2, 4, ...; every node at once), inter = one rank per node, rails = local rank r "
        "of every node (every r at once), global = every rank.",
        "p2p: every pair of ranks, disjoint pairs at once in rounds; uni = one direction, bidir "
        "= both at once (rate per direction), latency = ping-pong round trip / 2; a pair's time "
        "is its slower rank's.",
        "memory and compute: each device alone, one after another; memory GB/s counts bytes "
        "moved (host<->device one direction, device and host copies read plus written); "
        "matmul counts 2n^3 FLOP; % of peak uses datasheet figures (gpuprof/hardware.py), "
        "blank where the hardware is unknown.",
        "ddp: per step, DDP's own logging data (sample rate 1: forward = forward start to "
        "first gradient, backward compute = first to last gradient, communication = first "
        "bucket launched to last done, overlap = the part of it during backward compute, "
        "exposed = communication - overlap) and A/B runs alternated with it (a twin model "
        "with a no-op comm hook: step - its step = what the all_reduce costs; the same step "
        "under no_sync: compute only; the same buckets' all_reduces alone); medians over "
        "every rank's steps. Weak scaling keeps the batch per rank.",
        "pipeline: every forward, backward and weight-gradient call of each stage and every "
        "send/recv wait timed on each rank (device synchronised around each on GPU), shifted "
        "to group rank 0's clock by the fastest of 10 ping-pongs (error <= half its round "
        "trip, column clock_err_us); bubble per rank = 1 - busy / step, step from the first "
        "forward to the last compute of any rank; theory from REFERENCE.md's formulas; "
        "simulated = each rank's measured order replayed with the median stage times and "
        "no communication.",
    ]


def _meta(info: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for node in info.get("nodes", []):
        cpu = node.get("cpu", {})
        gpus = node.get("gpus", [])
        gpu_text = f"{len(gpus)} x {gpus[0]['name']}" if gpus else "none visible to NVML"
        rows.append((
            f"node {node.get('node_rank')}: {node.get('host')}",
            f"{cpu.get('model')}, {cpu.get('logical_cores')} logical cores, "
            f"{format_size(node.get('memory_bytes', 0))} memory; GPUs: {gpu_text}",
        ))
    versions = info.get("versions", {})
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)))
    rows.append(("launcher", f"{info.get('launcher')} ({info.get('num_nodes')} node(s) x "
                             f"{info.get('gpus_per_node')} rank(s))"))
    env = info.get("env", {})
    if env:
        rows.append(("environment", ", ".join(f"{k}={v}" for k, v in env.items())))
    return rows


def _verdict(info: dict[str, Any], summary: pd.DataFrame, tables: list[str]) -> tuple[str, bool]:
    where = f"{info.get('world_size')} rank(s), {info.get('device')}/{info.get('backend')}"
    status = info.get("status")
    if summary.empty:
        others = [t for t in tables
                  if t not in ("collectives", "telemetry") and not t.endswith("_timeline")]
        if others and status == "complete":
            return f"Measured {', '.join(others)} on {where}; see the sections below.", False
        return f"No collective was measured (run {status}).", True
    wrong = summary[summary["nwrong"].fillna(0) > 0]
    unchecked = int(summary["nwrong"].isna().sum())
    best = summary.iloc[int(summary["busbw_gbps"].to_numpy().argmax())]
    peak = (f"Peak bus bandwidth {best['busbw_gbps']:.2f} GB/s ({best['op']} "
            f"{format_size(best['size_bytes'])}, {best['scope']} n={best['world_size']}).")
    if len(wrong):
        return (f"{len(wrong)} of {len(summary)} cases returned wrong results on {where}: "
                "do not trust this fabric until that is explained. " + peak), True
    if status != "complete":
        return (f"Run {status}: {len(summary)} cases measured on {where} before it stopped; "
                "every result checked was correct. " + peak), True
    if unchecked:
        return (f"{len(summary)} cases measured on {where}; {unchecked} were not checked for "
                f"correctness (--no-check). {peak}"), False
    return f"{len(summary)} cases measured on {where}; every result was correct. {peak}", False


def _figures(summary: pd.DataFrame) -> list[str]:
    html = []
    pairs = summary[["op", "dtype"]].drop_duplicates()
    order = sorted(zip(pairs["op"], pairs["dtype"], strict=True),
                   key=lambda p: (OPS.index(p[0]) if p[0] in OPS else len(OPS), p[1]))
    for op, dtype in order:
        html.append(_embed(busbw_figure(summary, str(op), str(dtype))))
    return html


def _embed(fig: Any) -> str:
    """A figure as an HTML fragment that uses the page's one copy of plotly.js."""
    return str(fig.to_html(full_html=False, include_plotlyjs=False,
                           config={"displaylogo": False, "responsive": True}))


def _p2p(run: Run, info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Heatmaps per p2p mode, and one finding per flagged (slow) pair."""
    if "p2p" not in run.tables():
        return [], []
    summary = summarize_run(run, "p2p")
    figures = [
        _embed(pair_heatmap(summary, mode))
        for mode in ("uni", "bidir", "latency")
        if (summary["mode"] == mode).any()
    ]
    findings = p2p_findings(summary)
    return figures, findings


def _ddp(run: Run, info: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The DDP section (breakdown, overlap by both methods, scaling, variants) and findings."""
    if "ddp" not in run.tables():
        return None, []
    from gpuprof.analysis.ddp import scaling, variants

    summary = summarize_run(run, "ddp")
    if summary.empty:
        return None, []
    figures = [_embed(ddp_breakdown_figure(summary))]
    if summary["overlap_ab_pct"].notna().any() or summary["overlap_log_pct"].notna().any():
        figures.append(_embed(ddp_overlap_figure(summary)))
    rows = scaling(summary)
    if len(rows) > 1:
        figures.append(_embed(scaling_figure(rows)))
    best = variants(summary)
    gains = [[r["case_id"], f"{r['samples_per_s']:.4g}", f"{r['gain_pct']:+.1f}%",
              f"{r['rank_step_us'] / 1e3:.2f}", f"{r['exposed_pct']:.1f}"
              if r["exposed_pct"] == r["exposed_pct"] else "-"]
             for r in best.to_dict("records")]
    header, cells = table_cells(summary, "ddp")
    first = summary.iloc[0]
    model = (f"{first['num_params'] / 1e6:.3g}M-parameter synthetic transformer "
             f"({first['layers']} blocks, hidden {first['hidden']}), {first['batch']} x "
             f"{first['seq']} tokens per rank per micro-batch")
    section = {"figures": figures, "gains": gains, "header": header, "rows": cells,
               "model": model}
    return section, ddp_findings(summary)


def _pipeline(run: Run) -> tuple[dict[str, Any] | None, list[str]]:
    """The pipeline section: bubble against m, a Gantt chart per schedule, tables, findings."""
    if "pipeline" not in run.tables() or "pipeline_timeline" not in run.tables():
        return None, []
    from gpuprof.analysis.pipeline import stage_table

    summary = summarize_run(run, "pipeline")
    if summary.empty:
        return None, []
    timeline = run.table("pipeline_timeline")
    stages = stage_table(run.table("pipeline"), timeline)
    figures = [_embed(bubble_figure(summary))]
    for schedule, rows in summary.groupby("schedule", sort=False):
        rows = rows.sort_values("m")
        row = rows.iloc[len(rows) // 2]
        step = timeline[(timeline["case_id"] == row["case_id"])
                        & (timeline["iteration"] == row["median_iteration"])]
        figures.append(_embed(gantt_figure(
            step,
            f"{schedule}: p={row['p']}, m={row['m']}, v={row['v']} (median step; measured "
            f"bubble {row['bubble_pct']:.1f}%, theory "
            + (f"{row['theory_pct']:.1f}%)" if row["theory_pct"] == row["theory_pct"]
               else "n/a)"))))
    header, cells = table_cells(summary, "pipeline")
    largest_m = set(summary.sort_values("m").groupby("schedule")["case_id"].last())
    skipped = [s for s in run.info.get("skipped", []) if s.get("probe") == "pipeline"]
    section = {"figures": figures, "header": header, "rows": cells,
               "stages": [[r["case_id"], str(r["rank"]), str(r["layers"]),
                           f"{r['compute_per_micro_batch'] / 1e3:.2f}",
                           f"{r['pct_of_mean']:.0f}", str(r["balanced_layers"])]
                          for r in stages.to_dict("records")
                          if r["case_id"] in largest_m],
               "skipped": skipped}
    return section, pipeline_findings(summary, stages)


def _telemetry(run: Run) -> tuple[list[str], list[list[str]], list[str]]:
    """Per-node time series, the NIC-bytes check of inter-node cases, throttling findings."""
    if "telemetry" not in run.tables():
        return [], [], []
    from gpuprof.analysis.health import attribute, case_windows, node_series, probe_spans

    telemetry = run.table("telemetry")
    tables = {t: run.table(t) for t in run.tables() if t != "telemetry"}
    tables = {t: frame for t, frame in tables.items() if "end_unix_ns" in frame.columns}
    spans = probe_spans(tables)
    figures = [
        _embed(node_figure(node_series(telemetry, str(host)), spans, str(host)))
        for host in sorted(telemetry["host"].unique())
    ]
    attributed = pd.concat([attribute(case_windows(t), telemetry) for t in tables.values()],
                           ignore_index=True) if tables else pd.DataFrame()
    ratios: list[list[str]] = []
    findings: list[str] = []
    if not attributed.empty:
        checked = attributed[attributed["expected_tx_bytes"].notna()
                             & (attributed["duration_s"] >= 0.5)]
        ratios = [[r["host"], r["scope"], str(r["world_size"]), r["case_id"],
                   format_size(r["expected_tx_bytes"]), format_size(r["nic_tx_bytes"]),
                   f"{r['nic_ratio']:.2f}"] for r in checked.to_dict("records")]
        for r in attributed[attributed["throttled"]].to_dict("records"):
            findings.append(f"{r['probe']} case {r['case_id']} ({r['scope']}) ran while a GPU "
                            f"of {r['host']} was throttled (power or thermal clock events): "
                            "its numbers understate the hardware; check cooling and power "
                            "limits (nvidia-smi -q -d PERFORMANCE) and rerun.")
    return figures, ratios, findings


def render_report(run: Run) -> str:
    """The report of a run as one HTML string."""
    info = run.info
    summary = (summarize_run(run, "collectives")
               if "collectives" in run.tables() else summarize_collectives(_empty()))
    plan_path = run.path / "plan.json"
    plan = None
    if plan_path.exists():
        import json

        plan = json.loads(plan_path.read_text("utf-8"))
    verdict, bad = _verdict(info, summary, run.tables())
    header, rows = table_cells(summary)
    pair_figures, findings = _p2p(run, info)
    node_figures, nic_ratios, telemetry_findings = _telemetry(run)
    ddp, ddp_advice = _ddp(run, info)
    pipeline, pipeline_advice = _pipeline(run)
    ceilings = []
    for table, title in (("memory", "Memory copy ceilings"), ("compute", "Matmul ceilings")):
        if table in run.tables():
            cells = table_cells(summarize_run(run, table), table)
            ceilings.append({"title": title, "header": cells[0], "rows": cells[1]})
    return _ENV.get_template("report.html.j2").render(
        run_id=info.get("run_id", run.path.name), created=info.get("created_utc", ""),
        world_size=info.get("world_size"), num_nodes=info.get("num_nodes"),
        device=info.get("device"), backend=info.get("backend"), status=run.status,
        verdict=verdict, bad=bad, failures=info.get("failures", []),
        findings=collective_findings(summary, info) + findings + ddp_advice + pipeline_advice
        + telemetry_findings,
        ddp=ddp,
        pipeline=pipeline,
        node_figures=node_figures,
        nic_ratios=nic_ratios, pair_figures=pair_figures,
        meta=_meta(info), method=method_lines(info, plan), figures=_figures(summary),
        ceilings=ceilings,
        table_header=header, table_rows=rows, skipped=info.get("skipped", []),
        version=info.get("gpuprof_version"), argv=" ".join(info.get("argv", [])),
        plotly_js=get_plotlyjs(),
    )


def _empty() -> pd.DataFrame:
    from gpuprof.analysis.bandwidth import SUMMARY_KEYS

    return pd.DataFrame(columns=[*SUMMARY_KEYS, "iteration", "time_us", "rank", "nwrong"])


def write_report(run: Run, path: Path | None = None) -> Path:
    """Write the report (default `<run>/report.html`) and return its path."""
    target = path or run.path / REPORT_NAME
    target.write_text(render_report(run), encoding="utf-8")
    return target
