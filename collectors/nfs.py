"""NFS client mounts from /proc/self/mountstats.

Per mount the kernel writes a `bytes:` line (normal read/write, direct read/write, server read/write,
pages read/written) and, under `per-op statistics`, one line per RPC operation: ops, transmissions,
major timeouts, bytes sent, bytes received, cumulative queue ms, cumulative rtt ms, cumulative execute
ms[, errors]. Throughput uses the *server* bytes (what crossed the wire, i.e. the load the filer
sees; page-cache hits are not storage load); ops and latency use the READ and WRITE op lines, and the
read latency is the mean RPC round trip per READ over the tick (schema: "NFS rtt").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from collectors.base import Row
from collectors.counters import Counters, per_event
from collectors.files import read_required

_DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (nfs4?)\b")


@dataclass(frozen=True, slots=True)
class OpStats:
    ops: int
    rtt_ms: int
    execute_ms: int


@dataclass(frozen=True, slots=True)
class NfsMount:
    """One NFS mount's cumulative counters; `server_*_bytes` are None when the bytes line is missing."""

    mount_point: str
    export: str
    server_read_bytes: int | None = None
    server_write_bytes: int | None = None
    ops: dict[str, OpStats] = field(default_factory=dict)


def _unescape(path: str) -> str:
    """mountstats octal-escapes blanks in paths (`\\040`)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mountstats(text: str) -> list[NfsMount]:
    """Every nfs/nfs4 mount in the file; other filesystems are ignored."""
    mounts: list[NfsMount] = []
    current: dict | None = None
    for line in text.splitlines():
        if line.startswith("device "):
            if current is not None:
                mounts.append(NfsMount(**current))
            m = _DEVICE.match(line)
            current = {"export": m.group(1), "mount_point": _unescape(m.group(2)), "ops": {}} if m else None
            continue
        if current is None:
            continue
        parts = line.split()
        if parts[:1] == ["bytes:"] and len(parts) >= 7:
            current["server_read_bytes"], current["server_write_bytes"] = int(parts[5]), int(parts[6])
        elif len(parts) >= 9 and parts[0].endswith(":") and parts[0][:-1].isupper() and parts[1].isdigit():
            current["ops"][parts[0][:-1]] = OpStats(int(parts[1]), int(parts[7]), int(parts[8]))
    if current is not None:
        mounts.append(NfsMount(**current))
    return mounts


class NfsCollector:
    """Rows of kind "storage", source "nfs", device = mount point.

    `mounts`: the mount points to report (None: every NFS mount). `proc_root`: procfs mount.
    """

    name = "nfs"
    kind = "storage"

    def __init__(self, proc_root: str | Path = "/proc", *, mounts: Sequence[str] | None = None) -> None:
        self.path = Path(proc_root) / "self" / "mountstats"
        self.mounts = None if mounts is None else set(mounts)
        self.counters = Counters()
        self.skipped: list[str] = []

    def collect(self, now_ms: int) -> list[Row]:
        found = parse_mountstats(read_required(self.path, "mount statistics"))
        wanted = [m for m in found if self.mounts is None or m.mount_point in self.mounts]
        missing = (self.mounts or set()) - {m.mount_point for m in wanted}
        self.skipped = [f"{self.path}: configured NFS mount {p} is not mounted" for p in sorted(missing)]
        return [self._row(m, now_ms) for m in wanted]

    def _row(self, m: NfsMount, now_ms: int) -> Row:
        c, src = self.counters, m.mount_point
        row: Row = {"ts_ms": now_ms, "source": "nfs", "device": m.mount_point}
        values = {}
        if m.server_read_bytes is not None and m.server_write_bytes is not None:  # one line sets both
            values["read_bytes_per_s"] = c.rate(src, "server_read_bytes", m.server_read_bytes, now_ms)
            values["write_bytes_per_s"] = c.rate(src, "server_write_bytes", m.server_write_bytes, now_ms)
        if "WRITE" in m.ops:
            values["write_ops_per_s"] = c.rate(src, "WRITE.ops", m.ops["WRITE"].ops, now_ms)
        if "READ" in m.ops:
            read = m.ops["READ"]
            ops = c.delta(src, "READ.ops", read.ops, now_ms)
            values["read_ops_per_s"] = ops.per_s if ops is not None else None
            values["read_latency_ms"] = per_event(c.delta(src, "READ.rtt_ms", read.rtt_ms, now_ms), ops)
        row.update({k: v for k, v in values.items() if v is not None})
        return row
