"""Kafka as the transport between agents and the loader (kafka-python), behind transport.base.

Topics are `goodput.<kind>` (contracts.schema.topic_for), created up front by `ensure_topics`; the
message key is the sending node, so one node's batches of one kind stay in one partition, in order,
and a consumer sees each node's `seq` grow without reordering.

Producer settings and why (docs/kafka.md has the long form):
- acks=all + idempotence, set explicitly: a broker restart or a lost response makes the producer
  resend, and idempotence turns that resend into exactly one copy. Passing `enable_idempotence=True`
  makes kafka-python *raise* on a conflicting setting instead of quietly turning idempotence off.
- at most 5 requests in flight per connection: the most idempotence allows while keeping order.
- retries are bounded by time (`delivery_timeout_ms`), not count: a broker outage shorter than that
  loses nothing; a longer one hands the records back to the caller (`KafkaSendError.undelivered`) so
  the agent can put them in its spool (agents/spool.py) instead of dropping them.
- zstd (or lz4) batch compression with a short linger: envelopes are JSON, which compresses several
  times over, and Kafka stores the compressed batch as is.
- kafka-python has no bound on the memory its accumulator uses, so this transport bounds it:
  `max_pending_bytes` of values not yet acknowledged; past that `send` refuses at once
  (KafkaSendError) rather than growing without limit while the broker is away.

Security: PLAINTEXT, SSL, or SASL_SSL with PLAIN or SCRAM-SHA-256/512. The configuration names the
environment variables that hold the username and passwords (`sasl_username_env`,
`sasl_password_env`, `ssl_password_env`); a password written in the file itself is refused. Secrets
are read when a client is made and are never logged or shown in a repr.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Mapping

import msgspec

from contracts.config import ConfigError, KafkaConfig, secret
from contracts.schema import KINDS, topic_for
from contracts.strict import build
from transport.base import Record, TransportError

log = logging.getLogger(__name__)


class KafkaSettings(KafkaConfig, frozen=True):
    """The `[transport.kafka]` table (contracts.config.KafkaConfig: its keys, bounds and checks) with
    what this transport makes of it.

    Only names of environment variables are stored here, never their values, so printing or logging
    a KafkaSettings cannot leak a secret.
    """

    @classmethod
    def from_config(cls, cfg: "KafkaConfig | Mapping[str, Any] | str") -> "KafkaSettings":
        """From the config's table, a TOML-shaped mapping, or a bare "host:port,host:port" bootstrap
        string. Raises ConfigError naming the offending key, and when no bootstrap is given."""
        if isinstance(cfg, KafkaSettings):
            return cfg
        if isinstance(cfg, KafkaConfig):
            s = cls(**msgspec.structs.asdict(cfg))
        else:
            s = build(cls, {"bootstrap": cfg} if isinstance(cfg, str) else dict(cfg), ("transport", "kafka"))
        if not s.bootstrap:
            raise ConfigError(
                "[transport.kafka].bootstrap is required: a comma-separated list of host:port "
                "(or GOODPUT_KAFKA_BOOTSTRAP)"
            )
        return s

    @property
    def servers(self) -> list[str]:
        return [s.strip() for s in self.bootstrap.split(",") if s.strip()]

    def client_kwargs(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Connection and security options common to producer, consumer and admin client, with the
        secrets read from the environment now. The result holds secrets: never log it."""
        kw: dict[str, Any] = {
            "bootstrap_servers": self.servers,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
            "bootstrap_timeout_ms": self.bootstrap_timeout_ms,
            "retry_backoff_ms": self.retry_backoff_ms,
            "reconnect_backoff_max_ms": self.reconnect_backoff_max_ms,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kw["ssl_check_hostname"] = self.ssl_check_hostname
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, name):
                    kw[name] = getattr(self, name)
            if self.ssl_password_env:
                kw["ssl_password"] = _secret(self.ssl_password_env, "ssl_password_env", env)
        if self.security_protocol == "SASL_SSL":
            kw["sasl_mechanism"] = self.sasl_mechanism
            kw["sasl_plain_username"] = _secret(self.sasl_username_env, "sasl_username_env", env)
            kw["sasl_plain_password"] = _secret(self.sasl_password_env, "sasl_password_env", env)
        return kw

    def what_to_check(self) -> str:
        """The sentence error messages end with: where we tried to connect and what usually fails."""
        hint = f"check that the brokers at {self.bootstrap} are up and reachable"
        if self.security_protocol != "PLAINTEXT":
            hint += f", that they expect {self.security_protocol}"
            hint += (
                f", that ssl_cafile ({self.ssl_cafile}) signed their certificate"
                if self.ssl_cafile
                else ", that the system CAs trust their certificate (else set ssl_cafile)"
            )
        if self.security_protocol == "SASL_SSL":
            hint += (
                f" with {self.sasl_mechanism}, and that ${self.sasl_username_env} / "
                f"${self.sasl_password_env} hold valid credentials"
            )
        return hint + " (transport.kafka in the config)"


