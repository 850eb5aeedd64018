"""A per-case watchdog for each rank: a case that outlives its timeout ends the rank (exit 3)
with a failure record, so the launcher names the case instead of waiting forever."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gpuprof.records import Where, failure_record

if TYPE_CHECKING:
    from gpuprof.probes._harness import Context


class Watchdog:
    """Ends this rank (exit 3) with a failure record when one case outlives its timeout."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._case: tuple[str, str, Where, float] | None = None
        self._lock = threading.Lock()
        threading.Thread(target=self._loop, name="gpuprof-watchdog", daemon=True).start()

    @contextmanager
    def watch(self, probe: str, case_id: str, where: Where) -> Iterator[None]:
        with self._lock:
            self._case = (probe, case_id, where, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._case = None

    def _loop(self) -> None:
        while True:
            time.sleep(min(1.0, self._ctx.case_timeout_s / 10))
            with self._lock:
                case = self._case
            if case and time.monotonic() - case[3] > self._ctx.case_timeout_s:
                probe, case_id, where, _ = case
                error = f"case timed out after {self._ctx.case_timeout_s:g} s"
                self._ctx.writer.write(failure_record(probe, case_id, where, error))
                self._ctx.writer.flag_failure()
                print(
                    f"gpuprof: rank {self._ctx.rank} on {self._ctx.host}: {probe} {case_id}: "
                    f"{error}",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(3)
