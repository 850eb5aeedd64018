"""`gpuprof export prometheus` and `sweep --prom-textfile`, read back with prometheus_client's
own text parser (the parser Prometheus' Python client ships)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpuprof import open_run, registry
from gpuprof.analysis.summary import summarize_run
from gpuprof.reports.prometheus import _metric
from tests.conftest import FAST, Gp

ROOT = Path(__file__).resolve().parent.parent
UNITS = ("_bytes_per_second", "_seconds", "_ratio", "_flops_per_second", "_info", "_complete")


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation
        found[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return found


def test_export_parses_and_has_a_sample_per_op_size_and_scope(two_rank_run: Path, gp: Gp) -> None:
    result = gp("export", "prometheus", str(two_rank_run))
    assert result.code == 0, result.err
    found = families(result.out)
    for name in found:
        assert re.fullmatch(r"gpuprof_[a-z0-9_]+", name) and name.endswith(UNITS), name
    busbw = found["gpuprof_collective_busbw_bytes_per_second"]
    summary = summarize_run(open_run(two_rank_run), "collectives")
    expected = {
        (r["op"], str(r["size_bytes"]), r["scope"], str(bool(r["in_place"])).lower(), r["group"])
        for r in summary.to_dict("records")
    }
    seen = {(s["op"], s["size_bytes"], s["scope"], s["in_place"], s["group"]) for s, _ in busbw}
    assert seen == expected
    assert all(s["run"] == two_rank_run.name and s["gpu_model"] == "cpu" for s, _ in busbw)
    by_key = {
        (s["op"], s["size_bytes"], s["scope"], s["in_place"], s["group"]): v for s, v in busbw
    }
    for r in summary.to_dict("records"):
        key = (r["op"], str(r["size_bytes"]), r["scope"], str(bool(r["in_place"])).lower(),
               r["group"])  # fmt: skip
        assert by_key[key] == r["busbw_gbps"] * 1e9
    assert found["gpuprof_run_complete"][0][1] == 1.0
    assert found["gpuprof_run_info"][0][0]["status"] == "complete"
    for name in ("p2p_bandwidth_bytes_per_second", "memory_bandwidth_bytes_per_second",
                 "matmul_flops_per_second", "run_duration_seconds"):  # fmt: skip
        assert found[f"gpuprof_{name}"], name


def test_label_values_are_escaped() -> None:
    text = _metric("gpuprof_x_ratio", "help", [({"host": 'a"b\\c\nd'}, 0.5)], {"run": "r"})
    (family,) = text_string_to_metric_families(text + "\n")
    assert family.samples[0].labels == {"run": "r", "host": 'a"b\\c\nd'}
    assert _metric("gpuprof_y_ratio", "help", [({}, float("nan"))], {}) == ""  # missing: absent


def test_sweep_writes_the_textfile_when_it_ends(tmp_path: Path, gp: Gp) -> None:
    target = tmp_path / "gpuprof.prom"
    args = ["sweep", "--device", "cpu", "--out", str(tmp_path / "runs"), *FAST]
    args += ["--probes", "collectives", "--op", "all_reduce", "--no-report", "--no-telemetry"]
    result = gp(*args, "--prom-textfile", str(target))
    assert result.code == 0, result.err
    found = families(target.read_text())
    assert {s["op"] for s, _ in found["gpuprof_collective_busbw_bytes_per_second"]} == {
        "all_reduce"
    }
    assert not list(tmp_path.glob(".gpuprof.prom.*"))  # written whole, then renamed


def test_the_grafana_example_queries_metrics_the_export_writes(two_rank_run: Path, gp: Gp) -> None:
    dashboard = json.loads((ROOT / "examples" / "grafana" / "gpuprof-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = set(re.findall(r"gpuprof_[a-z0-9_]+", " ".join(exprs)))
    source = (ROOT / "gpuprof" / "reports" / "prometheus.py").read_text()
    run_level = set(re.findall(r'"(gpuprof_[a-z0-9_]+)"', source))
    exported = {f"gpuprof_{e.name}" for s in registry.specs().values() for e in s.exports}
    defined = run_level | exported
    assert names and names <= defined, names - defined
    written = set(families(gp("export", "prometheus", str(two_rank_run)).out))
    assert written <= defined and len(names & written) >= 5
