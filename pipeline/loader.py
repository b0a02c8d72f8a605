"""The loader: records in, rows stored, bad input dead-lettered, nothing lost, nothing doubled.

Order of work for one poll: decode every record → drop repeated batch sequence numbers → convert and
validate columns per kind → insert each kind (with a deduplication token derived from the batches'
identities) → record the batches in `ingested_batches` → write dead letters. The caller commits the
transport positions only after `load()` returns, so a crash anywhere before that replays the same
records; the token makes the replayed insert a no-op and the sequence tracker drops the rest.

A replayed record is told apart from an agent sending a batch twice by its position: a record whose
batch is stored and whose offset is at or below the highest offset stored from its partition is Kafka
delivering it again (after a restart or a rebalance) and is skipped quietly (`redelivered`); the same
seq at a new position is the agent's duplicate and is dead-lettered (`duplicate_seq`). docs/loader.md
lists every failure case and which of these mechanisms covers it.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from contracts import catalog
from contracts.schema import KINDS
from pipeline.store import Store
from pipeline.validate import Envelope, Limits, Rejected, decode, to_tables
from transport.base import Record

log = logging.getLogger("goodput.loader")


@dataclass
class LoadStats:
    """What one load (or, summed with `add`, a whole run) did; the loader service exports it as metrics."""

    records: int = 0
    batches: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    dead_letters: Counter = field(default_factory=Counter)
    redelivered: int = 0
    decode_s: float = 0.0
    """Parsing, dedup and validation (pipeline.validate): CPU in this process."""
    insert_s: float = 0.0
    """Store inserts (raw tables, ledger, dead letters)."""
    clock_offsets_ms: dict[str, int] = field(default_factory=dict)
    """Per node, the largest sent_ms - broker append time of its stored batches (records with an append
    time only): a lower bound of the node's clock offset, tight for the batch delivered fastest."""

    def add(self, other: "LoadStats") -> None:
        self.records += other.records
        self.batches.update(other.batches)
        self.rows.update(other.rows)
        self.dead_letters.update(other.dead_letters)
        self.redelivered += other.redelivered
        self.decode_s += other.decode_s
        self.insert_s += other.insert_s
        for node, off in other.clock_offsets_ms.items():
            self.clock_offsets_ms[node] = max(off, self.clock_offsets_ms.get(node, off))


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
            f"GROUP BY cluster, node, kind"
        )
        for row in t.to_pylist():
            stream = (row["cluster"], row["node"], row["kind"])
            for s in sorted(row["seqs"]):
                tracker.add(stream, s)
        return tracker


def _stored_offsets(store: Store) -> dict[tuple[str, int], int]:
    """Per (topic or file, partition): the highest offset of a stored batch, from the ledger."""
    t = store.query_arrow(
        f"SELECT source, partition, max(offset) AS top FROM {catalog.INGESTED_BATCHES} "
        f"GROUP BY source, partition"
    )
    return {(r["source"], r["partition"]): r["top"] for r in t.to_pylist()}


def _token(table: str, identities: Iterable[str]) -> str:
    """An insert's deduplication token, from what it holds (batches' cluster/node/seq, or dead letters'
    topic/partition/offset): a replay of the same records forms the same token, which ClickHouse drops."""
    h = hashlib.sha1(table.encode())
    for identity in identities:
        h.update(f"|{identity}".encode())
    return f"{table}-{h.hexdigest()}"


def _duplicate(env: Envelope) -> str:
    return f"batch {env.kind} seq {env.seq} from {env.node} is already stored"


def _batch_ids(envs: list[Envelope]) -> Iterator[str]:
    return (f"{e.cluster}/{e.node}/{e.seq}" for e in envs)


