"""Host counters: CPU (total and per core), memory, per-NIC bytes and InfiniBand port counters.

NIC and InfiniBand rows carry cumulative byte counters (for attributing bytes to a case) and
rates over the sampling interval. InfiniBand `port_xmit_data` / `port_rcv_data` count 4-byte
words (the InfiniBand spec's PortXmitData), so bytes = 4 x the counter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

IB_ROOT = Path("/sys/class/infiniband")


def ib_counters(root: Path = IB_ROOT) -> dict[str, tuple[int, int]]:
    """{'mlx5_0/1': (tx_bytes, rx_bytes)} for every InfiniBand port with counters."""
    out = {}
    for port in sorted(root.glob("*/ports/*")):
        try:
            tx = int((port / "counters/port_xmit_data").read_text()) * 4
            rx = int((port / "counters/port_rcv_data").read_text()) * 4
        except (OSError, ValueError):
            continue
        out[f"{port.parent.parent.name}/{port.name}"] = (tx, rx)
    return out


BUSY_CORE_PCT = 90.0  # a core this busy is pegged (a launcher, data loader or busy-wait thread)


class HostSampler:
    """Samples this host; keeps the previous byte counters for rates."""

    def __init__(self, ib_root: Path = IB_ROOT) -> None:
        self.ib_root = ib_root
        psutil.cpu_percent(percpu=True)  # the first call only primes the counters
        self._prev: dict[str, tuple[int, int, int]] = {}

    def _rates(self, key: str, tx: int, rx: int, t_ns: int) -> tuple[float | None, ...]:
        prev = self._prev.get(key)
        self._prev[key] = (tx, rx, t_ns)
        if prev is None or t_ns <= prev[2]:
            return None, None
        seconds = (t_ns - prev[2]) / 1e9
        return (tx - prev[0]) / seconds / 1e9, (rx - prev[1]) / seconds / 1e9

    def sample(self, t_ns: int) -> list[dict[str, Any]]:
        """Rows: 'host' (CPU: the mean over cores, the busiest core and the cores at least
        BUSY_CORE_PCT busy; memory), 'nic:NAME', 'ib:DEV/PORT'. Not a row per core: a node of
        224 cores would write 224 rows ten times a second, most of a 128-node run's data."""
        cores = psutil.cpu_percent(percpu=True)
        memory = psutil.virtual_memory()
        rows: list[dict[str, Any]] = [
            {
                "source": "host",
                "cpu_pct": sum(cores) / max(1, len(cores)),
                "cpu_max_pct": max(cores, default=0.0),
                "cpu_busy_cores": sum(pct >= BUSY_CORE_PCT for pct in cores),
                "mem_used_bytes": int(memory.total - memory.available),
                "mem_pct": memory.percent,
            }
        ]
        counters = {
            f"nic:{name}": (c.bytes_sent, c.bytes_recv)
            for name, c in psutil.net_io_counters(pernic=True).items()
        }
        counters.update({f"ib:{k}": v for k, v in ib_counters(self.ib_root).items()})
        for source, (tx, rx) in counters.items():
            tx_rate, rx_rate = self._rates(source, tx, rx, t_ns)
            rows.append(
                {
                    "source": source,
                    "tx_bytes": tx,
                    "rx_bytes": rx,
                    "tx_gbps": tx_rate,
                    "rx_gbps": rx_rate,
                }
            )
        return rows
