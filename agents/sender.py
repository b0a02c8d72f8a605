"""Moves spooled batches into Kafka, in order, from a thread of its own.

The spool is a write-ahead queue: the collection loop appends every batch to it and never waits for
Kafka, and this sender reads the spool from its acknowledged position, hands a window of batches to the
producer, acknowledges each batch in the spool the moment Kafka acknowledges it, and waits until each
one is acknowledged or has failed. Why write-ahead rather than "send, and spool on failure":
- order: a batch that failed cannot be overtaken by a newer one that went straight to Kafka, because
  nothing goes straight to Kafka; each (node, kind) stream reaches its partition in seq order;
- a crash (SIGKILL, OOM, power) loses nothing that reached the spool, healthy or not;
- one code path for the healthy case, outages and restarts, so the outage path is exercised every
  second instead of only on the bad day.

The cost is a small sequential write per batch (a few KB/s on a GPU node).

Failure handling: while brokers are down the producer itself retries within its delivery timeout
(idempotent, so a retried batch is stored once); what it gives up on stays unacknowledged here and is
sent again after a backoff. A producer that cannot even be created (no broker answers at start-up) is
retried with backoff while batches keep accumulating in the spool.

What can still reach Kafka twice (docs/agent.md, "Delivery"): a batch that the broker appended but
whose acknowledgement never reached this process, and that is then sent again by a *new* producer
(after a crash and restart, or after the producer gave up on it at its delivery timeout). Nothing on
the agent's side can tell such a batch from one that was lost, and the agent's credentials may not
read the topics to find out; the loader stores each (node, kind, seq) once.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import time
from typing import Callable, Protocol

from tenacity import Retrying, retry_if_result, wait_exponential

from agents.outage import OutageLog
from agents.spool import Spool, SpoolEntry
from transport.base import TransportError
from transport.kafka import KafkaSendError

log = logging.getLogger(__name__)


class _Round(enum.Enum):
    """How one round of the sender's loop ended."""

    NEXT = "go on"
    FAILED = "back off, then go on"
    DONE = "stop sending"


class SendMetrics(Protocol):
    def delivered(self, entries: list[SpoolEntry], replayed: int, now_s: float) -> None: ...

    def failed(self, entries: list[SpoolEntry]) -> None: ...


class KafkaProducerLike(Protocol):
    @property
    def pending_bytes(self) -> int: ...  # read-only: KafkaProducerTransport computes it

    def send(
        self, topic: str, key: bytes, value: bytes, on_delivered: Callable[[], None] | None = None
    ) -> None: ...

    def flush(self, timeout_s: float | None = None) -> None: ...

    def close(self, timeout_s: float | None = None) -> None: ...


