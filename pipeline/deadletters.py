"""Reading dead letters back without Python: what `goodput dead-letters` lists and exports.

A dead letter keeps the raw message, so once its cause is fixed (a node added to a pool, a loader
upgraded for a new field) the message can be loaded again: `--export FILE` writes the raw messages one
per line, the format `goodput ingest --from FILE` reads. Dead letters are at least once (docs/loader.md:
a crash between their insert and the commit writes them again), so each is read once per position
(source, partition, offset).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import BinaryIO, Iterator

from contracts import catalog
from contracts.config import ConfigError
from contracts.envelope import message_line
from pipeline.store import Params, Store

RAW_PREFIX_BYTES = 120
"""How much of the raw message a listing shows (--json: the same, decoded with backslash escapes)."""
_REASON = re.compile(r"[a-z_]{1,64}")
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Filter:
    reason: str | None = None
    since_ms: int | None = None

    def where(self) -> tuple[str, Params]:
        """The SQL condition and its query parameters: the values given on the command line reach the
        store as data, never as SQL text (docs/security.md)."""
        parts = ["1"]
        params: dict[str, str | int] = {}
        if self.reason is not None:
            parts.append("reason = {reason:String}")
            params["reason"] = self.reason
        if self.since_ms is not None:
            parts.append("received_at >= fromUnixTimestamp64Milli({since_ms:Int64})")
            params["since_ms"] = self.since_ms
        return " AND ".join(parts), params


def parse_filter(reason: str | None, since: str | None, now_s: float | None = None) -> Filter:
    """--reason and --since as given on the command line; ConfigError (one line, exit 2) if not valid.
    `since`: an age (`90s`, `30m`, `6h`, `7d`) or an ISO 8601 date or time (UTC unless it says)."""
    if reason is not None and not _REASON.fullmatch(reason):  # a typo, said at once
        raise ConfigError(
            f"--reason {reason!r}: a reason is a word like bad_type (docs/messages.md lists them)"
        )
    return Filter(
        reason, None if since is None else _since_ms(since, time.time() if now_s is None else now_s)
    )


def _since_ms(since: str, now_s: float) -> int:
    if m := _AGO.fullmatch(since.strip()):
        return int((now_s - float(m.group(1)) * _UNIT_S[m.group(2)]) * 1000)
    try:
        t = datetime.fromisoformat(since.strip())
    except ValueError:
        raise ConfigError(
            f"--since {since!r}: give an age (90s, 30m, 6h, 7d) or an ISO 8601 time (2026-12-03T14:00)"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def _rows(store: Store, where: Filter, limit: int | None) -> Iterator[dict]:
    """Each dead letter once per position, oldest first; raw as bytes (read as hex: exact for any byte)."""
    condition, params = where.where()
    t = store.query_arrow(
        f"SELECT toUnixTimestamp64Milli(received_at) AS received_ms, source, partition, offset, cluster, "
        f"node, kind, reason, detail, hex(raw) AS raw_hex FROM {catalog.DEAD_LETTERS} "
        f"WHERE {condition} ORDER BY received_at, source, partition, offset "
        f"LIMIT 1 BY source, partition, offset{f' LIMIT {int(limit)}' if limit else ''}",
        params,
    )
    for row in t.to_pylist():
        row["raw"] = bytes.fromhex(row.pop("raw_hex"))
        yield row


def counts(store: Store, where: Filter) -> dict[str, int]:
    """Dead letters per reason (each position once), most first."""
    condition, params = where.where()
    t = store.query_arrow(
        f"SELECT reason, uniqExact(source, partition, offset) AS n FROM {catalog.DEAD_LETTERS} "
        f"WHERE {condition} GROUP BY reason ORDER BY n DESC, reason",
        params,
    )
    return dict(zip(t.column("reason").to_pylist(), t.column("n").to_pylist(), strict=True))


def listing(store: Store, where: Filter, limit: int | None) -> list[dict]:
    """What --json prints: every field, the time as ISO 8601, and a prefix of the raw message."""
    out = []
    for r in _rows(store, where, limit):
        raw = r.pop("raw")
        received = datetime.fromtimestamp(r.pop("received_ms") / 1000, timezone.utc)
        out.append(
            {
                "received_at": received.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                **r,
                "raw_bytes": len(raw),
                "raw_prefix": raw[:RAW_PREFIX_BYTES].decode("utf-8", "backslashreplace"),
            }
        )
    return out


def format_listing(rows: list[dict]) -> str:
    """One line per dead letter: time, reason, position, sender, detail, then the raw prefix."""
    lines = []
    for r in rows:
        sender = f"{r['node']}/{r['kind']}" if r["node"] else "-"
        lines.append(
            f"{r['received_at']}  {r['reason']:<16} {r['source']}:{r['partition']}:{r['offset']}  {sender}  "
            f"{r['detail']}  |  {r['raw_bytes']} B: {r['raw_prefix']!r}"
        )
    return "\n".join(lines)


def export(store: Store, where: Filter, out: BinaryIO) -> int:
    """Writes the raw messages one per line (contracts.envelope.message_line, for `goodput ingest
    --from`); returns how many. An empty message would be an empty line, which ingest skips."""
    n = 0
    for r in _rows(store, where, None):
        out.write(message_line(r["raw"]) + b"\n")
        n += 1
    return n
