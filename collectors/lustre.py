"""Lustre client statistics: `llite.*.stats` (per mounted filesystem, VFS level, cache hits included)
and `osc.*.stats` (per OST, RPC level: what reached the storage servers).

Lines read `<name> <count> samples [<unit>] <min> <max> <sum> [<sumsq>]`; `snapshot_time` and friends
carry no samples and are ignored. Which root holds them depends on the Lustre version: /proc/fs/lustre
on older clients, /sys/kernel/debug/lustre (llite) and /proc/fs/lustre or /sys/fs/lustre (osc) on
newer ones, so the collector searches every root it is given.

Rows: llite instances as device `<fsname>` (the `-<super block hex>` suffix dropped), OSCs as
`<fsname>-OST<idx>`, so a slow OST can be told apart from a slow filesystem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from collectors.base import CollectorUnavailable, Row
from collectors.counters import Counters, per_event
from collectors.files import read_optional

DEFAULT_ROOTS = ("/proc/fs/lustre", "/sys/kernel/debug/lustre", "/sys/fs/lustre")
_LINE = re.compile(r"^(\w+)\s+(\d+)\s+samples\s+(?:\[(\w+)\]\s+)?(\d+)\s+(\d+)\s+(\d+)", re.M)
_INSTANCE = re.compile(r"-(?:osc-)?[0-9a-f]{8,}$")
_MICROSECONDS = {"usec", "usecs", "us"}

# Both layers count bytes in read_bytes/write_bytes (sum = bytes, count = calls or RPCs); the read
# latency (µs) is the VFS `read` line in llite and the `ost_read` RPC line in osc.
_LATENCY_LINE = {"llite": "read", "osc": "ost_read"}


def _is_dir(path: Path) -> bool | None:
    """Whether `path` is a directory; None when this user may not even look (a parent it cannot
    search: /sys/kernel/debug is root-only on most hosts)."""
    try:
        return path.is_dir()
    except PermissionError:
        return None


def find_roots(
    roots: Sequence[Path], layers: Sequence[str] = ("llite", "osc")
) -> tuple[list[Path], list[Path]]:
    """(roots holding one of `layers`, or existing at all when `layers` is empty; roots this user may not
    look into). An unprivileged agent meets the second kind on every host with debugfs; it is reported,
    never fatal (docs/agent.md, Privileges)."""
    present, denied = [], []
    for root in roots:
        found = [_is_dir(root / layer) for layer in layers] if layers else [_is_dir(root)]
        if any(found):
            present.append(root)
        elif None in found:
            denied.append(root)
    return present, denied


def no_client(roots: Sequence[Path], denied: Sequence[Path]) -> CollectorUnavailable:
    """Why the collector is off: no Lustre client, or none this user can see."""
    why = f"no llite/ or osc/ under {', '.join(map(str, roots))}: no Lustre client on this node"
    if denied:
        why += (
            f" that this user can read ({', '.join(map(str, denied))} not searchable: grant "
            f"CAP_DAC_READ_SEARCH where the client keeps its stats there, docs/agent.md)"
        )
    return CollectorUnavailable(why)


@dataclass(frozen=True, slots=True)
class StatLine:
    count: int
    unit: str | None
    sum: int


@dataclass(frozen=True, slots=True)
class LustreStats:
    layer: str  # "llite" | "osc"
    device: str
    lines: dict[str, StatLine]


def parse_stats(text: str) -> dict[str, StatLine]:
    """Name -> (count, unit, sum) for every sampled line of one stats file."""
    return {
        name: StatLine(int(count), unit, int(total))
        for name, count, unit, _mn, _mx, total in _LINE.findall(text)
    }


def device_name(instance: str) -> str:
    """`scratch-ffff9a8b7c6d5000` -> `scratch`;
    `scratch-OST0003-osc-ffff9a8b7c6d5000` -> `scratch-OST0003`."""
    return _INSTANCE.sub("", instance)


class LustreCollector:
    """Rows of kind "storage", source "lustre". `roots`: directories holding `llite/` and `osc/`."""

    name = "lustre"
    kind = "storage"

    def __init__(self, roots: Sequence[str | Path] = DEFAULT_ROOTS) -> None:
        self.roots = [Path(r) for r in roots]
        self.counters = Counters()
        self.skipped: list[str] = []

    def read(self) -> list[LustreStats]:
        present, denied = find_roots(self.roots)
        if not present:
            raise no_client(self.roots, denied)
        self.skipped += [f"{r}: not searchable by this user" for r in denied]
        out: dict[tuple[str, str], LustreStats] = {}
        for root in present:
            for layer in ("llite", "osc"):
                for stats in sorted((root / layer).glob("*/stats")):
                    key = (layer, device_name(stats.parent.name))
                    text = read_optional(stats, self.skipped)
                    if text is not None and key not in out:
                        out[key] = LustreStats(layer, key[1], parse_stats(text))
        return list(out.values())

    def collect(self, now_ms: int) -> list[Row]:
        self.skipped = []
        return [self._row(s, now_ms) for s in self.read()]

    def _row(self, s: LustreStats, now_ms: int) -> Row:
        c, src = self.counters, f"{s.layer}/{s.device}"
        row: Row = {"ts_ms": now_ms, "source": "lustre", "device": s.device}
        values = {}
        for direction in ("read", "write"):
            name = f"{direction}_bytes"
            line = s.lines.get(name)
            if line is not None:
                values[f"{direction}_bytes_per_s"] = c.rate(src, f"{name}.sum", line.sum, now_ms)
                values[f"{direction}_ops_per_s"] = c.rate(src, f"{name}.count", line.count, now_ms)
        latency_line = _LATENCY_LINE[s.layer]
        lat = s.lines.get(latency_line)
        if lat is not None and lat.unit in _MICROSECONDS:
            us = c.delta(src, f"{latency_line}.sum", lat.sum, now_ms)
            ops = c.delta(src, f"{latency_line}.count", lat.count, now_ms)
            ms = per_event(us, ops)
            values["read_latency_ms"] = ms / 1000.0 if ms is not None else None
        row.update({k: v for k, v in values.items() if v is not None})
        return row
