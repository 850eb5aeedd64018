"""Summaries saved beside a run's tables: `<run>/summaries/<probe>.parquet`, written by the
report (which computes them anyway) and read by `show`, `predict`, `export` and the gate, so a
run of 1,024 ranks (tens of millions of rows) is summarized once, not by every command.

A saved summary holds a key: the run's tables (name, size, modification time), run.json's
content (but the sweep's own timing, which it writes after the report) and the gpuprof code
that computed it. It is used only while all of them are the same: a run consolidated again,
a run.json changed or another gpuprof makes it stale, and the summary is computed from the
tables again. The folder is a cache: deleting it loses nothing.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SUMMARIES_DIR = "summaries"
_KEY = b"gpuprof_summary_key"
_PACKAGE = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _code_stamp() -> str:
    """A digest of the gpuprof code that runs (every module: a summary may use any)."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


# what the sweep writes into run.json after its report: no summary depends on it
_AFTER_THE_REPORT = ("took_s", "estimated_s")


def summary_key(run_dir: Path) -> str:
    """What a summary of this run depends on: its tables, run.json (but the sweep's timing,
    written after the report) and the code."""
    files = sorted(run_dir.glob("*.parquet"))
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.is_file()]
    try:
        info = json.loads((run_dir / "run.json").read_text("utf-8"))
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict):
        info = {k: v for k, v in info.items() if k not in _AFTER_THE_REPORT}
    described = json.dumps(info, sort_keys=True, default=str)
    return hashlib.sha256(json.dumps([_code_stamp(), stats, described]).encode()).hexdigest()


def saved_summary(run_dir: Path, probe: str) -> pd.DataFrame | None:
    """The summary saved for `probe`, or None: none saved, unreadable, or stale."""
    path = run_dir / SUMMARIES_DIR / f"{probe}.parquet"
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):
        return None
    if (table.schema.metadata or {}).get(_KEY) != summary_key(run_dir).encode():
        return None
    frame: pd.DataFrame = table.to_pandas()
    return frame


def save_summary(run_dir: Path, probe: str, frame: pd.DataFrame) -> None:
    """Save `probe`'s summary (through a temporary file and a rename); a run folder that
    cannot be written keeps none (its summaries are computed each time, as before)."""
    folder = run_dir / SUMMARIES_DIR
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        return  # a column arrow cannot hold: computed each time
    metadata = {**(table.schema.metadata or {}), _KEY: summary_key(run_dir).encode()}
    try:
        folder.mkdir(exist_ok=True)
        tmp = folder / f".{probe}.parquet.tmp"
        pq.write_table(table.replace_schema_metadata(metadata), tmp)
        tmp.replace(folder / f"{probe}.parquet")
    except OSError:
        return
