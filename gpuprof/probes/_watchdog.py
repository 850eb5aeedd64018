"""A per-case watchdog for each rank: a case that outlives its timeout ends the rank (exit 3)
with a failure record, so the launcher names the case instead of waiting forever."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gpuprof.runs.records import ShardWriter, Where, failure_record


class Watchdog:
    """Ends this rank (exit 3) with a failure record when one case outlives its timeout."""

    def __init__(
        self, *, rank: int, host: str, timeout_s: float, writer: Callable[[], ShardWriter]
    ) -> None:
        """`writer` gives the rank's shard when a case times out (it may be attached later)."""
        self._rank, self._host, self._timeout_s, self._writer = rank, host, timeout_s, writer
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
            time.sleep(min(1.0, self._timeout_s / 10))
            with self._lock:
                case = self._case
            if case and time.monotonic() - case[3] > self._timeout_s:
                probe, case_id, where, _ = case
                error = f"case timed out after {self._timeout_s:g} s"
                writer = self._writer()
                writer.write(failure_record(probe, case_id, where, error))
                writer.flag_failure()
                print(
                    f"gpuprof: rank {self._rank} on {self._host}: {probe} {case_id}: {error}",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(3)
