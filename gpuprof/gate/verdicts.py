"""A check's or a comparison's verdicts as a terminal table, JSON, JUnit XML and Markdown."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuprof.gate.stats import FAILING
from gpuprof.text import fixed_width

LABELS = {
    "regression": "REGRESSION",
    "wrong": "WRONG",
    "untrusted": "COULD NOT TRUST",
    "missing": "MISSING",
    "inconclusive": "inconclusive",
    "improvement": "improvement",
    "new": "new",
    "same": "same",
    "detail": "(detail)",
}
EXPLAIN = {
    "regression": "worse beyond its threshold, and significant against the iteration noise",
    "wrong": "the candidate counted wrong elements",
    "untrusted": "a GPU was slowed (hardware or thermal slowdown, power brake, or a clock under "
    "half its applications clock) during the candidate's case, not the baseline's",
    "missing": "the baseline has this case, the candidate does not",
    "inconclusive": "undecided: the evidence measured could not tell its change from the "
    "noise, within the minimum effect or beyond it",
    "improvement": "better beyond its threshold, and significant",
    "new": "only the candidate has this case",
    "same": "within the minimum effect (A/B: shown not slower than the pass margin)",
    "detail": "a metric that explains its case (A/B: the case is judged on its primary metric)",
}


UNDECIDED_EXIT = 4  # a check that could not decide some case: neither a pass nor a failure


def undecided_exit(table: pd.DataFrame, code: int, on_inconclusive: str) -> tuple[int, list[str]]:
    """The check's exit code once its undecided case-metrics are counted, and a note naming
    them: UNDECIDED_EXIT where every decided case passed but some ended "inconclusive"
    (moved beyond the minimum effect without the evidence to call it), 0 with
    `on_inconclusive="pass"`. A failure (1) or a run that could not measure (3) stays."""
    if code != 0 or table.empty:
        return code, []
    undecided = table[table["verdict"] == "inconclusive"]
    if undecided.empty:
        return code, []
    cases = sorted(set(undecided["case"].astype(str)))
    named = ", ".join(cases[:5]) + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
    what = f"{len(undecided)} case-metric(s) undecided ({named})"
    if on_inconclusive == "pass":
        return 0, [f"{what}: passed, as --on-inconclusive pass asks"]
    return UNDECIDED_EXIT, [
        f"{what}: the check could not decide them, exit {UNDECIDED_EXIT} (not a pass); measure "
        "more (A/B: --time-budget, --max-pairs; against a baseline: --repeats, or a baseline "
        "of more runs) or pass them knowingly with --on-inconclusive pass"
    ]


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}"


def _pct(value: Any, sign: bool = True) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:+.1f}%" if sign else f"{value:.1f}%"


def _interval(rec: Mapping[Any, Any]) -> str:
    """An A/B case's interval as changes: '+3.1%..+12.0%'."""
    lo, hi = rec.get("ratio_lo"), rec.get("ratio_hi")
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return "-"
    return f"{_pct(100 * (lo - 1))}..{_pct(100 * (hi - 1))}"


def rows(table: pd.DataFrame) -> list[list[str]]:
    """Header and one row of cells per case-metric (an A/B check's: its interval and pairs,
    in place of a stored check's threshold and q value)."""
    paired = "ratio_lo" in table.columns
    first = ["verdict", "case", "metric"]
    if paired:
        header = [*first, "reference", "candidate", "change", "interval", "pairs"]
    else:
        header = [*first, "baseline", "candidate", "change", "threshold", "q"]
    out = [header]
    for rec in table.to_dict("records"):
        cells = [
            LABELS[rec["verdict"]],
            rec["case"],
            f"{rec['metric']} ({rec['better']} is better)",
            _number(rec["base"]),
            _number(rec["cand"]),
            _pct(rec.get("change_pct")),
        ]
        if paired:
            cells += [_interval(rec), str(rec.get("pairs", "-"))]
        else:
            cells += [_pct(rec.get("threshold_pct"), sign=False), _number(rec.get("q_value"))]
        out.append(cells)
    return out


def terminal(table: pd.DataFrame, title: str, notes: list[str], summary: str) -> str:
    """The verdicts, failures first, with notes and the counts."""
    lines = [title]
    if len(table):
        lines.append(fixed_width(rows(table), left=3))
    lines += [f"note: {n}" for n in notes]
    lines.append(summary)
    return "\n".join(lines)


