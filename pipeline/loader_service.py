"""The Kafka → store loader service behind `goodput ingest --config FILE` (docs/loader.md).

One loop in one thread: poll the `<prefix>.<kind>` topics in a consumer group, gather records until a
flush is due (by count, bytes or age), hand them to `Loader.load`, and only after it returned commit
their offsets. What can fail outside the input is retried, never skipped:

- the store fails (StoreError): the same records are loaded again after a backoff, nothing is committed
  meanwhile and nothing new is polled, so an outage of any length loses nothing (the records stay in
  Kafka) and doubles nothing (a repeated insert carries the same deduplication token);
- Kafka fails (TransportError): making the consumer, or the failed call, is repeated after a backoff,
  with a log line that names the brokers and what to check; a refused commit only means those records
  come again, which the loader recognises;
- bad input never stops it: the loader dead-letters it.

SIGTERM/SIGINT (`install_signal_handlers`) set the `stop` event: the loop loads and commits what it
holds, leaves the group (its partitions move at once) and returns; the caller closes the store. Tests
drive the same object in-process with their own `stop` event and clock.

Several processes with one `group_id` split the partitions between them (Kafka's group protocol). When
this process is given partitions it did not have, the loader re-reads the batch ledger first: with a
shared store, another loader may have stored their latest batches.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, TypeVar

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter  # collections.Counter tallies records here
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from contracts import catalog
from contracts.config import Config
from contracts.exporter import MetricsEndpoint, declare
from contracts.schema import KINDS, topic_for
from pipeline.compaction import compact_closed_days
from pipeline.goodput_exporter import GoodputExporter
from pipeline.loader import Loader, LoadStats, limits_from_config
from pipeline.progress import Progress
from pipeline.store import Store, StoreError
from transport.base import Record, TransportError
from transport.kafka import KafkaConsumerTransport, KafkaSettings

log = logging.getLogger("goodput.loader.service")

UNASSIGNED_WARN_S = 30.0
"""How long the loader may own no partition before it says so (and again every this many seconds)."""
CLOCK_WINDOW_S = 600.0
"""goodput_loader_node_clock_offset_seconds: the envelope over this many seconds of batches; a node that
sent nothing with a broker append time for that long loses its series."""
_T = TypeVar("_T")


@dataclass(frozen=True)
class LoaderSeries:
    """catalog.LOADER_METRICS as attributes (contracts.exporter.attribute names them)."""

    loader_consumer_lag_records: Gauge
    loader_assigned_partitions: Gauge
    loader_records_consumed: PromCounter
    loader_rows_loaded: PromCounter
    loader_batches_loaded: PromCounter
    loader_dead_letters: PromCounter
    loader_redelivered_records: PromCounter
    loader_batches_committed: PromCounter
    loader_commit_failures: PromCounter
    loader_last_commit_timestamp_seconds: Gauge
    loader_store_errors: PromCounter
    loader_transport_errors: PromCounter
    loader_load_duration_seconds: Histogram
    loader_analyzer_last_success_timestamp_seconds: Gauge
    loader_live_analysis_last_success_timestamp_seconds: Gauge
    loader_compacted_partitions: PromCounter
    loader_node_clock_offset_seconds: Gauge


class LoaderMetrics(MetricsEndpoint):
    """The loader's Prometheus series, built from `catalog.LOADER_METRICS` on a private registry and
    served on `metrics_address`."""

    def __init__(self) -> None:
        super().__init__(CollectorRegistry(auto_describe=True))
        self.m = declare(LoaderSeries, catalog.LOADER_METRICS, self.registry)
        self._lag_labels: set[tuple[str, str]] = set()
        self._clock: dict[str, list[tuple[float, int]]] = {}

    def loaded(self, stats: LoadStats, consumed: Counter, now_s: float | None = None) -> None:
        for topic, n in consumed.items():
            self.m.loader_records_consumed.labels(topic).inc(n)
        for kind, n in stats.rows.items():
            self.m.loader_rows_loaded.labels(kind).inc(n)
        for kind, n in stats.batches.items():
            self.m.loader_batches_loaded.labels(kind).inc(n)
        for reason, n in stats.dead_letters.items():
            self.m.loader_dead_letters.labels(reason).inc(n)
        self.m.loader_redelivered_records.inc(stats.redelivered)
        self.m.loader_load_duration_seconds.labels("decode").observe(stats.decode_s)
        self.m.loader_load_duration_seconds.labels("insert").observe(stats.insert_s)
        self.clock_offsets(stats.clock_offsets_ms, time.time() if now_s is None else now_s)

    def clock_offsets(self, offsets_ms: dict[str, int], now_s: float) -> None:
        """Per node, the largest sent - appended of the last CLOCK_WINDOW_S (each load's maximum kept)."""
        for node, off in offsets_ms.items():
            self._clock.setdefault(node, []).append((now_s, off))
        for node in list(self._clock):
            kept = [(t, o) for t, o in self._clock[node] if t > now_s - CLOCK_WINDOW_S]
            if kept:
                self._clock[node] = kept
                self.m.loader_node_clock_offset_seconds.labels(node).set(max(o for _, o in kept) / 1000)
            else:
                del self._clock[node]
                self.m.loader_node_clock_offset_seconds.remove(node)

    def committed(self, wall_s: float) -> None:
        self.m.loader_batches_committed.inc()
        self.m.loader_last_commit_timestamp_seconds.set(wall_s)

    def assignment(self, parts: set[tuple[str, int]], topics: list[str]) -> None:
        per_topic = Counter(t for t, _ in parts)
        for topic in topics:
            self.m.loader_assigned_partitions.labels(topic).set(per_topic[topic])

    def lag(self, lag: dict[tuple[str, int], int]) -> None:
        gauge = self.m.loader_consumer_lag_records
        labels = {(t, str(p)) for t, p in lag}
        for gone in self._lag_labels - labels:  # partitions this process no longer owns
            gauge.remove(*gone)
        for (t, p), n in lag.items():
            gauge.labels(t, str(p)).set(n)
        self._lag_labels = labels


@dataclass
class _Pending:
    """Records polled but not yet loaded, and when the oldest arrived."""

    records: list[Record]
    bytes: int = 0
    since: float = 0.0


class LoaderService:
    """Consumes the kind topics in a consumer group and loads them; `run()` until `stop` is set (or,
    with `until_caught_up`, until this member's partitions have no lag left)."""

    def __init__(
        self,
        cfg: Config,
        store: Store,
        kafka: KafkaSettings,
        *,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        until_caught_up: bool = False,
        analyze: Callable[[], None] | None = None,
        analyze_every_s: float | None = None,
        live: Callable[[], None] | None = None,
        progress: bool = False,
    ) -> None:
        self.cfg = cfg
        self.lc = cfg.loader
        self.kafka = kafka
        self.stop = stop or threading.Event()
        self.clock = clock
        self.until_caught_up = until_caught_up
        self.analyze = analyze
        self.analyze_every_s = self.lc.analyze_every_s if analyze_every_s is None else analyze_every_s
        self.live = live if self.analyze_every_s and self.lc.live_every_s else None
        self.topics = [topic_for(k, cfg.transport.topic_prefix) for k in KINDS]
        self.loader = Loader(store, limits_from_config(cfg), topic_prefix=cfg.transport.topic_prefix)
        self.metrics = LoaderMetrics()
        self.store = store
        self.exporter: GoodputExporter | None = None
        if analyze is not None and self.analyze_every_s:
            # the analyzers' results, on the same endpoint, refreshed after each run (docs/alerts.md)
            self.exporter = GoodputExporter(cfg)
            self.metrics.registry.register(self.exporter)
        self.metrics_port: int | None = None
        self._progress = Progress("ingest", 1) if progress else None
        self._consumer: KafkaConsumerTransport | None = None
        self._pending = _Pending([])
        self._assigned: set[tuple[str, int]] = set()
        self._unassigned_since = clock()
        self._lag: dict[tuple[str, int], int] = {}
        self._lag_at = -float("inf")
        self._consumed_since_lag = 0
        self._next_analyze = clock() + self.analyze_every_s
        self._next_live = clock() + self.lc.live_every_s

    # ---- the loop ----

    def run(self) -> LoadStats:
        """Runs until stopped or caught up; returns what was loaded (the loader's totals)."""
        endpoint = self.lc.metrics_endpoint
        if endpoint:
            self.metrics_port = self.metrics.serve(*endpoint)[1]
            log.info("metrics on http://%s:%d/metrics", endpoint[0], self.metrics_port)
        try:
            self._consumer = self._retry(
                "connect to Kafka",
                TransportError,
                self._connect,
                self.metrics.m.loader_transport_errors,
                "connect",
            )
            while self._consumer is not None and not self.stop.is_set():
                got = self._poll()
                if self._flush_due():
                    self._flush()
                self._report()
                self._maybe_analyze()
                if self.until_caught_up and not got and not self._pending.records and self._caught_up():
                    log.info("caught up: no lag on %d partitions", len(self._assigned))
                    break
            if self._pending.records and self._consumer is not None:
                self._flush()  # stopping: one more try; if the store is still down nothing is committed
            if self.until_caught_up and self.analyze and self.analyze_every_s:
                self._run_analyze()
        finally:
            self._close()
        return self.loader.totals

    def _connect(self) -> KafkaConsumerTransport:
        consumer = KafkaConsumerTransport(self.kafka, self.topics)
        log.info(
            "joining consumer group %s on %s for %s",
            consumer.group_id,
            self.kafka.bootstrap,
            ", ".join(self.topics),
        )
        return consumer

    def _poll(self) -> int:
        p = self._pending
        room = min(self.lc.max_poll_records, self.lc.flush_records - len(p.records))
        wait = 0.5 if not p.records else max(0.0, min(0.5, p.since + self.lc.flush_interval_s - self.clock()))
        assert self._consumer is not None  # run() connected before polling
        try:
            records = self._consumer.poll(room, wait)
        except TransportError as e:
            self.metrics.m.loader_transport_errors.labels("poll").inc()
            log.warning("%s; retrying in %.1f s", e, self.lc.retry_backoff_s)
            self.stop.wait(self.lc.retry_backoff_s)
            return 0
        self._watch_assignment()
        if records:
            if not p.records:
                p.since = self.clock()
            p.records.extend(records)
            p.bytes += sum(len(r.value) for r in records)
        return len(records)

    def _flush_due(self) -> bool:
        p = self._pending
        return bool(p.records) and (
            len(p.records) >= self.lc.flush_records
            or p.bytes >= self.lc.flush_bytes
            or self.clock() - p.since >= self.lc.flush_interval_s
        )

    def _flush(self) -> bool:
        """Loads the pending records, then commits them. False when stopped before the load succeeded."""
        records = self._pending.records
        stats = self._retry(
            f"load {len(records)} records into the store (their offsets stay uncommitted)",
            StoreError,
            lambda: self.loader.load(records),
            self.metrics.m.loader_store_errors,
            "load",
        )
        if stats is None:
            return False
        self._pending = _Pending([])
        self.metrics.loaded(stats, Counter(r.topic for r in records))
        assert self._consumer is not None  # run() connected before polling
        try:
            self._consumer.commit(records)
        except TransportError as e:
            self.metrics.m.loader_commit_failures.inc()
            log.warning("%s; the stored records will be delivered again and skipped as already stored", e)
            return True
        self.metrics.committed(time.time())
        self._consumed_since_lag += len(records)
        return True

    def _retry(
        self, what: str, errors: type[Exception], fn: Callable[[], _T], metric: PromCounter, operation: str
    ) -> _T | None:
        """fn() until it succeeds, backing off from retry_backoff_s, doubling up to retry_backoff_max_s;
        None if `stop` was set meanwhile (the backoff ends at once and fn is not called again)."""

        def failed(state: RetryCallState) -> None:
            metric.labels(operation).inc()
            log.error(
                "could not %s: %s; retrying in %.1f s",
                what,
                state.outcome and state.outcome.exception(),
                state.next_action.sleep if state.next_action else 0.0,
            )

        def interruptible_sleep(seconds: float) -> None:
            self.stop.wait(seconds)

        retrying = Retrying(
            retry=retry_if_exception_type(errors),
            wait=wait_exponential(multiplier=self.lc.retry_backoff_s, max=self.lc.retry_backoff_max_s),
            sleep=interruptible_sleep,
            before_sleep=failed,
        )
        for attempt in retrying:
            if attempt.retry_state.attempt_number > 1 and self.stop.is_set():
                return None
            with attempt:
                return fn()
        return None  # not reached: without a stop condition, Retrying ends only by fn() returning

    # ---- group membership, lag, progress ----

    def _watch_assignment(self) -> None:
        assert self._consumer is not None  # run() connected before polling
        now = self._consumer.assignment()
        if now == self._assigned:
            if not now and self.clock() - self._unassigned_since >= UNASSIGNED_WARN_S:
                log.warning(
                    "no partition of %s assigned to this loader for %.0f s in group %s: %s, and that "
                    "the topics exist (transport.kafka.ensure_topics). A member that died "
                    "holds its partitions until its session times out; a group with more loaders "
                    "than partitions leaves the extra ones idle",
                    ", ".join(self.topics),
                    UNASSIGNED_WARN_S,
                    self._consumer.group_id,
                    self.kafka.what_to_check(),
                )
                self._unassigned_since = self.clock()
            return
        gained, lost = now - self._assigned, self._assigned - now
        log.info(
            "partitions now %d (+%d, -%d) in group %s",
            len(now),
            len(gained),
            len(lost),
            self._consumer.group_id,
        )
        if lost:  # not ours any more: their new owner loads them from the committed offset
            self._pending.records = [r for r in self._pending.records if (r.topic, r.partition) in now]
            self._pending.bytes = sum(len(r.value) for r in self._pending.records)
        if gained:
            self._retry(
                "re-read the batch ledger",
                StoreError,
                self.loader.refresh,
                self.metrics.m.loader_store_errors,
                "refresh",
            )
        self._assigned = now
        self._unassigned_since = self.clock()
        self.metrics.assignment(now, self.topics)
        self._lag_at = -float("inf")  # new partitions: ask for their lag now

    def _refresh_lag(self) -> bool:
        assert self._consumer is not None  # run() connected before polling
        try:
            self._lag = self._consumer.lag()
        except TransportError as e:
            self.metrics.m.loader_transport_errors.labels("lag").inc()
            log.warning("%s", e)
            return False
        self._lag_at = self.clock()
        self._consumed_since_lag = 0
        self.metrics.lag(self._lag)
        return True

    def _caught_up(self) -> bool:
        return bool(self._assigned) and self._refresh_lag() and not any(self._lag.values())

    def _report(self) -> None:
        if self.clock() - self._lag_at >= self.lc.lag_interval_s:
            self._refresh_lag()
        if self._progress is not None:
            t = self.loader.totals
            left = max(0, sum(self._lag.values()) - self._consumed_since_lag)
            elapsed = max(time.perf_counter() - self._progress.started, 1e-9)
            self._progress.update(
                t.records,
                f"{t.records / elapsed:,.0f} records/s "
                f"{sum(t.rows.values()) / elapsed:,.0f} rows/s, lag {left:,}",
                total=t.records + left,
            )

    # ---- embedded analyzers ----

    def _maybe_analyze(self) -> None:
        if self.analyze and self.analyze_every_s and self.clock() >= self._next_analyze:
            self._run_analyze()
            self._next_analyze = self.clock() + self.analyze_every_s
        elif self.live and self.clock() >= self._next_live:
            self._run_live()
            self._next_live = self.clock() + self.lc.live_every_s

    def _run_live(self) -> None:
        """A live run (the last minutes, into goodput_live) between the whole runs: on-call's view of now,
        at a cost that grows with the minutes, not with the jobs' lengths."""
        assert self.live is not None  # callers check it is set
        self._ran(
            self.live,
            "live",
            "live analysis failed: %s; loading goes on, the next live run tries again",
            self.metrics.m.loader_live_analysis_last_success_timestamp_seconds,
        )

    def _run_analyze(self) -> None:
        assert self.analyze is not None  # callers check it is set
        if (
            self._ran(
                self.analyze,
                "analyze",
                "analyzers failed: %s; loading goes on, the next run retries the range",
                self.metrics.m.loader_analyzer_last_success_timestamp_seconds,
            )
            and self.lc.compact_after_s
        ):
            self._compact()

    def _ran(self, run: Callable[[], None], operation: str, failed: str, succeeded: Gauge) -> bool:
        """Runs an analyzer run in the loader's loop: a store failure is counted against `operation` and
        logged (`failed`), and loading goes on; a success is stamped in `succeeded` and the exporter's
        series are read again (the live ones too)."""
        try:
            run()
        except StoreError as e:
            self.metrics.m.loader_store_errors.labels(operation).inc()
            log.error(failed, e)
            return False
        succeeded.set(time.time())
        if self.exporter is not None:
            self.exporter.refresh(self.store)
        return True

    def _compact(self) -> None:
        """Closed days' rollup partitions into one part each (pipeline/compaction.py), after an analyzer
        run: the loop is held either way, and between two runs there is at most one day to close."""
        try:
            done = compact_closed_days(self.store, time.time(), self.lc.compact_after_s)
        except StoreError as e:
            self.metrics.m.loader_store_errors.labels("compact").inc()
            log.error("compacting closed days failed: %s; loading goes on, the next run tries again", e)
            return
        for c in done:
            self.metrics.m.loader_compacted_partitions.labels(c.table).inc()

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self.metrics.close()
        if self._progress is not None:
            t = self.loader.totals
            self._progress.done(f"{t.records:,} records, {sum(t.rows.values()):,} rows")


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the service to finish its batch and leave; a second one acts as usual
    (kills at once), for an operator who does not want to wait."""

    def handler(signum, _frame):
        log.warning(
            "%s: finishing the current batch, committing and leaving the group", signal.Signals(signum).name
        )
        stop.set()
        signal.signal(signum, signal.SIG_DFL)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def summary(stats: LoadStats) -> str:
    """One line for the end of a run."""
    line = (
        f"{stats.records:,} records, {sum(stats.rows.values()):,} rows, "
        f"{sum(stats.batches.values()):,} batches, {stats.redelivered:,} redelivered, "
        f"{sum(stats.dead_letters.values()):,} dead letters"
    )
    if stats.dead_letters:
        line += " (" + ", ".join(f"{r}={n}" for r, n in stats.dead_letters.most_common()) + ")"
    return line