def _secret(var: str, key: str, env: Mapping[str, str] | None) -> str:
    """contracts.config.secret, failing as a TransportError: the client cannot be made without it."""
    try:
        return secret(var, f"[transport.kafka].{key}", env)
    except ConfigError as e:
        raise TransportError(str(e)) from None


def _why(e: BaseException) -> str:
    """An exception as 'Type: message', once (kafka-python's messages often start with the type)."""
    text = str(e)
    name = type(e).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


class KafkaSendError(TransportError):
    """Records the producer could not deliver. `undelivered` holds them as (topic, key, value), in the
    order they were sent, for the caller to keep (the agent spools them) and send again later."""

    def __init__(self, message: str, undelivered: list[tuple[str, bytes, bytes]]):
        super().__init__(message)
        self.undelivered = undelivered


class KafkaProducerTransport:
    """transport.base.Producer over kafka-python's KafkaProducer.

    `send` is asynchronous: it queues the record and returns, raising KafkaSendError at once only
    when the record cannot even be queued (unknown topic, `max_pending_bytes` reached). Delivery
    failures surface at the next `flush` as a KafkaSendError listing every record not delivered; a
    record is in exactly one of: delivered, still pending in the producer, or handed back in an error.
    """

    def __init__(
        self,
        settings: KafkaSettings | Mapping[str, Any] | str,
        *,
        env: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ):
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        self.settings = KafkaSettings.from_config(settings)
        s = self.settings
        self._lock = threading.Lock()
        self._pending_bytes = 0
        self._pending_count = 0
        self._failed: list[tuple[int, tuple[str, bytes, bytes], BaseException]] = []
        self._seq = 0
        try:
            self._producer = KafkaProducer(
                **s.client_kwargs(env),
                client_id=client_id or f"{s.client_id}-producer",
                acks="all",
                enable_idempotence=True,
                max_in_flight_requests_per_connection=s.max_in_flight,
                compression_type=s.compression,
                linger_ms=s.linger_ms,
                batch_size=s.batch_size,
                delivery_timeout_ms=s.delivery_timeout_ms,
                max_block_ms=s.max_block_ms,
                allow_auto_create_topics=False,
                # kafka-python's own sensors cost CPU on every record and nothing reads them: the
                # agent exports what matters itself (docs/metrics.md).
                metrics_enabled=False,
            )
        except KafkaError as e:
            raise TransportError(f"Kafka producer could not start: {_why(e)}; {s.what_to_check()}") from e

    @property
    def idempotent(self) -> bool:
        """Whether the underlying producer really runs idempotent (kafka-python can turn it off)."""
        return (
            bool(self._producer.config["enable_idempotence"])
            and self._producer._transaction_manager is not None
        )

    @property
    def pending_bytes(self) -> int:
        """Bytes of values sent but neither acknowledged nor failed yet."""
        return self._pending_bytes

    def send(
        self, topic: str, key: bytes, value: bytes, on_delivered: Callable[[], None] | None = None
    ) -> None:
        """Queues one record. `on_delivered` is called once the broker acknowledged it (from the
        producer's network thread, before the record stops counting as pending, so a caller that sees
        nothing pending has seen every delivery); it must not raise."""
        from kafka.errors import KafkaError

        size = len(value) + len(key or b"")
        with self._lock:
            if self._pending_bytes + size > self.settings.max_pending_bytes and self._pending_count:
                raise KafkaSendError(
                    f"Kafka producer has {self._pending_bytes} bytes unacknowledged (limit "
                    f"transport.kafka.max_pending_bytes={self.settings.max_pending_bytes}); "
                    f"{self.settings.what_to_check()}",
                    [(topic, key, value)],
                )
            self._pending_bytes += size
            self._pending_count += 1
            self._seq += 1
            seq = self._seq
        record = (topic, key, value)
        try:
            future = self._producer.send(topic, key=key, value=value)
        except KafkaError as e:
            self._settle(size)
            raise KafkaSendError(
                f"Kafka send to {topic} failed: {_why(e)}; does the topic exist "
                f"(ensure_topics)? {self.settings.what_to_check()}",
                [record],
            ) from e

        def delivered(_meta: Any) -> None:
            try:
                if on_delivered is not None:
                    on_delivered()
            finally:
                self._settle(size)

        future.add_callback(delivered)
        future.add_errback(lambda exc: self._settle(size, (seq, record, exc)))

    def _settle(
        self, size: int, failure: tuple[int, tuple[str, bytes, bytes], BaseException] | None = None
    ) -> None:
        with self._lock:
            self._pending_bytes -= size
            self._pending_count -= 1
            if failure is not None:
                self._failed.append(failure)

    def flush(self, timeout_s: float | None = None) -> None:
        """Waits until every record sent so far is delivered or failed. Raises KafkaSendError with the
        failed records, or TransportError when records are still pending at the timeout (they stay
        queued in the producer and are reported by a later flush)."""
        from kafka.errors import KafkaTimeoutError

        try:
            self._producer.flush(timeout=timeout_s)
        except KafkaTimeoutError as e:
            self._raise_failed()
            raise TransportError(
                f"Kafka flush: {self._pending_count} records still unacknowledged after {timeout_s} s; "
                f"{self.settings.what_to_check()}"
            ) from e
        self._raise_failed()

    def _raise_failed(self) -> None:
        with self._lock:
            failed, self._failed = sorted(self._failed, key=lambda f: f[0]), []
        if failed:
            first = failed[0][2]
            raise KafkaSendError(
                f"Kafka producer could not deliver {len(failed)} records (first error: "
                f"{_why(first)}); {self.settings.what_to_check()}",
                [rec for _, rec, _ in failed],
            )

    def close(self, timeout_s: float | None = 30.0) -> None:
        """Flushes what it can within `timeout_s`, then closes; records still pending are dropped,
        so callers that must not lose them call `flush()` first and spool what it hands back."""
        from kafka.errors import KafkaTimeoutError

        try:
            self._producer.close(timeout=timeout_s)
        except KafkaTimeoutError:
            # kafka-python's close() flushes first and raises when records are still pending, before
            # it stops its network thread (kafka-python 3.0.x); stop that thread ourselves so nothing
            # is sent after close returns and the process can exit.
            sender = getattr(self._producer, "_sender", None)
            if sender is not None:
                sender.force_close()


