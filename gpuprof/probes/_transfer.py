"""Records reach the home rank's run folder through the process group (no shared filesystem).

At every scope boundary each rank sends the bytes its shard gained since the last transfer; the
home rank appends them to its own copy of that shard. A shard the home rank already sees whole
(same host, or a shared filesystem) is left alone, so both setups give one complete folder.
The local shards stay where they were written, as a backup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed as dist

from gpuprof.records import shard_path


def merge_chunk(run_dir: Path, rank: int, offset: int, chunk: bytes) -> None:
    """Make the home copy of `rank`'s shard hold `chunk` at `offset`."""
    path = shard_path(run_dir, rank)
    size = path.stat().st_size if path.exists() else 0
    if not chunk or size >= offset + len(chunk):
        return  # already here: same file (same host or shared filesystem)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("r+b" if path.exists() else "wb") as handle:
        handle.truncate(min(size, offset))
        handle.seek(min(size, offset))
        if size < offset:
            raise RuntimeError(f"rank {rank}'s shard has a gap before byte {offset}")
        handle.write(chunk)


class Shipper:
    """Sends this rank's new shard bytes to the home rank."""

    def __init__(self, shard: Path, run_dir: Path, rank: int, home: int) -> None:
        self.shard, self.run_dir, self.rank, self.home = shard, run_dir, rank, home
        self.sent = 0

    def ship(self, group: Any = None) -> None:
        """Collective over the world: every rank calls it at the same point."""
        with self.shard.open("rb") as handle:
            handle.seek(self.sent)
            chunk = handle.read()
        payload = (self.rank, self.sent, chunk)
        self.sent += len(chunk)
        gathered: list[Any] | None = (
            [None] * dist.get_world_size() if self.rank == self.home else None
        )
        dist.gather_object(payload, gathered, dst=self.home, group=group)
        if gathered is not None:
            for rank, offset, data in gathered:
                merge_chunk(self.run_dir, rank, offset, data)
