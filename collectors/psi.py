"""I/O pressure from /proc/pressure/io (Linux PSI, 4.20+).

The file's `avg10/avg60/avg300` are kernel-smoothed averages over fixed windows that do not line up
with our tick; `total=` is the cumulative stall time in microseconds, so its advance over the tick
divided by the tick's length is the exact share of the tick spent stalled, which is what is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from collectors.base import CollectorError, Row
from collectors.counters import Counters
from collectors.files import read_required

_LINE = re.compile(r"^(some|full)\b.*\btotal=(\d+)", re.M)


@dataclass(frozen=True, slots=True)
class Pressure:
    """Cumulative stall microseconds; `full` is None on kernels whose file has no full line."""

    some_us: int
    full_us: int | None


def parse_pressure(text: str) -> Pressure | None:
    totals = dict(_LINE.findall(text))
    if "some" not in totals:
        return None
    return Pressure(int(totals["some"]), int(totals["full"]) if "full" in totals else None)


class PsiCollector:
    """One row of kind "storage", source "psi", device "io" per tick. `proc_root`: procfs mount."""

    name = "psi"
    kind = "storage"

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.path = Path(proc_root) / "pressure" / "io"
        self.counters = Counters()

    def collect(self, now_ms: int) -> list[Row]:
        p = parse_pressure(read_required(self.path, "pressure stall information (kernel < 4.20 or psi=0)"))
        if p is None:
            raise CollectorError(f"{self.path} has no 'some ... total=' line; is it really a PSI file?")
        row: Row = {"ts_ms": now_ms, "source": "psi", "device": "io"}
        for field, total in (("psi_some_pct", p.some_us), ("psi_full_pct", p.full_us)):
            if total is None:
                continue
            # µs stalled per second / 1e6 * 100 = percent of the tick
            pct = self.counters.rate("io", field, total, now_ms, scale=1e-4)
            if pct is not None:
                row[field] = min(pct, 100.0)
        return [row]