def as_json(table: pd.DataFrame, meta: dict[str, Any]) -> str:
    """Machine-readable verdicts: the comparison table's rows and the check's context."""
    records = json.loads(table.to_json(orient="records"))
    for rec in records:
        rec["key"] = json.loads(rec["key"])
    return json.dumps({**meta, "cases": records}, indent=1)


def junit(table: pd.DataFrame, name: str, notes: list[str], on_inconclusive: str = "error") -> str:
    """JUnit XML: one testcase per case and metric; failing verdicts are failures with the
    numbers in the message and as properties; inconclusive ones are errors (the check could
    not decide them), or skipped with `on_inconclusive="pass"`: never a silent pass."""
    if len(table):  # a case's detail metrics explain it; they are not tests of their own
        table = table[table["verdict"] != "detail"]
    failures = int(table["verdict"].isin(FAILING).sum()) if len(table) else 0
    undecided = int((table["verdict"] == "inconclusive").sum()) if len(table) else 0
    errors = undecided if on_inconclusive == "error" else 0
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(len(table)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(undecided - errors),
    )
    if notes:
        props = ET.SubElement(suite, "properties")
        for i, note in enumerate(notes):
            ET.SubElement(props, "property", name=f"note{i}", value=note)
    for rec in table.to_dict("records"):
        case = ET.SubElement(
            suite, "testcase", classname=f"gpuprof.{rec['probe']}", name=_test_name(rec)
        )
        props = ET.SubElement(case, "properties")
        for prop in ("base", "cand", "change_pct", "threshold_pct", "p_value", "q_value",
                     "ratio", "ratio_lo", "ratio_hi", "pairs"):  # fmt: skip
            if prop in rec:
                ET.SubElement(props, "property", name=prop, value=_number(rec[prop]))
        ET.SubElement(props, "property", name="verdict", value=rec["verdict"])
        message = _message(rec)
        if rec["verdict"] in FAILING:
            failure = ET.SubElement(case, "failure", message=message, type=rec["verdict"])
            failure.text = f"{message}\n{EXPLAIN[rec['verdict']]}"
        elif rec["verdict"] == "inconclusive":
            kind = "error" if on_inconclusive == "error" else "skipped"
            element = ET.SubElement(case, kind, message=message, type="inconclusive")
            element.text = f"{message}\n{EXPLAIN['inconclusive']}"
        elif rec["verdict"] != "same":
            ET.SubElement(case, "system-out").text = message
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _test_name(rec: Mapping[Any, Any]) -> str:
    return f"{rec['case']} [{rec['metric']}]"


def _message(rec: Mapping[Any, Any]) -> str:
    if "ratio_lo" in rec:
        return (
            f"{LABELS[rec['verdict']]}: {rec['metric']} {_number(rec['base'])} -> "
            f"{_number(rec['cand'])} ({_pct(rec.get('change_pct'))}, interval "
            f"{_interval(rec)} over {rec.get('pairs')} pairs; {rec['better']} is better)"
        )
    return (
        f"{LABELS[rec['verdict']]}: {rec['metric']} {_number(rec['base'])} -> "
        f"{_number(rec['cand'])} ({_pct(rec['change_pct'])}; threshold "
        f"{_pct(rec.get('threshold_pct'), sign=False)}, {rec['better']} is better, q "
        f"{_number(rec.get('q_value'))})"
    )


def markdown(table: pd.DataFrame, title: str, notes: list[str], summary: str) -> str:
    """A Markdown summary (GitHub's job summary, a merge request comment): the counts, then
    the table with failures first; cases that stayed the same are folded away."""
    lines = [f"### {title}", "", f"**{summary}**", ""]
    lines += [f"- {n}" for n in notes]
    shown = table[~table["verdict"].isin(["same", "detail"])] if len(table) else table
    if len(shown):
        lines += ["", "| " + " | ".join(rows(shown)[0]) + " |", "|" + "---|" * len(rows(shown)[0])]
        for cells in rows(shown)[1:]:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    same = int((table["verdict"] == "same").sum()) if len(table) else 0
    if same:
        lines += ["", f"{same} case-metrics within the minimum effect are not listed."]
    detail = int((table["verdict"] == "detail").sum()) if len(table) else 0
    if detail:
        lines += ["", f"{detail} detail metrics (explaining their cases) are not listed."]
    return "\n".join(lines) + "\n"