_ASSIGNOR_LOGGERS = (
    "kafka.coordinator.assignors.range",
    "kafka.coordinator.assignors.roundrobin",
    "kafka.coordinator.assignors.sticky.sticky_assignor",
)


class _NoPartitionMetadata(logging.Filter):
    """Drops the assignors' "No partition metadata for topic" lines: KafkaConsumerTransport fetches
    the metadata before joining and names a missing topic itself, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No partition metadata for topic")


_NO_METADATA = _NoPartitionMetadata()


class KafkaConsumerTransport:
    """transport.base.Consumer over kafka-python's KafkaConsumer, in a consumer group.

    Auto-commit is off: the loader commits a record only after its rows are stored, so a restart (or
    a rebalance) redelivers exactly the records not yet committed — at-least-once, and the store
    drops the duplicates.
    """

    def __init__(
        self,
        settings: KafkaSettings | Mapping[str, Any] | str,
        topics: Iterable[str],
        *,
        group_id: str | None = None,
        env: Mapping[str, str] | None = None,
        client_id: str | None = None,
        auto_offset_reset: str = "earliest",
    ):
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        self.settings = KafkaSettings.from_config(settings)
        s = self.settings
        self.topics = list(topics)
        self.group_id = group_id or s.group_id
        self._committed: dict[tuple[str, int], int] = {}
        try:
            self._consumer = KafkaConsumer(
                *self.topics,
                **s.client_kwargs(env),
                client_id=client_id or f"{s.client_id}-consumer",
                group_id=self.group_id,
                enable_auto_commit=False,
                auto_offset_reset=auto_offset_reset,
                session_timeout_ms=s.session_timeout_ms,
                heartbeat_interval_ms=s.heartbeat_interval_ms,
                max_poll_interval_ms=s.max_poll_interval_ms,
                allow_auto_create_topics=False,
            )
        except KafkaError as e:
            raise TransportError(
                f"Kafka consumer (group {self.group_id}) could not start: {_why(e)}; {s.what_to_check()}"
            ) from e
        self._check_topics()

    def _check_topics(self) -> None:
        """Fetches the topics' metadata before the first poll joins the group.

        Why: a group leader that joins before the metadata of the topics it subscribed to has arrived
        assigns without them, and kafka-python's assignors log "No partition metadata for topic ..."
        for each. Fetched up front, the metadata is there; a topic that really does not exist is
        said once, here, with what to do, and the assignors' repetition of it is filtered out."""
        from kafka.errors import KafkaError

        try:
            visible = self._consumer.topics()
        except KafkaError as e:
            raise TransportError(
                f"Kafka consumer (group {self.group_id}) could not read the topics' metadata: {_why(e)}; "
                f"{self.settings.what_to_check()}"
            ) from e
        missing = [t for t in self.topics if t not in visible]
        if missing:
            log.warning(
                "Kafka topics %s do not exist: nothing is read from them until they are created "
                "(transport.kafka.ensure_topics creates every goodput topic), and a created topic is "
                "picked up at the next metadata refresh",
                ", ".join(missing),
            )
        for name in _ASSIGNOR_LOGGERS:
            logger = logging.getLogger(name)
            if _NO_METADATA not in logger.filters:
                logger.addFilter(_NO_METADATA)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to `max_records` records, waiting at most `timeout_s` for the first; in offset order within
        each partition. Joining the group happens inside the first polls, so a fresh consumer may
        return nothing for a moment."""
        from kafka.errors import KafkaError

        try:
            batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except KafkaError as e:
            raise TransportError(
                f"Kafka poll (group {self.group_id}) failed: {_why(e)}; {self.settings.what_to_check()}"
            ) from e
        return [
            # only the broker's own clock (LogAppendTime, timestamp_type 1) is kept: a CreateTime is the
            # producing node's clock, the one being estimated
            Record(
                tp.topic,
                tp.partition,
                m.offset,
                m.key,
                m.value,
                m.timestamp if getattr(m, "timestamp_type", 0) == 1 and m.timestamp >= 0 else None,
            )
            for tp, msgs in batches.items()
            for m in msgs
        ]

    def commit(self, records: Iterable[Record]) -> None:
        """Commits, per (topic, partition), the offset after the highest record given; a position at or
        below what this consumer already committed is left alone, so a commit never moves backwards."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        nxt: dict[tuple[str, int], int] = {}
        for r in records:
            tp = (r.topic, r.partition)
            nxt[tp] = max(nxt.get(tp, 0), r.offset + 1)
        offsets = {
            TopicPartition(t, p): OffsetAndMetadata(off, "", -1)
            for (t, p), off in nxt.items()
            if off > self._committed.get((t, p), -1)
        }
        if not offsets:
            return
        try:
            self._consumer.commit(offsets)
        except KafkaError as e:
            raise TransportError(
                f"Kafka commit (group {self.group_id}) failed: {_why(e)}; if the group "
                f"rebalanced, the records are redelivered to the new owner; {self.settings.what_to_check()}"
            ) from e
        for tp, om in offsets.items():
            self._committed[(tp.topic, tp.partition)] = om.offset

    def assignment(self) -> set[tuple[str, int]]:
        """The (topic, partition) pairs this member owns now (empty before it has joined)."""
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment() or ()}

    def lag(self) -> dict[tuple[str, int], int]:
        """Per assigned partition: records after the group's committed offset (what a restart now would
        deliver again or for the first time), i.e. the consumer-group lag that Kafka's tools report."""
        from kafka.errors import KafkaError

        parts = list(self._consumer.assignment() or ())
        if not parts:
            return {}
        try:
            end = self._consumer.end_offsets(parts)
            begin = self._consumer.beginning_offsets(parts)
            out = {}
            for tp in parts:
                committed = self._consumer.committed(tp)
                start = begin[tp] if committed is None else committed
                out[(tp.topic, tp.partition)] = max(0, end[tp] - start)
            return out
        except KafkaError as e:
            raise TransportError(
                f"Kafka lag query (group {self.group_id}) failed: {_why(e)}; {self.settings.what_to_check()}"
            ) from e

    def close(self) -> None:
        """Leaves the group (so its partitions move at once) without committing anything."""
        self._consumer.close(autocommit=False)


