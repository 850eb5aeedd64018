"""`torchrun ... -m gpuprof.probes.<probe> [options]`, the nccl-tests habit of one binary per
probe, is `gpuprof run <probe> [options]` in the same process: the module replaces itself with
the command (same pid, same environment, so torchrun's worker stays the worker), which sees
torchrun's variables, measures in place and prints the table on the rank that holds the run.
The rank side itself never imports the command layer."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def run_as_command(probe: str) -> NoReturn:
    """Become `python -m gpuprof run <probe>` with this process's arguments."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "gpuprof", "run", probe, *sys.argv[1:]])
