"""KafkaProducerTransport / KafkaConsumerTransport against the real broker of tests/fixtures/kafka.py."""

from __future__ import annotations

import itertools
import logging
import time
import uuid

import pytest

from contracts.schema import KINDS, topic_for
from tests.kafka.helpers import decoded, envelope, poll_quiet, poll_until
from transport.base import TransportError
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport, ensure_topics

pytestmark = pytest.mark.kafka


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_producer_stays_idempotent_with_acks_all_and_compression(kafka_broker, compression):
    p = KafkaProducerTransport({"bootstrap": kafka_broker.bootstrap, "compression": compression})
    try:
        assert p.idempotent, "kafka-python silently turned idempotence off"
        cfg = p._producer.config
        assert cfg["acks"] == -1 and cfg["compression_type"] == compression
        assert cfg["max_in_flight_requests_per_connection"] <= 5
    finally:
        p.close()


def test_ensure_topics_creates_one_topic_per_kind_and_leaves_existing_alone(kafka_broker):
    prefix = _name("et")
    got = ensure_topics(kafka_broker.bootstrap, partitions=3, prefix=prefix)
    assert got == {topic_for(k, prefix): 3 for k in KINDS}
    again = ensure_topics(kafka_broker.bootstrap, partitions=6, prefix=prefix)
    assert again == got, "an existing topic must not be repartitioned"


def test_round_trip_envelopes_keyed_by_node(kafka_broker):
    prefix = _name("rt")
    ensure_topics(kafka_broker.bootstrap, ["gpu"], partitions=3, prefix=prefix)
    topic = topic_for("gpu", prefix)
    nodes = [f"node-{i:02d}" for i in range(6)]
    p = KafkaProducerTransport(kafka_broker.bootstrap)
    sent = {}
    for seq, node in itertools.product(range(10), nodes):
        value = envelope(node, seq)
        sent[(node, seq)] = value
        p.send(topic, node.encode(), value)
    p.flush(30)
    p.close()

    c = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=_name("g"))
    try:
        got = poll_until(c, len(sent))
    finally:
        c.close()
    assert len(got) == len(sent)
    assert {decoded(r.value): r.value for r in got} == sent
    partition_of: dict[str, set[int]] = {}
    for r in got:
        node, _ = decoded(r.value)
        assert r.key == node.encode() and r.topic == topic
        partition_of.setdefault(node, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in partition_of.values()), (
        "key = node must pin a node to one partition"
    )
    for node in nodes:  # per node, seq grows with the offset: no reordering
        mine = sorted((r.offset, decoded(r.value)[1]) for r in got if r.key == node.encode())
        assert [s for _, s in mine] == list(range(10))


def _fill(kafka_broker, n: int) -> str:
    topic = _name("resume")
    kafka_broker.create_topic(topic, 1)
    p = KafkaProducerTransport(kafka_broker.bootstrap)
    for i in range(n):
        p.send(topic, b"node-a", envelope("node-a", i))
    p.flush(30)
    p.close()
    return topic


def test_restarted_consumer_resumes_after_committed_offset_and_reports_lag(kafka_broker):
    topic = _fill(kafka_broker, 20)
    group = _name("g")
    first = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=group)
    try:
        got = poll_until(first, 20)
        assert [r.offset for r in got] == list(range(20))
        assert first.assignment() == {(topic, 0)}
        assert first.lag() == {(topic, 0): 20}
        first.commit(got[:10])
        first.commit(got[:3])  # an older position never moves the commit backwards
        assert first.lag() == {(topic, 0): 10}
    finally:
        first.close()

    second = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=group)
    try:
        again = poll_quiet(second, quiet_s=1.5)
        assert [r.offset for r in again] == list(range(10, 20))
        second.commit(again)
        assert second.lag() == {(topic, 0): 0}
    finally:
        second.close()


def test_uncommitted_records_are_redelivered_after_restart(kafka_broker):
    topic = _fill(kafka_broker, 8)
    group = _name("g")
    first = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=group)
    try:
        assert len(poll_until(first, 8)) == 8  # fetched, never committed
    finally:
        first.close()
    second = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=group)
    try:
        again = poll_quiet(second, quiet_s=1.5)
    finally:
        second.close()
    assert [decoded(r.value)[1] for r in again] == list(range(8))


def test_send_to_missing_topic_fails_with_a_clear_error(kafka_broker):
    p = KafkaProducerTransport({"bootstrap": kafka_broker.bootstrap, "max_block_ms": 1500})
    try:
        with pytest.raises(TransportError, match="ensure_topics") as err:
            p.send("goodput.no-such-topic", b"n", b"v")
        assert err.value.undelivered == [("goodput.no-such-topic", b"n", b"v")]
    finally:
        p.close()


def test_the_consumer_fetches_topic_metadata_before_joining_and_names_a_missing_topic_once(
    kafka_broker, caplog
):
    """Load-time noise: kafka-python's assignors logged "No partition metadata for topic ..." at every
    start for each topic whose metadata had not arrived when the group was joined, and on every
    rebalance for a topic that does not exist."""
    prefix = f"md{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, kinds=("gpu",), partitions=2, prefix=prefix)
    topics = [topic_for("gpu", prefix), topic_for("nic", prefix)]
    with caplog.at_level(logging.DEBUG):
        consumer = KafkaConsumerTransport(kafka_broker.bootstrap, topics, group_id=f"g-{prefix}")
        try:
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(max_records=10, timeout_s=0.2)
            assert consumer.assignment() == {(topics[0], 0), (topics[0], 1)}
        finally:
            consumer.close()
    lines = [r.getMessage() for r in caplog.records]
    assert not [m for m in lines if "No partition metadata" in m]
    missing = [m for m in lines if "do not exist" in m]
    assert len(missing) == 1 and topics[1] in missing[0] and "ensure_topics" in missing[0]
