"""The end of a run: consolidate the shards into tables, decide its status, name who failed,
and write the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprof.launch import this_host
from gpuprof.store import RUN_JSON, read_json, run_events, update_run_json, utc_now
from gpuprof.supervise import Supervised
from gpuprof.tables import consolidate


@dataclass(frozen=True, kw_only=True)
class Finished:
    """run.json after the end of a run, and where its report is (None: not written)."""

    info: dict[str, Any]
    report: Path | None


def _failures(run_dir: Path, supervised: Supervised | None, since_ns: int) -> list[dict[str, Any]]:
    """Who failed: the ranks that died or were stopped (seen by the launcher, or silent inside
    a case), then the failures ranks wrote themselves (timeouts waiting for them, errors)."""
    events = run_events(run_dir, since_ns)
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
    culprits = []
    for rank in [r for r in sorted(supervised.lost) if r not in wrote] or silent:
        marker = in_flight.get(rank, {})
        why = supervised.lost.get(rank, "no record after this case started")
        culprits.append(
            {
                "rank": rank,
                "host": marker.get("host", this_host()),
                "probe": marker.get("probe"),
                "case_id": marker.get("case_id"),
                "error": f"{why}; {reason}",
            }
        )
    failures = culprits + written
    plain = f"{reason}, and no rank recorded why (torchrun's output above says)"
    return failures or [
        {"rank": None, "host": None, "probe": None, "case_id": None, "error": plain}
    ]


def finish_run(
    run_dir: Path, returncode: int, supervised: Supervised | None = None, *, report: bool = True
) -> Finished:
    """Consolidate shards, set status and failures in run.json, and write the report."""
    tables = consolidate(run_dir)
    failures = _failures(
        run_dir, supervised, int(read_json(run_dir / RUN_JSON).get("attempt_ns", 0))
    )
    skipped = run_events(run_dir)["skip"]
    status = "complete" if returncode == 0 and not failures else "partial" if tables else "failed"
    info = update_run_json(
        run_dir,
        status=status,
        failures=failures,
        skipped=[
            {k: s.get(k) for k in ("rank", "probe", "case_id", "scope", "reason")}
            for s in skipped
            if s.get("group_rank") == 0
        ],
        finished_utc=utc_now(),
        tables=sorted(tables),
    )
    path = None
    if report:
        from gpuprof.reports.html import write_report
        from gpuprof.store import Run

        path = write_report(Run(run_dir))
    return Finished(info=info, report=path)
