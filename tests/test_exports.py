"""Every per-probe list comes from the registry: a throwaway probe spec, registered and
nothing else edited, appears in the Prometheus export, the nccl-tests layout, the report's
sections, its findings and its overview."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpuprof import registry
from gpuprof.analysis.summary import Analyzed
from gpuprof.params import ProbeParams
from gpuprof.registry import Export, Metric, ProbeSpec
from gpuprof.reports.html import render_report
from gpuprof.reports.nccl_tests import run_text
from gpuprof.reports.prometheus import prometheus_text
from gpuprof.reports.sections import Note, Section
from gpuprof.runs.store import RUN_JSON, open_run
from gpuprof.runs.tables import consolidate

DATA = Path(__file__).resolve().parent / "data" / "p2p-mesh-slow-link"
ROWS = [
    {"case_id": "a", "world_size": 2, "widget_us": 40.0, "compute_pct": 60.0, "wait_pct": 30.0},
    {"case_id": "b", "world_size": 2, "widget_us": 80.0, "compute_pct": 50.0, "wait_pct": 45.0},
]


def summarize_run(run: Any) -> pd.DataFrame:
    frame = run.table("toy")
    return frame.groupby(["case_id", "world_size"], as_index=False).median(numeric_only=True)


def section(analyzed: Analyzed, plan: dict[str, Any]) -> list[Section]:
    cases = ", ".join(analyzed.summary("toy")["case_id"])
    return [Section(title="Toy widgets", anchor="toy", blocks=[Note(text=f"cases {cases}")])]


def findings(analyzed: Analyzed) -> list[str]:
    return ["Toy: widget b takes twice as long as widget a."]


def overview(summary: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "label": "toy " + summary["case_id"],
            "compute time": summary["compute_pct"],
            "bubble / wait": summary["wait_pct"],
        }
    )


def nccl_tests(summary: pd.DataFrame, ranks: Sequence[Mapping[str, Any]] = ()) -> str:
    return "".join(f"# toy {r.case_id} {r.widget_us:.1f}\n" for r in summary.itertuples())


TOY = ProbeSpec(
    name="toy",
    help="A throwaway probe.",
    params=ProbeParams,
    suite=lambda suite, device: ProbeParams(),
    count_cases=lambda params, nodes, gpus: 2,
    case_overhead_s=0.0,
    rank_module="tests.test_exports",
    summarize="tests.test_exports:summarize_run",
    columns=(("case_id", "case"), ("widget_us", "widget_us")),
    section="tests.test_exports:section",
    advice="tests.test_exports:findings",
    metrics=(Metric(column="widget_us", better="lower", keys=("case_id",)),),
    exports=(
        Export(
            name="toy_widget_seconds",
            help="How long a widget takes.",
            column="widget_us",
            divisor=1e6,
            labels=(("case", "case_id"), ("ranks", "world_size")),
        ),
    ),
    nccl_tests="tests.test_exports:nccl_tests",
    overview="tests.test_exports:overview",
)


@pytest.fixture
def toy_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real run (the golden p2p run) with a toy table beside its p2p table, and the toy
    probe registered."""
    registry.specs()
    monkeypatch.setitem(registry._SPECS, "toy", TOY)
    run_dir = tmp_path / "0001_toy"
    shutil.copytree(DATA, run_dir)
    tables = consolidate(run_dir)
    pd.DataFrame([{**r, "iteration": i} for i in range(3) for r in ROWS]).to_parquet(
        run_dir / "toy.parquet"
    )
    info = json.loads((run_dir / RUN_JSON).read_text())
    info["tables"] = sorted([*tables, "toy"])
    (run_dir / RUN_JSON).write_text(json.dumps(info))
    return run_dir


def test_a_registered_probe_reaches_every_export(toy_run: Path) -> None:
    run = open_run(toy_run)
    prom = prometheus_text(Analyzed(run))
    toy_lines = [line for line in prom.splitlines() if line.startswith("gpuprof_toy_widget")]
    assert len(toy_lines) == 2 and any('case="b",ranks="2"} 8' in line for line in toy_lines)
    assert "# HELP gpuprof_toy_widget_seconds How long a widget takes." in prom
    assert "gpuprof_p2p_bandwidth_bytes_per_second" in prom  # the real probes still there

    assert run_text(run) == "# toy a 40.0\n# toy b 80.0\n"

    page = render_report(run)
    assert "Toy widgets" in page and "cases a, b" in page
    assert "widget b takes twice as long" in page
    assert "toy a" in page and "toy b" in page  # the overview's rows


def test_without_the_spec_nothing_of_it_is_exported(toy_run: Path) -> None:
    registry._SPECS.pop("toy")
    run = open_run(toy_run)
    assert "gpuprof_toy" not in prometheus_text(Analyzed(run))
    assert "Toy widgets" not in render_report(run)
