"""The launcher's live progress line on a terminal: probe k of n, case i of N, elapsed, the
time left (click's estimate from the pace so far), and the case running now. It follows the
cases' start markers in the shards the launcher already polls; on a terminal the ranks' own
per-case lines are turned off (they would break the line) and still go to each rank's log.
Without a terminal (CI logs) or with -q there is no live line: the per-case lines print as
before (or, with -q, not at all). Plain text, no colour: nothing for NO_COLOR to turn off."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from gpuprof.runs.records import RANKS_DIR


class Progress:
    """A click progress bar over the plan's cases (the estimate's counts)."""

    def __init__(self, probes: list[tuple[str, int]]) -> None:
        self.probes = [name for name, _ in probes]
        self.total = max(1, sum(cases for _, cases in probes))
        self.seen: set[tuple[Any, ...]] = set()
        self.offsets: dict[Path, int] = {}
        self.current = "starting the ranks"
        self.probe: str | None = None
        self.started = time.monotonic()
        self.bar: Any = click.progressbar(
            length=self.total,
            label=self._label(),
            file=sys.stderr,
            show_eta=True,
            show_pos=True,
            item_show_func=lambda _: self.current,
            width=20,
        )
        self.bar.__enter__()

    def _label(self, probe: str | None = None) -> str:
        elapsed = time.monotonic() - self.started
        where = (
            f"probe {self.probes.index(probe) + 1}/{len(self.probes)} {probe}"
            if probe in self.probes
            else "launching"
        )
        return f"{int(elapsed // 60):02d}:{int(elapsed % 60):02d} {where}"

    def _new_lines(self, run_dir: Path) -> list[dict[str, Any]]:
        found = []
        for shard in sorted((run_dir / RANKS_DIR).glob("*.jsonl")):
            offset = self.offsets.get(shard, 0)
            with shard.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            data = data[: data.rfind(b"\n") + 1]
            self.offsets[shard] = offset + len(data)
            for raw in data.splitlines():
                try:
                    found.append(json.loads(raw))
                except ValueError:
                    continue  # a damaged line: the store reports it, not the progress line
        return found

    def poll(self, run_dir: Path | None) -> None:
        """Count the cases that started since the last poll and redraw."""
        if run_dir is not None and (run_dir / RANKS_DIR).is_dir():
            for record in self._new_lines(run_dir):
                if record.get("type") == "phase" and record.get("event") == "start":
                    key = (
                        record["probe"],
                        record["scope"],
                        record["world_size"],
                        record["case_id"],
                    )
                    self.seen.add(key)
                    self.probe = record["probe"]
                    self.current = f"{record['scope']} n={record['world_size']} {record['case_id']}"
        done = min(len(self.seen), self.total)
        self.bar.label = self._label(self.probe)
        self.bar.update(done - self.bar.pos, self.current)

    def close(self) -> None:
        """Leave the line as it is and start a new one."""
        self.bar.__exit__(None, None, None)


def wanted(quiet: bool) -> bool:
    """A live line only on a terminal, and not with -q."""
    return not quiet and sys.stderr.isatty()
