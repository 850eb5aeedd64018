"""Pure analysis: DataFrame in, DataFrame out; no torch, no pynvml, no figures."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from gpuprof.errors import UsageError


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise a UsageError naming the missing columns before any analysis starts."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UsageError(f"{what} table lacks columns {', '.join(missing)}")
