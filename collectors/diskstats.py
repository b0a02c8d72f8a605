"""Block devices from /proc/diskstats.

Each line is `major minor name` followed by 11 (kernels before 4.18), 15 (4.18+: discards) or 17
(5.5+: flushes) numbers. Counts are `unsigned long` (64-bit on every platform we run on); the time
fields are `unsigned int` milliseconds and wrap at 32 bits (about every 49 days of busy time).
Sectors are always 512 bytes, whatever the device's real sector size.

Partitions, loop, ram and zram devices are skipped by a configurable regex (node_exporter's default),
so a disk is not counted once for itself and again for each partition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from collectors.base import Row
from collectors.counters import Counters, per_event
from collectors.files import read_required

DEFAULT_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p|mmcblk\d+p)\d+$"
SECTOR_BYTES = 512
TIME_WIDTH = 32


@dataclass(frozen=True, slots=True)
class DiskStat:
    """One /proc/diskstats line (the fields goodput uses); discard/flush fields exist on newer kernels."""

    name: str
    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    in_flight: int
    io_ms: int
    discards: int | None = None
    flushes: int | None = None


def parse_diskstats(text: str) -> tuple[list[DiskStat], list[str]]:
    """All well-formed lines, and the lines that were not (with a reason)."""
    disks, bad = [], []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (14, 18, 20) or not all(p.isdigit() for p in parts[3:]):
            bad.append(f"{line.strip()!r}: expected 11, 15 or 17 numeric fields after the name")
            continue
        n = [int(p) for p in parts[3:]]
        disks.append(
            DiskStat(
                name=parts[2],
                reads=n[0],
                read_sectors=n[2],
                read_ms=n[3],
                writes=n[4],
                write_sectors=n[6],
                write_ms=n[7],
                in_flight=n[8],
                io_ms=n[9],
                discards=n[11] if len(n) >= 15 else None,
                flushes=n[15] if len(n) >= 17 else None,
            )
        )
    return disks, bad


class DiskstatsCollector:
    """Rows of kind "storage", source "disk", one per whole block device.

    `proc_root`: where procfs is mounted. `exclude`: regex of device names to skip.
    """

    name = "diskstats"
    kind = "storage"

    def __init__(self, proc_root: str | Path = "/proc", *, exclude: str = DEFAULT_EXCLUDE) -> None:
        self.path = Path(proc_root) / "diskstats"
        self.exclude = re.compile(exclude)
        self.counters = Counters()
        self.skipped: list[str] = []

    def collect(self, now_ms: int) -> list[Row]:
        disks, self.skipped = parse_diskstats(read_required(self.path, "block device statistics"))
        rows = []
        for d in disks:
            if self.exclude.search(d.name):
                continue
            rows.append(self._row(d, now_ms))
        return rows

    def _row(self, d: DiskStat, now_ms: int) -> Row:
        c, src = self.counters, d.name
        row: Row = {"ts_ms": now_ms, "source": "disk", "device": d.name}
        reads = c.delta(src, "reads", d.reads, now_ms)
        rates = {
            "read_bytes_per_s": c.rate(src, "read_sectors", d.read_sectors, now_ms, scale=SECTOR_BYTES),
            "write_bytes_per_s": c.rate(src, "write_sectors", d.write_sectors, now_ms, scale=SECTOR_BYTES),
            "read_ops_per_s": reads.per_s if reads is not None else None,
            "write_ops_per_s": c.rate(src, "writes", d.writes, now_ms),
            "read_latency_ms": per_event(c.delta(src, "read_ms", d.read_ms, now_ms, width=TIME_WIDTH), reads),
            # io_ms advances by at most the elapsed ms, so ms/s / 10 is percent busy; it is sampled and
            # can overshoot by a jiffy, hence the clamp.
            "busy_pct": c.rate(src, "io_ms", d.io_ms, now_ms, width=TIME_WIDTH, scale=0.1),
        }
        if rates["busy_pct"] is not None:
            rates["busy_pct"] = min(rates["busy_pct"], 100.0)
        row.update({k: v for k, v in rates.items() if v is not None})
        return row
