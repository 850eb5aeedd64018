"""Every rank's own output in the run folder: `logs/rank-<rank>.log` gets everything the rank
writes to stdout and stderr through Python (its case lines, warnings, the traceback of an
exception that ends it), while the terminal still sees it. Line-buffered, so a rank that dies
leaves every whole line; ranks on other nodes ship theirs to node 0 with their shards."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TextIO

LOGS_DIR = "logs"


class Tee(io.TextIOBase):
    """A text stream that writes to the stream it replaced and to a log file."""

    def __init__(self, stream: TextIO, log: TextIO) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.log.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


def log_path(run_dir: Path, rank: int) -> Path:
    """Where rank `rank`'s output is kept."""
    return run_dir / LOGS_DIR / f"rank-{rank:05d}.log"


def tee_output(run_dir: Path, rank: int) -> Path:
    """From now on, also write this process's stdout and stderr to its log (once)."""
    path = log_path(run_dir, rank)
    if isinstance(sys.stdout, Tee):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("a", buffering=1, encoding="utf-8")
    sys.stdout = Tee(sys.stdout, log)
    sys.stderr = Tee(sys.stderr, log)
    return path
