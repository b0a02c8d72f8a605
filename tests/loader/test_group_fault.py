"""Two `goodput ingest` processes in one consumer group, one SIGKILLed while the group rebalances
because the other just joined: the survivor takes over every partition once the dead member's session
times out, and nothing is lost.

chDB lets one process own a directory, so each loader writes its own store (the ClickHouse server on
this machine is too old for the loader's tables). What the killed member had stored but not committed
is delivered again to the survivor and so is in both stores: counted here as duplicates. Loaders that
share a ClickHouse server store keep one copy (ReplacingMergeTree by batch, docs/loader.md)."""

from __future__ import annotations

import time

import pytest

from contracts.schema import KINDS, topic_for
from pipeline.chdb_store import ChdbStore
from tests.loader.helpers import (
    NODES,
    LoaderProcess,
    Producer,
    good_stream,
    ledger_keys,
    metric_sum,
    new_topics,
    two_loader_configs,
)
from tests.loader.test_group import PARTITIONS, _scrape_or_empty, _wait

pytestmark = pytest.mark.kafka


def _group_caught_up(bootstrap: str, group: str, prefix: str) -> bool:
    """Whether the group has committed every record of every partition, asked of the broker itself
    (the loader's lag gauge has no sample yet for a partition it was just given)."""
    from kafka import KafkaConsumer, TopicPartition

    # a consumer of the group that never subscribes: it reads the committed offsets without joining
    reader = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, client_id="goodput-test-lag"
    )
    try:
        parts = [TopicPartition(topic_for(k, prefix), p) for k in KINDS for p in range(PARTITIONS)]
        end = reader.end_offsets(parts)
        committed = {tp: reader.committed(tp) for tp in parts if end[tp]}
    finally:
        reader.close(autocommit=False)
    return all(c is not None and c >= end[tp] for tp, c in committed.items())


def test_a_loader_killed_during_a_rebalance_loses_nothing(kafka_broker, tmp_path, reliability):
    prefix = new_topics(kafka_broker.bootstrap, partitions=PARTITIONS)
    configs, ports = two_loader_configs(tmp_path, kafka_broker.bootstrap, prefix, flush_records=20)
    before = good_stream(range(0, 8), nodes=NODES)  # 16 nodes: every partition gets batches
    after = good_stream(range(8, 12), nodes=NODES)  # sent once only the survivor can load them
    sent = before + after
    producer = Producer(kafka_broker.bootstrap, prefix)
    producer.send_all(before)

    def metric(i: int, name: str) -> float:
        return metric_sum(_scrape_or_empty(ports[i]), name)

    first = LoaderProcess(configs[0])
    second = None
    try:
        _wait(lambda: metric(0, "goodput_loader_rows_loaded_total") > 0, 90, [first])
        second = LoaderProcess(configs[1])
        _wait(lambda: _scrape_or_empty(ports[1]) != {}, 60, [second])
        time.sleep(0.5)  # the second member is joining: the group is rebalancing
        loaded_by_first = metric(0, "goodput_loader_rows_loaded_total")
        first.kill()
        producer.send_all(after)
        producer.close()
        everything = PARTITIONS * len(KINDS)
        _wait(
            lambda: (
                metric(1, "goodput_loader_assigned_partitions") == everything
                and _group_caught_up(kafka_broker.bootstrap, f"loader-{prefix}", prefix)
            ),
            120,
            [second],
        )
        assert second.terminate() == 0, second.log()[-3000:]
    finally:
        first.kill()
        if second is not None:
            second.kill()
    keys = []
    for i in range(2):
        with ChdbStore(tmp_path / f"store{i}") as store:
            keys.append(ledger_keys(store))
    union = set(keys[0]) | set(keys[1])
    assert len(union) == len(sent), "every batch stored by one loader or the other"
    assert len(keys[0]) == len(set(keys[0])) and len(keys[1]) == len(set(keys[1])), "no store holds one twice"
    both = set(keys[0]) & set(keys[1])
    assert loaded_by_first > 0
    reliability.fault(
        "two loaders in one group, one SIGKILLed during the rebalance the other's joining started",
        "the survivor takes every partition after the session timeout and loads the rest; what the dead "
        "one stored but had not committed is loaded again (duplicates column: in both per-loader stores; "
        "a shared server store keeps one)",
        produced=len(sent),
        stored=len(union),
        duplicates=len(both),
    )