@contextmanager
def cycle_collector_paused():
    """Decoding builds a poll's worth of acyclic objects (orjson's lists and dicts, ~10 per row); the
    cycle collector would walk them again and again while they pile up, for nothing. A load runs with
    it paused (bench/bench_loader.py measures the gain); its objects are freed by reference counting
    when the load returns, before the collector is back."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _expected_kind(topic: str, prefix: str) -> str | None:
    if topic.startswith(prefix + "."):
        kind = topic[len(prefix) + 1 :]
        return kind if kind in KINDS else None
    return None


class Loader:
    def __init__(
        self,
        store: Store,
        limits: Limits,
        *,
        topic_prefix: str = "goodput",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.limits = limits
        self.topic_prefix = topic_prefix
        self.clock = clock
        self.totals = LoadStats()
        self.refresh()

    def refresh(self) -> None:
        """Re-reads which batches and offsets are stored. The service calls it when Kafka hands this
        process new partitions: with a shared store, another loader may have stored their batches."""
        self.seqs = SeqTracker.from_store(self.store)
        self.stored_offsets = _stored_offsets(self.store)

    def load(self, records: Iterable[Record]) -> LoadStats:
        """Stores one poll's records. Never raises for bad input; raises StoreError if the store fails
        (then nothing of this poll may be committed, and a retry is safe)."""
        with cycle_collector_paused():  # and the decoded envelopes are gone before it runs again
            return self._load(records)

    def _load(self, records: Iterable[Record]) -> LoadStats:
        started = time.perf_counter()
        now_ms = int(self.clock() * 1000)
        stats = LoadStats()
        dead: list[tuple[Record, str, str, Envelope | None]] = []
        decoded: list[Envelope] = []
        positions: set[tuple[str, int, int]] = set()  # of this load's records
        for rec in records:
            stats.records += 1
            env = self._decode(rec, positions, dead, stats)
            if env is not None:
                decoded.append(env)
        accepted = self._one_per_seq(decoded, now_ms, dead)
        tables, rejected = to_tables(accepted, now_ms, self.limits)
        bad_ids = {id(e) for e, _ in rejected}
        for e, why in rejected:
            dead.append((e.position, why.reason, why.detail, e))
        good = [e for e in accepted if id(e) not in bad_ids]
        inserting = time.perf_counter()
        stats.decode_s = inserting - started
        for kind, table in tables.items():
            envs = [e for e in good if e.kind == kind]
            self.store.insert_arrow(catalog.RAW_TABLES[kind], table, _token(kind, _batch_ids(envs)))
            stats.rows[kind] += table.num_rows
            stats.batches[kind] += len(envs)
        if good:
            self.store.insert_arrow(
                catalog.INGESTED_BATCHES, self._ledger(good), _token("ledger", _batch_ids(good))
            )
        if (
            dead
        ):  # the token takes effect where dead_letters deduplicates (replicated tables); see docs/loader.md
            self.store.insert_arrow(
                catalog.DEAD_LETTERS,
                self._dead_letters(dead, now_ms),
                _token("dead", (f"{r.topic}/{r.partition}/{r.offset}" for r, *_ in dead)),
            )
            for _, reason, _detail, _env in dead:
                stats.dead_letters[reason] += 1
            log.warning(
                "dead-lettered %d of %d records (%s)",
                len(dead),
                stats.records,
                ", ".join(f"{r}={n}" for r, n in stats.dead_letters.most_common()),
            )
        stats.insert_s = time.perf_counter() - inserting
        for e in good:
            if (appended := e.position.timestamp_ms) is not None:
                off = e.sent_ms - appended
                stats.clock_offsets_ms[e.node] = max(off, stats.clock_offsets_ms.get(e.node, off))
            self.seqs.add((e.cluster, e.node, e.kind), e.seq)
            where = (e.position.topic, e.position.partition)
            self.stored_offsets[where] = max(self.stored_offsets.get(where, -1), e.position.offset)
        self.totals.add(stats)
        return stats

    def _decode(
        self, rec: Record, positions: set[tuple[str, int, int]], dead: list, stats: LoadStats
    ) -> Envelope | None:
        """The record's envelope if it is new; else counts it as redelivered or dead-letters it."""
        position = (rec.topic, rec.partition, rec.offset)
        if position in positions:  # the same record fetched twice around a rebalance
            stats.redelivered += 1
            return None
        positions.add(position)
        env = decode(rec.value, self.limits, _expected_kind(rec.topic, self.topic_prefix))
        if isinstance(env, Rejected):
            dead.append((rec, env.reason, env.detail, None))
            return None
        env.position = rec
        stream = (env.cluster, env.node, env.kind)
        if self.seqs.seen(stream, env.seq) and rec.offset <= self.stored_offsets.get(
            (rec.topic, rec.partition), -1
        ):
            stats.redelivered += 1  # stored before, and Kafka delivers its position again
            return None
        if self.seqs.seen(stream, env.seq):
            dead.append((rec, "duplicate_seq", _duplicate(env), env))
            return None
        return env

    def _one_per_seq(self, envs: list[Envelope], now_ms: int, dead: list) -> list[Envelope]:
        """The envelopes to convert: one per batch identity. Only a batch that will be stored may occupy
        its seq, so where one poll holds several records of the same (cluster, node, kind, seq), each
        is validated on its own, in order: the first valid one wins, invalid ones are dead-lettered with
        their own reason, later valid ones as `duplicate_seq`. Rare (an agent resending within one
        poll), so the common path keeps converting all envelopes of a kind at once."""
        count = Counter((e.cluster, e.node, e.kind, e.seq) for e in envs)
        if all(n == 1 for n in count.values()):
            return envs
        winner: dict[tuple[str, str, str, int], Envelope] = {}
        out = []
        for e in envs:
            identity = (e.cluster, e.node, e.kind, e.seq)
            if count[identity] == 1:
                out.append(e)
            elif identity in winner:
                dead.append((e.position, "duplicate_seq", _duplicate(e), e))
            else:
                _, rejected = to_tables([e], now_ms, self.limits)
                if rejected:
                    why = rejected[0][1]
                    dead.append((e.position, why.reason, why.detail, e))
                else:
                    winner[identity] = e
                    out.append(e)
        return out

    @staticmethod
    def _ledger(envs: list[Envelope]) -> pa.Table:
        return pa.table(
            {
                "cluster": [e.cluster for e in envs],
                "node": [e.node for e in envs],
                "kind": [e.kind for e in envs],
                "seq": pa.array([e.seq for e in envs], pa.uint64()),
                "rows": pa.array([e.rows for e in envs], pa.uint32()),
                "source": [e.position.topic for e in envs],
                "partition": pa.array([e.position.partition for e in envs], pa.int32()),
                "offset": pa.array([e.position.offset for e in envs], pa.int64()),
                "sent": pa.array([e.sent_ms for e in envs], pa.timestamp("ms", tz="UTC")),
                "appended": pa.array([e.position.timestamp_ms for e in envs], pa.timestamp("ms", tz="UTC")),
            }
        )

    @staticmethod
    def _dead_letters(dead: list[tuple[Record, str, str, Envelope | None]], now_ms: int) -> pa.Table:
        return pa.table(
            {
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
            }
        )


def limits_from_config(cfg) -> Limits:
    """The validator's limits for a configuration (contracts.config.Config)."""
    nodes = cfg.known_nodes()
    return Limits(
        cluster=cfg.cluster.name,
        known_nodes=frozenset(nodes) if nodes else None,
        inventory={n: p.gpus_per_node for p in cfg.pools for n in p.nodes} if cfg.pools else None,
        max_rows=cfg.loader.max_batch_rows,
        max_past_ms=int(cfg.loader.max_past_days * 86_400_000),
        max_future_ms=int(cfg.loader.max_future_s * 1000),
    )