class SpoolSender:
    def __init__(
        self,
        spool: Spool,
        make_producer: Callable[[], KafkaProducerLike],
        metrics: SendMetrics,
        *,
        window: int = 1000,
        flush_step_s: float = 1.0,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        stall_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spool = spool
        self.make_producer = make_producer
        self.metrics = metrics
        self.window = window
        self.flush_step_s = flush_step_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.stall_s = stall_s
        self.clock = clock
        self.outage = OutageLog()
        self._producer: KafkaProducerLike | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._deadline: float | None = None
        self._thread: threading.Thread | None = None
        # Entries at or before this spool position were waiting before they were sent: present at
        # start-up, or sent once and not delivered. Delivering them counts as a replay.
        self._replay_mark = spool.last_position() or (-1, -1)

    # ---------------------------------------------------------------- thread control

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="goodput-sender", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """New batches are in the spool."""
        self._wake.set()

    def stop(self, timeout_s: float) -> None:
        """Keeps sending for at most `timeout_s` (until the spool is empty), then stops; whatever is
        left stays in the spool for the next start."""
        self._deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s + self.flush_step_s + 5.0)
        if self._producer is not None:
            self._producer.close(timeout_s=0)
            self._producer = None

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    # ---------------------------------------------------------------- loop

    def _loop(self) -> None:
        """Rounds until stopped. A round that failed (no producer, or Kafka did not take the whole
        window) is repeated after a backoff from backoff_s, doubling up to backoff_max_s; a stop cuts
        the backoff short. Any other round starts the backoff over."""
        retrying = Retrying(
            retry=retry_if_result(lambda r: r is _Round.FAILED),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            stop=lambda _state: self._out_of_time(),
            sleep=self._interruptible_sleep,
            retry_error_callback=lambda _state: _Round.DONE,
        )
        while not self._out_of_time():
            if retrying(self._round) is _Round.DONE:
                return

    def _interruptible_sleep(self, seconds: float) -> None:
        """tenacity's sleep: a stop cuts the backoff short."""
        self._stop.wait(seconds)

    def _round(self) -> _Round:
        """Connects if need be, then sends the next window from the spool or waits for one."""
        if self._producer is None and not self._connect():
            return _Round.DONE if self._stop.is_set() else _Round.FAILED
        entries = list(itertools.islice(self.spool.replay(), self.window))
        if not entries:
            if self._stop.is_set():
                return _Round.DONE
            self._wake.wait(1.0)
            self._wake.clear()
            return _Round.NEXT
        return _Round.NEXT if self.send_window(entries) == len(entries) else _Round.FAILED

    def _connect(self) -> bool:
        try:
            self._producer = self.make_producer()
        except TransportError as e:
            self.outage.failed(f"the producer could not start: {e}", self.spool.stats.batches)
            return False
        log.info("Kafka producer connected")
        return True

    def send_window(self, entries: list[SpoolEntry]) -> int:
        """Sends `entries` (oldest first) and waits for the outcome; each batch is acknowledged in the
        spool the moment Kafka acknowledges it (see _Window). Returns how many entries, from the
        first, were delivered."""
        producer = self._producer
        assert producer is not None
        window = _Window(self.spool, entries)
        sent = 0
        refused: KafkaSendError | None = None
        for i, e in enumerate(entries):
            try:
                producer.send(e.topic, e.key or b"", e.value, on_delivered=window.callback(i))
            except KafkaSendError as err:
                refused = err
                break
            sent += 1
        settled = self._wait(producer)
        delivered = window.delivered()
        if delivered:
            replayed = sum(1 for e in delivered if (e.segment, e.index) <= self._replay_mark)
            self.metrics.delivered(delivered, replayed, self.clock())
            self.outage.delivered(self.spool.stats.batches)
        if not settled:  # out of time with records still pending: their fate is unknown
            return window.prefix()
        attempted = sent + (1 if refused else 0)
        not_delivered = window.not_delivered(attempted)
        if not_delivered:
            last = entries[attempted - 1]  # whatever of the round is sent again counts as a replay
            self._replay_mark = max(self._replay_mark, (last.segment, last.index))
            self.metrics.failed(not_delivered)
            why = refused if refused and len(not_delivered) == 1 else "delivery failed"
            self.outage.failed(
                f"{len(entries) - len(delivered)} of {len(entries)} batches not taken: {why}",
                self.spool.stats.batches,
            )
        return window.prefix()

    def _wait(self, producer: KafkaProducerLike) -> bool:
        """Flushes until nothing sent is pending (True), or until the stop deadline (False). Records
        pending for `stall_s` without any being acknowledged count as an outage for the log (the
        producer keeps retrying them)."""
        progress_at, pending = time.monotonic(), producer.pending_bytes
        while True:
            try:
                producer.flush(self.flush_step_s)
                return True
            except KafkaSendError:
                if producer.pending_bytes == 0:
                    return True
            except TransportError as err:  # still pending: the producer is retrying; keep waiting
                if producer.pending_bytes < pending:
                    progress_at, pending = time.monotonic(), producer.pending_bytes
                elif time.monotonic() - progress_at >= self.stall_s:
                    self.outage.failed(
                        f"no acknowledgement for {time.monotonic() - progress_at:.0f} s: {err}",
                        self.spool.stats.batches,
                    )
            if self._out_of_time():
                return False


class _Window:
    """One round's batches and which of them Kafka acknowledged.

    Each acknowledgement reaches the spool as it arrives, from the producer's network thread, as
    `Spool.ack_topic` of the newest batch of that topic whose predecessors in the round are all
    delivered. Why not once the whole round has settled, as before: a round can stay unsettled for
    the producer's whole delivery timeout (120 s: a broker that went down mid-round, one topic that
    cannot be written), and a crash or a stop in that time sent every delivered batch of the round
    again at the next start, while the spool gauge counted them as waiting.
    """

    def __init__(self, spool: Spool, entries: list[SpoolEntry]) -> None:
        self.spool = spool
        self.entries = entries
        self._lock = threading.Lock()
        self._done = [False] * len(entries)
        self._by_topic: dict[str, list[int]] = {}
        for i, e in enumerate(entries):
            self._by_topic.setdefault(e.topic, []).append(i)
        self._topic_next = dict.fromkeys(self._by_topic, 0)

    def callback(self, i: int) -> Callable[[], None]:
        return lambda: self._delivered(i)

    def _delivered(self, i: int) -> None:
        with self._lock:
            self._done[i] = True
            topic = self.entries[i].topic
            order, k = self._by_topic[topic], self._topic_next[topic]
            while k < len(order) and self._done[order[k]]:
                k += 1
            if k == self._topic_next[topic]:
                return  # an earlier batch of this topic is still in flight
            self._topic_next[topic] = k
            try:
                self.spool.ack_topic(self.entries[order[k - 1]])
            except OSError as e:  # the next round acknowledges it again; only a crash before then re-sends
                log.warning("spool: could not record a delivery in %s: %s", self.spool.dir, e)

    def delivered(self) -> list[SpoolEntry]:
        with self._lock:
            return [e for e, done in zip(self.entries, self._done, strict=True) if done]

    def not_delivered(self, attempted: int) -> list[SpoolEntry]:
        with self._lock:
            return [e for e, done in zip(self.entries[:attempted], self._done, strict=False) if not done]

    def prefix(self) -> int:
        with self._lock:
            return next((i for i, done in enumerate(self._done) if not done), len(self._done))
