"""A node's clock offset from the Kafka broker's append time: ensure_topics creates LogAppendTime topics,
the consumer hands the append time on, the loader keeps it in ingested_batches and estimates the offset."""

from __future__ import annotations

import time
import uuid

import pytest

from contracts.envelope import encode_batch
from contracts.schema import topic_for
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader
from pipeline.validate import Limits
from tests.kafka.helpers import poll_until
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport, ensure_topics

pytestmark = pytest.mark.kafka
SKEW_MS = {"node-ahead": 40_000, "node-behind": -25_000, "node-ok": 0}


def _envelope(node: str, seq: int, now_ms: int) -> bytes:
    t = now_ms + SKEW_MS[node]  # the node's own clock
    return encode_batch(
        kind="gpu",
        cluster="test",
        node=node,
        seq=seq,
        sent_ms=t,
        columns={"ts_ms": [t - 1000], "gpu": [0], "uuid": [f"GPU-{node}-0"], "util_gpu_pct": [50.0]},
        agent="goodput-test/0",
    )


def test_the_broker_append_time_estimates_each_nodes_clock_offset(kafka_broker, tmp_path):
    prefix = f"clk-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, ["gpu"], partitions=2, prefix=prefix)
    topic = topic_for("gpu", prefix)
    p = KafkaProducerTransport(kafka_broker.bootstrap)
    for seq in range(5):
        for node in SKEW_MS:
            p.send(topic, node.encode(), _envelope(node, seq, int(time.time() * 1000)))
        p.flush(30)
    p.close()
    c = KafkaConsumerTransport(kafka_broker.bootstrap, [topic], group_id=f"g-{prefix}")
    try:
        records = poll_until(c, 5 * len(SKEW_MS))
    finally:
        c.close()
    assert len(records) == 5 * len(SKEW_MS)
    assert all(r.timestamp_ms is not None for r in records), "topic created without LogAppendTime"
    with ChdbStore(tmp_path / "store") as store:
        ddl.migrate(store)
        stats = Loader(store, Limits(), topic_prefix=prefix).load(records)
        assert not stats.dead_letters
        for node, skew in SKEW_MS.items():  # the offset less the fastest batch's delay (same host: ms)
            assert skew - 2000 <= stats.clock_offsets_ms[node] <= skew, (node, stats.clock_offsets_ms)
        t = store.query_arrow(
            "SELECT node, max(toUnixTimestamp64Milli(sent) - toUnixTimestamp64Milli(assumeNotNull(appended)))"
            " AS off, countIf(appended IS NULL) AS missing FROM ingested_batches GROUP BY node ORDER BY node"
        ).to_pylist()
    assert [r["node"] for r in t] == sorted(SKEW_MS)
    assert all(r["missing"] == 0 for r in t)
    assert {r["node"]: r["off"] for r in t} == stats.clock_offsets_ms