def ensure_topics(
    settings: KafkaSettings | Mapping[str, Any] | str,
    kinds: Iterable[str] = tuple(KINDS),
    partitions: int = 12,
    *,
    replication_factor: int = -1,
    prefix: str = "goodput",
    env: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Creates the missing `<prefix>.<kind>` topics and returns every one's partition count.

    An existing topic is never altered: adding partitions would move nodes to other partitions and
    break per-node ordering, so that stays a deliberate operator action. `replication_factor=-1`
    takes the brokers' `default.replication.factor`. New topics get message.timestamp.type =
    LogAppendTime: each record carries the broker's append time, against which the loader estimates
    each node's clock offset (docs/loader.md); on a topic created otherwise the loader has no such time.
    """
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    s = KafkaSettings.from_config(settings)
    names = [topic_for(k, prefix) for k in kinds]
    try:
        admin = KafkaAdminClient(**s.client_kwargs(env), client_id=f"{s.client_id}-admin")
    except KafkaError as e:
        raise TransportError(f"Kafka admin client could not start: {_why(e)}; {s.what_to_check()}") from e
    try:
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            result = admin.create_topics(
                {
                    n: {
                        "num_partitions": partitions,
                        "replication_factor": replication_factor,
                        "configs": {"message.timestamp.type": "LogAppendTime"},
                    }
                    for n in missing
                },
                raise_errors=False,
            )
            errors = [t for t in result["topics"] if t["error_code"] not in (0, 36)]  # 36: already exists
            if errors:
                detail = "; ".join(
                    f"{t['name']}: error {t['error_code']} {t.get('error_message') or ''}".strip()
                    for t in errors
                )
                raise TransportError(
                    f"Kafka could not create topics: {detail}; check the brokers' "
                    f"replication settings and this client's CREATE permission on {s.bootstrap}"
                )
            admin.wait_for_topics(missing, timeout_ms=30_000)
            log.info("created Kafka topics %s with %d partitions", ", ".join(missing), partitions)
        return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(names)}
    except KafkaError as e:
        raise TransportError(f"Kafka topic set-up failed: {_why(e)}; {s.what_to_check()}") from e
    finally:
        admin.close()
