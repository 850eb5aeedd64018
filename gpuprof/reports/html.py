"""The self-contained HTML report: plotly.js embedded once, every string escaped, verdict
first. The page is the registry's sections in order (then telemetry), each built by its
probe's section builder; the findings come from the advice layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from plotly.offline import get_plotlyjs

from gpuprof import registry
from gpuprof.analysis.summary import Analyzed
from gpuprof.errors import UsageError
from gpuprof.reports.sections import Section
from gpuprof.runs.store import PLAN_JSON, Run, read_json
from gpuprof.units import format_size

REPORT_NAME = "report.html"

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("gpuprof.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
TEMPLATES.filters["enumerate_rows"] = lambda rows: list(enumerate(rows))
TELEMETRY_SECTION = "gpuprof.reports.sections.telemetry:section"
TELEMETRY_ADVICE = "gpuprof.advice.telemetry:findings"
# across probes: first the overview of where the time goes, last the predictions from the
# collectives' fits and the DDP and pipeline probes
OVERVIEW_SECTION = "gpuprof.reports.sections.overview:section"
SCALING_SECTION = "gpuprof.reports.sections.scaling:section"
SCALING_ADVICE = "gpuprof.advice.scaling:findings"


def general_method(info: dict[str, Any]) -> list[str]:
    """How every number was timed (each section adds its own lines)."""
    if info.get("source") == "nccl-tests":
        return [
            "Imported (gpuprof import nccl-tests): gpuprof measured nothing here. Each time is "
            "the one nccl-tests printed for its case (by default the mean over ranks of the "
            "mean iteration time; one row per case and -N cycle), algbw and busbw are "
            "recomputed from it with nccl-tests' formulas, #wrong as printed.",
        ]
    cuda = info.get("device") == "cuda"
    timer = (
        "CUDA events recorded around every iteration on the current stream, the stream "
        "held by a spin kernel first so the iterations run back to back"
        if cuda
        else "time.perf_counter_ns around every blocking gloo call"
    )
    return [
        f"Timing: {timer}; every iteration of every rank is kept in the run's tables "
        "(<probe>.parquet).",
        "Scopes, all measured inside one launch with sub-groups: intra = ranks of one node "
        "(sizes 2, 4, ...; every node at once), inter = one rank per node, rails = local rank r "
        "of every node (every r at once), global = every rank.",
    ]


def _meta(info: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for node in info.get("nodes", []):
        cpu = node.get("cpu", {})
        gpus = node.get("gpus", [])
        gpu_text = f"{len(gpus)} x {gpus[0]['name']}" if gpus else "none visible to NVML"
        host = (  # an imported run knows its GPUs only
            f"{cpu.get('model')}, {cpu.get('logical_cores')} logical cores, "
            f"{format_size(node.get('memory_bytes', 0))} memory; "
            if cpu
            else ""
        )
        rows.append(
            (f"node {node.get('node_rank')}: {node.get('host')}", f"{host}GPUs: {gpu_text}")
        )
    versions = info.get("versions", {})
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)))
    rows.append(
        (
            "launcher",
            f"{info.get('launcher')} ({info.get('num_nodes')} node(s) x "
            f"{info.get('gpus_per_node')} rank(s))",
        )
    )
    for imported in info.get("imported") or []:  # gpuprof import: which file, which tests
        tests = ", ".join(
            f"{t.get('program') or t.get('op')} ({t.get('rows')} rows, header at line "
            f"{t.get('line')}" + (f"; {t['stopped']}" if t.get("stopped") else "") + ")"
            for t in imported.get("tests", [])
        )
        rows.append((f"{info.get('source')} log", f"{imported.get('file')}: {tests}"))
    env = info.get("env", {})
    if env:
        rows.append(("environment", ", ".join(f"{k}={v}" for k, v in env.items())))
    return rows


def _fallback_verdict(info: dict[str, Any], tables: list[str]) -> tuple[str, bool]:
    """The verdict when no section gives one: what was measured, or that nothing was."""
    where = f"{info.get('world_size')} rank(s), {info.get('device')}/{info.get('backend')}"
    status = info.get("status")
    measured = [s.name for s in registry.specs().values() if s.name in tables]
    if measured and status == "complete":
        return f"Measured {', '.join(measured)} on {where}; see the sections below.", False
    if measured:
        return f"Run {status}: measured {', '.join(measured)} on {where} before it stopped.", True
    return f"Nothing was measured (run {status}).", True


def health(measured: str, bad: bool, found: list[str]) -> str:
    """The report's first line: a verdict (healthy, worth a look, or failing), what was
    measured and whether every result was right, and the first finding's first sentence."""
    if bad:
        state = "Failing"
    elif found:
        state = "Worth a look" if len(found) > 1 else "One finding"
    else:
        state = "Healthy"
    line = f"{state}: {measured.strip()}"
    if found:
        first = found[0].split(". ")[0].rstrip(".")
        more = f" (+{len(found) - 1} more below)" if len(found) > 1 else ""
        line += f" First finding: {first}.{more}"
    return line


