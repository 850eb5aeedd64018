"""The HTML report: self-contained, plotly.js embedded once, every string escaped."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpuprof import open_run
from gpuprof.reports.html import write_report
from gpuprof.runs.store import update_run_json
from tests.conftest import Gp

PLOTLY_MARKER = "Plotly.newPlot"


def test_report_is_self_contained(two_rank_run: Path) -> None:
    html = (two_rank_run / "report.html").read_text()
    assert html.count('<script type="text/javascript">/**') == 1  # plotly.js, once
    assert "<script src" not in html and 'src="http' not in html  # nothing fetched
    assert html.count(PLOTLY_MARKER) >= 7  # one figure per op
    assert "every result was correct" in html
    assert "How these numbers were measured" in html and "2(n-1)/n" in html
    assert "median over iterations of the slowest rank" in html  # gpuprof measured these
    assert "band: p10-p90 of the iterations" in html  # each iteration timed: a spread drawn


def test_report_escapes_strings(two_rank_run: Path, tmp_path: Path, gp: Gp) -> None:
    run_dir = tmp_path / two_rank_run.name
    shutil.copytree(two_rank_run, run_dir)
    info = open_run(run_dir).info
    info["nodes"][0]["host"] = "<script>alert(1)</script>"
    update_run_json(
        run_dir,
        nodes=info["nodes"],
        status="partial",
        failures=[
            {
                "rank": 1,
                "host": "<b>h</b>",
                "probe": "collectives",
                "case_id": "all_reduce.x",
                "error": "killed",
            }
        ],
    )
    result = gp("report", str(run_dir), "-o", str(tmp_path / "r.html"))
    assert result.code == 0 and result.out.strip() == str(tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Failure:" in html and "&lt;b&gt;h&lt;/b&gt;" in html
    assert "Run partial" in html


def test_report_of_a_run_that_died_before_consolidating(two_rank_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "died"
    shutil.copytree(two_rank_run, run_dir)
    for table in run_dir.glob("*.parquet"):
        table.unlink()
    path = write_report(open_run(run_dir))
    assert PLOTLY_MARKER in path.read_text()
    assert not list(run_dir.glob("*.parquet"))  # read from the shards; reading never writes


def test_report_contents_link_every_section(two_rank_run: Path) -> None:
    import re

    html = (two_rank_run / "report.html").read_text()
    nav = re.search(r'<nav class="muted toc" id="contents">(.*?)</nav>', html, re.S)
    assert nav is not None
    links = re.findall(r'href="#([\w-]+)"', nav.group(1))
    sections = re.findall(r'<section id="([\w-]+)"', html)
    assert sections and set(sections) <= set(links)
    assert all(f'id="{anchor}"' in html for anchor in links)  # every link has a target


def test_long_tables_show_their_interesting_rows_first(two_rank_run: Path) -> None:
    """The collectives summary shows each curve's largest size (and wrong cases); every row is
    one click below, and the page stays small."""
    import re

    html = (two_rank_run / "report.html").read_text()
    shown = re.search(r'<table id="summary">(.*?)</table>', html, re.S)
    assert shown is not None
    full = re.search(r'<details class="more"><summary>all (\d+) rows</summary>', html)
    assert full is not None
    assert 1 < shown.group(1).count("<tr") - 1 < int(full.group(1))
    assert len(html.encode()) < 6_000_000


def test_the_report_opens_with_a_health_verdict() -> None:
    from gpuprof.reports.html import health

    measured = "9 cases measured on 2 rank(s), cpu/gloo; every result was correct."
    assert health(measured, False, []) == f"Healthy: {measured}"
    one = health(measured, False, ["DDP exposes 28% communication. Try fp16 compression."])
    assert one == f"One finding: {measured} First finding: DDP exposes 28% communication."
    two = health(measured, False, ["A. B.", "C."])
    assert two.startswith("Worth a look: ") and two.endswith("First finding: A. (+1 more below)")
    assert health("Run partial: 3 cases measured.", True, []).startswith("Failing: Run partial")


def test_a_report_of_many_nodes_keeps_to_what_a_reader_can_take_in() -> None:
    """128 intra groups at once: each case as its median group and its slowest (named), and
    every case with wrong elements; telemetry figures for 8 nodes, every node in the table;
    p2p per node beyond 64 ranks."""
    import pandas as pd

    from gpuprof.reports.sections.collectives import at_scale
    from gpuprof.reports.sections.telemetry import standing_out

    rows = [
        {"scope": "intra", "world_size": 8, "group": f"node{k}", "op": "all_reduce",
         "dtype": "float32", "redop": "sum", "in_place": True, "size_bytes": size,
         "busbw_gbps": 100.0 - (50 if k == 17 and size == 1024 else 0) + k / 1000,
         "time_us": 10.0, "nwrong": 3 if (k, size) == (40, 2048) else 0}
        for k in range(128)
        for size in (1024, 2048)
    ] + [
        {"scope": "global", "world_size": 1024, "group": "all", "op": "all_reduce",
         "dtype": "float32", "redop": "sum", "in_place": True, "size_bytes": 1024,
         "busbw_gbps": 80.0, "time_us": 20.0, "nwrong": 0}
    ]  # fmt: skip
    summary = pd.DataFrame(rows)
    shown = at_scale(summary, name_slowest=True)
    by = {(r["group"], r["size_bytes"]): r for r in shown.to_dict("records")}
    assert (
        by[("median of 128", 1024)]["busbw_gbps"]
        == summary[(summary["scope"] == "intra") & (summary["size_bytes"] == 1024)][
            "busbw_gbps"
        ].median()
    )
    assert by[("node17 (slowest of 128)", 1024)]["busbw_gbps"] < 51
    assert by[("median of 128", 2048)]["nwrong"] == 3  # a wrong element is never averaged away
    assert ("node40", 2048) in by and by[("node40", 2048)]["nwrong"] == 3
    assert ("all", 1024) in by and len(shown) == 2 + 2 + 1 + 1
    assert set(at_scale(summary, name_slowest=False)["group"]) >= {"slowest of 128"}
    assert shown["world_size"].dtype == "int64"  # labels read "n=8", not "n=8.0"
    small = summary[summary["group"].isin(["node0", "node1", "all"])]
    assert at_scale(small, name_slowest=True).equals(small.reset_index(drop=True))

    series = {
        f"node{k}": pd.DataFrame({"gpu_util_pct": [90.0 - (k == 5) * 60], "throttled": [k == 9]})
        for k in range(20)
    }
    assert standing_out(series)[:3] == ["node0", "node9", "node5"]
    assert len(standing_out(series)) == 8
    assert standing_out({k: series[k] for k in list(series)[:4]}) == list(series)[:4]


def test_the_report_saves_its_summaries_for_the_commands_that_read_them(
    two_rank_run: Path, tmp_path: Path, gp: Gp
) -> None:
    """The report saves the summaries it computed beside the tables; `show` then prints the
    same rows from them; a run consolidated again (or another run.json, or other code) makes
    them stale, and they are computed from the tables again."""
    import pandas as pd

    from gpuprof.analysis.summary import computed_summary
    from gpuprof.runs.saved import SUMMARIES_DIR, saved_summary

    run_dir = tmp_path / two_rank_run.name
    shutil.copytree(two_rank_run, run_dir)
    shutil.rmtree(run_dir / SUMMARIES_DIR, ignore_errors=True)
    probes = [t for t in open_run(run_dir).tables() if t in ("collectives", "p2p", "memory")]
    assert len(probes) == 3
    fresh = {p: computed_summary(open_run(run_dir), p) for p in probes}
    assert all(saved_summary(run_dir, p) is None for p in probes)
    write_report(open_run(run_dir))
    for probe in probes:
        saved = saved_summary(run_dir, probe)
        assert saved is not None
        pd.testing.assert_frame_equal(saved, fresh[probe])
    shown = gp("show", str(run_dir), "--table", "collectives", "--format", "csv")
    assert shown.code == 0 and shown.out == fresh["collectives"].to_csv(index=False)
    update_run_json(run_dir, took_s=12.5, estimated_s=10.0)  # the sweep's timing, after it
    assert saved_summary(run_dir, "collectives") is not None
    update_run_json(run_dir, status="partial")  # what a summary may depend on
    assert saved_summary(run_dir, "collectives") is None
    update_run_json(run_dir, status="complete")
    assert gp("consolidate", str(run_dir)).code == 0
    assert all(saved_summary(run_dir, p) is None for p in probes)  # stale: tables rewritten
    again = gp("show", str(run_dir), "--table", "collectives", "--format", "csv")
    assert again.out == shown.out
