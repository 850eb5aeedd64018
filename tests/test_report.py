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
