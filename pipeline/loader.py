"""The loader: records in, rows stored, bad input dead-lettered, nothing lost, nothing doubled.

Order of work for one poll: decode every record → drop repeated batch sequence numbers → convert and
validate columns per kind → insert each kind (with a deduplication token derived from the records'
positions) → record the batches in `ingested_batches` → write dead letters. The caller commits the
transport positions only after `load()` returns, so a crash anywhere before that replays the same
records; the token makes the replayed insert a no-op and the sequence tracker drops the rest.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

import pyarrow as pa

from collectors.schema import KINDS
from pipeline import catalog
from pipeline.store import Store
from pipeline.transport import Record
from pipeline.validate import Envelope, Limits, Rejected, decode, to_tables

log = logging.getLogger("goodput.loader")


@dataclass
class LoadStats:
    records: int = 0
    batches: int = 0
    rows: Counter = field(default_factory=Counter)
    dead_letters: Counter = field(default_factory=Counter)

    def add(self, other: "LoadStats") -> None:
        self.records += other.records
        self.batches += other.batches
        self.rows.update(other.rows)
        self.dead_letters.update(other.dead_letters)


class SeqTracker:
    """Which batch sequence numbers of each (cluster, node, kind) stream are already stored.

    `floor` means every seq below it is stored; `ahead` holds stored seqs above a gap. A gap that stays
    open for `max_ahead` batches is given up on (counted in `gaps`), so memory stays bounded.
    """

    def __init__(self, max_ahead: int = 100_000) -> None:
        self.floor: dict[tuple[str, str, str], int] = {}
        self.ahead: dict[tuple[str, str, str], set[int]] = {}
        self.max_ahead = max_ahead
        self.gaps = 0

    def seen(self, stream: tuple[str, str, str], seq: int) -> bool:
        return seq < self.floor.get(stream, 0) or seq in self.ahead.get(stream, ())

    def add(self, stream: tuple[str, str, str], seq: int) -> None:
        floor = self.floor.get(stream, 0)
        ahead = self.ahead.setdefault(stream, set())
        if seq == floor:
            floor += 1
            while floor in ahead:
                ahead.discard(floor)
                floor += 1
        elif seq > floor:
            ahead.add(seq)
            if len(ahead) > self.max_ahead:
                self.gaps += 1
                floor = min(ahead)
                while floor in ahead:
                    ahead.discard(floor)
                    floor += 1
        self.floor[stream] = floor

    @classmethod
    def from_store(cls, store: Store) -> "SeqTracker":
        tracker = cls()
        t = store.query_arrow(
            f"SELECT cluster, node, kind, groupArray(seq) AS seqs FROM {catalog.INGESTED_BATCHES} "
            f"GROUP BY cluster, node, kind")
        for row in t.to_pylist():
            stream = (row["cluster"], row["node"], row["kind"])
            for s in sorted(row["seqs"]):
                tracker.add(stream, s)
        return tracker


def _token(kind: str, envs: list[Envelope]) -> str:
    """Deterministic for the same records: a replay after a crash inserts nothing twice."""
    h = hashlib.sha1(kind.encode())
    for e in envs:
        h.update(f"|{e.cluster}/{e.node}/{e.seq}".encode())
    return f"{kind}-{h.hexdigest()}"


def _expected_kind(topic: str, prefix: str) -> str | None:
    if topic.startswith(prefix + "."):
        kind = topic[len(prefix) + 1:]
        return kind if kind in KINDS else None
    return None


class Loader:
    def __init__(self, store: Store, limits: Limits, *, topic_prefix: str = "goodput",
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.limits = limits
        self.topic_prefix = topic_prefix
        self.clock = clock
        self.seqs = SeqTracker.from_store(store)
        self.totals = LoadStats()

    def load(self, records: Iterable[Record]) -> LoadStats:
        """Stores one poll's records. Never raises for bad input; raises StoreError if the store fails
        (then nothing of this poll may be committed, and a retry is safe)."""
        now_ms = int(self.clock() * 1000)
        stats = LoadStats()
        dead: list[tuple[Record, str, str, Envelope | None]] = []
        accepted: list[Envelope] = []
        in_poll: set[tuple[str, str, str, int]] = set()
        for rec in records:
            stats.records += 1
            env = decode(rec.value, self.limits, _expected_kind(rec.topic, self.topic_prefix))
            if isinstance(env, Rejected):
                dead.append((rec, env.reason, env.detail, None))
                continue
            env.position = rec
            stream = (env.cluster, env.node, env.kind)
            if self.seqs.seen(stream, env.seq) or (*stream, env.seq) in in_poll:
                dead.append((rec, "duplicate_seq",
                             f"batch {env.kind} seq {env.seq} from {env.node} is already stored", env))
                continue
            in_poll.add((*stream, env.seq))
            accepted.append(env)
        tables, rejected = to_tables(accepted, now_ms, self.limits)
        bad_ids = {id(e) for e, _ in rejected}
        for e, why in rejected:
            dead.append((e.position, why.reason, why.detail, e))
        good = [e for e in accepted if id(e) not in bad_ids]
        for kind, table in tables.items():
            envs = [e for e in good if e.kind == kind]
            self.store.insert_arrow(catalog.RAW_TABLES[kind], table, _token(kind, envs))
            stats.rows[kind] += table.num_rows
        if good:
            self.store.insert_arrow(catalog.INGESTED_BATCHES, self._ledger(good), _token("ledger", good))
        if dead:
            self.store.insert_arrow(catalog.DEAD_LETTERS, self._dead_letters(dead, now_ms))
            for _, reason, detail, _env in dead:
                stats.dead_letters[reason] += 1
            log.warning("dead-lettered %d of %d records (%s)", len(dead), stats.records,
                        ", ".join(f"{r}={n}" for r, n in stats.dead_letters.most_common()))
        for e in good:
            self.seqs.add((e.cluster, e.node, e.kind), e.seq)
        stats.batches = len(good)
        self.totals.add(stats)
        return stats

    @staticmethod
    def _ledger(envs: list[Envelope]) -> pa.Table:
        return pa.table({
            "cluster": [e.cluster for e in envs],
            "node": [e.node for e in envs],
            "kind": [e.kind for e in envs],
            "seq": pa.array([e.seq for e in envs], pa.uint64()),
            "rows": pa.array([e.rows for e in envs], pa.uint32()),
            "source": [e.position.topic for e in envs],
            "partition": pa.array([e.position.partition for e in envs], pa.int32()),
            "offset": pa.array([e.position.offset for e in envs], pa.int64()),
            "sent": pa.array([e.sent_ms for e in envs], pa.timestamp("ms", tz="UTC")),
        })

    @staticmethod
    def _dead_letters(dead: list[tuple[Record, str, str, Envelope | None]], now_ms: int) -> pa.Table:
        return pa.table({
            "received_at": pa.array([now_ms] * len(dead), pa.timestamp("ms", tz="UTC")),
            "source": [r.topic for r, *_ in dead],
            "partition": pa.array([r.partition for r, *_ in dead], pa.int32()),
            "offset": pa.array([r.offset for r, *_ in dead], pa.int64()),
            "cluster": [e.cluster if e else "" for *_, e in dead],
            "node": [e.node if e else "" for *_, e in dead],
            "kind": [e.kind if e else "" for *_, e in dead],
            "reason": [reason for _, reason, _, _ in dead],
            "detail": [detail for _, _, detail, _ in dead],
            "raw": pa.array([r.value for r, *_ in dead], pa.binary()),
        })


def limits_from_config(cfg) -> Limits:
    """The validator's limits for a configuration (pipeline.config.Config)."""
    nodes = cfg.known_nodes()
    return Limits(
        cluster=cfg.cluster,
        known_nodes=frozenset(nodes) if nodes else None,
        max_rows=cfg.loader.max_batch_rows,
        max_past_ms=int(cfg.loader.max_past_days * 86_400_000),
        max_future_ms=int(cfg.loader.max_future_s * 1000),
    )
