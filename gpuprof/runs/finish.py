"""The end of a run: consolidate the shards into tables, decide its status and name who
failed. How the launched job ended comes in as a `JobEnd` (the launcher's supervision
satisfies it); the report is the caller's to write."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from gpuprof.machine.env import this_host
from gpuprof.runs.store import RUN_JSON, read_json, run_events, update_run_json, utc_now
from gpuprof.runs.tables import consolidate

# what run.json keeps of a memory skip beside who, which case and why: the bytes the case
# needed, the bytes free (of total) on the group's tightest rank, and what would fit instead
MEMORY_FIELDS = ("world_size", "need_bytes", "free_bytes", "total_bytes", "fits_instead")


class JobEnd(Protocol):
    """How a launched job ended, as its launcher saw it: the exit code, why (None: it exited
    by itself) and the ranks of this node that died or were stopped."""

    @property
    def returncode(self) -> int: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def lost(self) -> Mapping[int, str]: ...


def _failures(
    events: dict[str, list[dict[str, Any]]], supervised: JobEnd | None
) -> list[dict[str, Any]]:
    """Who failed (from the run's events): the ranks that died or were stopped (seen by the
    launcher, or silent inside a case), then the failures ranks wrote themselves (timeouts
    waiting for them, errors)."""
    keep = ("rank", "host", "probe", "case_id", "error")
    written = [
        {
            **{k: f.get(k) for k in keep},
            **({"traceback": f["traceback"]} if "traceback" in f else {}),
        }
        for f in events["failure"]
    ]
    if not supervised or supervised.returncode == 0:
        return written
    reason = supervised.reason or f"torchrun exited with {supervised.returncode}"
    in_flight = {m["rank"]: m for m in events["in_flight"]}
    wrote = {f["rank"] for f in written}
    silent = [r for r in in_flight if r not in wrote]
    # a lost rank that wrote why (its exception and traceback) is named by that record, first
    written.sort(key=lambda f: f["rank"] not in supervised.lost)

    def silent_entry(rank: int) -> dict[str, Any]:
        marker = in_flight.get(rank, {})
        why = supervised.lost.get(rank, "no record after this case started")
        return {
            "rank": rank,
            "host": marker.get("host", this_host()),
            "probe": marker.get("probe"),
            "case_id": marker.get("case_id"),
            "error": f"{why}; {reason}",
        }

    # who failed first: the lost ranks (the launcher saw them die or stop) that wrote nothing;
    # with none lost, the ranks silent inside a case (hung). A rank silent beside a lost rank
    # that wrote why was stopped with the job (torchrun ends the group when one rank exits,
    # and a rank stopped inside a collective writes nothing): named after it
    first = [r for r in sorted(supervised.lost) if r not in wrote] if supervised.lost else silent
    after = [r for r in silent if r not in first]
    failures = [silent_entry(r) for r in first] + written + [silent_entry(r) for r in after]
    plain = f"{reason}, and no rank recorded why (torchrun's output above says)"
    return failures or [
        {"rank": None, "host": None, "probe": None, "case_id": None, "error": plain}
    ]


def finish_run(
    run_dir: Path,
    returncode: int,
    supervised: JobEnd | None = None,
    keep: dict[str, pd.DataFrame] | None = None,
) -> dict[str, Any]:
    """Consolidate shards, set status and failures in run.json; run.json as it is then.
    `keep` receives the measured tables (see `consolidate`)."""
    tables = consolidate(run_dir, keep)
    # this attempt's failures (a resumed run's earlier ones are gone); skips of every attempt
    events = run_events(run_dir, int(read_json(run_dir / RUN_JSON).get("attempt_ns", 0)))
    failures = _failures(events, supervised)
    skipped = events["skip"]
    status = "complete" if returncode == 0 and not failures else "partial" if tables else "failed"
    info = update_run_json(
        run_dir,
        status=status,
        failures=failures,
        skipped=[
            {
                **{k: s.get(k) for k in ("rank", "probe", "case_id", "scope", "reason")},
                **{k: s[k] for k in MEMORY_FIELDS if k in s},
            }
            for s in skipped
            if s.get("group_rank") == 0
        ],
        finished_utc=utc_now(),
        tables=sorted(tables),
    )
    return info
