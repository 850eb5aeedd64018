"""Records reach the home rank's run folder through the process group (no shared filesystem).

At every scope boundary each rank sends the bytes its files gained since the last transfer:
its record shard and, on a node's local rank 0, the node's telemetry. The home rank appends
them to its own copies. A file the home rank already sees whole (same host, or a shared
filesystem) is left alone, so both setups give one complete folder. The local files stay
where they were written, as a backup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed as dist


def merge_chunk(run_dir: Path, relative: str, offset: int, chunk: bytes) -> None:
    """Make the home copy of `relative` (inside the run folder) hold `chunk` at `offset`."""
    path = run_dir / relative
    size = path.stat().st_size if path.exists() else 0
    if not chunk or size >= offset + len(chunk):
        return  # already here: same file (same host or shared filesystem)
    if size < offset:
        raise RuntimeError(f"{relative} has a gap before byte {offset}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("r+b" if path.exists() else "wb") as handle:
        handle.truncate(offset)
        handle.seek(offset)
        handle.write(chunk)


class Shipper:
    """Sends the new bytes of this rank's files (relative to its run folder) to the home rank."""

    def __init__(self, files: list[Path], run_dir: Path, rank: int, home: int) -> None:
        self.run_dir, self.rank, self.home = run_dir, rank, home
        self.sent = {str(f.relative_to(run_dir)): 0 for f in files}

    def add(self, path: Path) -> None:
        """Also ship `path` from now on."""
        self.sent.setdefault(str(path.relative_to(self.run_dir)), 0)

    def _chunks(self) -> list[tuple[str, int, bytes]]:
        chunks = []
        for relative, offset in self.sent.items():
            path = self.run_dir / relative
            if not path.exists():
                continue
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            data = data[: data.rfind(b"\n") + 1]  # whole lines only (a writer may be mid-line)
            self.sent[relative] = offset + len(data)
            chunks.append((relative, offset, data))
        return chunks

    def ship(self, group: Any = None) -> None:
        """Collective over the world: every rank calls it at the same point."""
        gathered: list[Any] | None = (
            [None] * dist.get_world_size() if self.rank == self.home else None
        )
        dist.gather_object(self._chunks(), gathered, dst=self.home, group=group)
        for chunks in gathered or []:
            for relative, offset, data in chunks:
                merge_chunk(self.run_dir, relative, offset, data)
