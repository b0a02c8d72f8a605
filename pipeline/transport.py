"""How encoded batches travel from agents to the loader.

One small interface, two implementations: `InProcessTransport` (the embedded default: the simulated
cluster and the loader share a process) and `KafkaTransport` in `pipeline/kafka_transport.py`
(production). Both carry the same bytes, so the loader cannot tell them apart and every test of the
embedded path also exercises the decode/validate path that Kafka input takes.

A record's position is (topic, partition, offset): offsets only grow within a partition, and the
loader commits a position only after the rows it carried are stored (at-least-once delivery; the
store makes duplicates invisible).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Protocol


class TransportError(RuntimeError):
    """The transport could not send, fetch or commit; the message says which and what to check."""


@dataclass(frozen=True, slots=True)
class Record:
    """One message as the loader sees it, whatever carried it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


class Producer(Protocol):
    """The sending side, used by agents and the simulator."""

    def send(self, topic: str, key: bytes, value: bytes) -> None: ...

    def flush(self, timeout_s: float | None = None) -> None: ...

    def close(self) -> None: ...


class Consumer(Protocol):
    """The receiving side, used by the loader."""

    def poll(self, max_records: int, timeout_s: float) -> list[Record]: ...

    def commit(self, records: Iterable[Record]) -> None:
        """Marks everything up to and including these records as stored."""
        ...

    def close(self) -> None: ...


class InProcessTransport:
    """A producer and a consumer in one object, for one process.

    Every topic has a single partition 0; offsets start at 0 and grow by one per record, like a
    fresh Kafka topic. Committed positions are kept so that `rewind()` can replay what was fetched
    but not committed, which is what a restarted Kafka consumer sees.
    """

    def __init__(self) -> None:
        self._log: dict[str, list[Record]] = {}
        self._pending: deque[tuple[str, int]] = deque()
        self._committed: dict[str, int] = {}
        self._fetched: dict[str, int] = {}

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        log = self._log.setdefault(topic, [])
        log.append(Record(topic, 0, len(log), key, value))
        self._pending.append((topic, len(log) - 1))

    def flush(self, timeout_s: float | None = None) -> None:
        return None

    def poll(self, max_records: int, timeout_s: float = 0.0) -> list[Record]:
        out: list[Record] = []
        while self._pending and len(out) < max_records:
            topic, offset = self._pending.popleft()
            out.append(self._log[topic][offset])
            self._fetched[topic] = offset + 1
        return out

    def commit(self, records: Iterable[Record]) -> None:
        for r in records:
            self._committed[r.topic] = max(self._committed.get(r.topic, 0), r.offset + 1)

    def committed(self, topic: str) -> int:
        """The next offset a restarted consumer of `topic` would read."""
        return self._committed.get(topic, 0)

    def rewind(self) -> None:
        """Forgets uncommitted fetches, as a consumer restart does: they will be delivered again."""
        again = [
            (topic, off)
            for topic in self._log
            for off in range(self._committed.get(topic, 0), self._fetched.get(topic, 0))
        ]
        self._pending.extendleft(reversed(again))
        self._fetched = dict(self._committed)

    def close(self) -> None:
        return None