def build_sections(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    """The overview, every probe's sections in registry order, then scaling and telemetry."""
    builders = [OVERVIEW_SECTION, *(spec.section for spec in registry.specs().values())]
    builders += [SCALING_SECTION, TELEMETRY_SECTION]
    sections: list[Section] = []
    for ref in builders:
        sections += registry.load(ref)(analyzed, plan)
    return sections


def findings(analyzed: Analyzed) -> list[str]:
    """Every probe's findings in registry order, then scaling's and telemetry's."""
    rules = [s.advice for s in registry.specs().values() if s.advice]
    rules += [SCALING_ADVICE, TELEMETRY_ADVICE]
    found: list[str] = []
    for ref in rules:
        found += registry.load(ref)(analyzed)
    return found


def render_report(run: Run) -> str:
    """The report of a run as one HTML string."""
    return _render(run, Analyzed(run))[0]


def _render(run: Run, analyzed: Analyzed) -> tuple[str, str, list[str]]:
    """The report's HTML, its verdict line and its findings."""
    info = run.info
    plan = read_json(run.path / PLAN_JSON) if (run.path / PLAN_JSON).exists() else {}
    sections = build_sections(analyzed, plan)
    verdict, bad = next(
        (s.verdict for s in sections if s.verdict is not None),
        _fallback_verdict(info, run.tables()),
    )
    method = general_method(info)
    for section in sections:
        method += [line for line in section.method if line not in method]
    found = findings(analyzed)
    verdict = health(verdict, bad, found)
    html = TEMPLATES.get_template("report.html.j2").render(
        run_id=info.get("run_id", run.path.name),
        created=(
            f"imported {info.get('created_utc', '')} (when it was measured, the log does not say)"
            if "measured_utc" in info and info["measured_utc"] is None
            else info.get("created_utc", "")
        ),
        world_size=info.get("world_size"),
        num_nodes=info.get("num_nodes"),
        device=info.get("device"),
        backend=info.get("backend"),
        status=run.status,
        verdict=verdict,
        bad=bad,
        failures=info.get("failures", []),
        findings=found,
        sections=sections,
        meta=_meta(info),
        method=method,
        skipped=info.get("skipped", []),
        version=info.get("gpuprof_version"),
        argv=" ".join(info.get("argv", [])),
        plotly_js=get_plotlyjs(),
    )
    return html, verdict, found


def write_report(run: Run, path: Path | None = None) -> Path:
    """Write the report (default `<run>/report.html`) and return its path."""
    return write_report_headline(run, path)[0]


def write_report_headline(run: Run, path: Path | None = None) -> tuple[Path, str, list[str]]:
    """Write the report, and the summaries it computed beside the run's tables (`show`,
    `predict` and the gate read them); its path, its verdict line and its findings (for the
    terminal)."""
    target = path or run.path / REPORT_NAME
    analyzed = Analyzed(run)
    html, verdict, found = _render(run, analyzed)
    try:
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the report to {target}: {exc.strerror}") from None
    analyzed.save_summaries()
    return target, verdict, found
