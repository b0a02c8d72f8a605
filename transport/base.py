"""How encoded batches travel from agents to the loader.

One small interface, two implementations: `InProcessTransport` (the embedded default: the simulated
cluster and the loader share a process) and `KafkaTransport` in `transport/kafka.py`
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
    timestamp_ms: int | None = None
    """When the broker appended the record (Kafka topics with message.timestamp.type=LogAppendTime):
    a clock independent of the sending node's, against which the loader estimates that node's clock
    offset. None where no such time exists (the in-process transport, CreateTime topics, files)."""


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
    fresh Kafka topic. Records are handed out once, in send order; nothing outlives the process, so
    committing has nothing to record.
    """

    def __init__(self) -> None:
        self._log: dict[str, list[Record]] = {}
        self._pending: deque[Record] = deque()

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        log = self._log.setdefault(topic, [])
        record = Record(topic, 0, len(log), key, value)
        log.append(record)
        self._pending.append(record)

    def flush(self, timeout_s: float | None = None) -> None:
        return None

    def poll(self, max_records: int, timeout_s: float = 0.0) -> list[Record]:
        n = min(max_records, len(self._pending))
        return [self._pending.popleft() for _ in range(n)]

    def commit(self, records: Iterable[Record]) -> None:
        return None

    def close(self) -> None:
        return None
