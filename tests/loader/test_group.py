"""Two `goodput ingest` processes in one consumer group split the partitions between them.

chDB lets one process own a directory, so each loader here writes its own store: the union of the two
must be exactly what was sent, and no batch (node, kind, seq) may be in both. In production the
loaders of a group share one ClickHouse server store instead (docs/loader.md)."""

from __future__ import annotations

import time

import pytest

from contracts.schema import KINDS
from pipeline.chdb_store import ChdbStore
from tests.loader.helpers import (
    NODES,
    LoaderProcess,
    Producer,
    good_stream,
    ledger_keys,
    metric_sum,
    new_topics,
    raw_counts,
    scrape,
    two_loader_configs,
)

pytestmark = pytest.mark.kafka
PARTITIONS = 4


def _wait(what, timeout_s: float, procs) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        for p in procs:
            assert p.proc.poll() is None, f"a loader exited early:\n{p.log()[-3000:]}"
        assert time.monotonic() < deadline, "timed out:\n" + "\n".join(p.log()[-2000:] for p in procs)
        time.sleep(0.3)


def _scrape_or_empty(port: int) -> dict:
    try:
        return scrape(port)
    except OSError:  # not listening yet
        return {}


def test_two_loaders_split_the_partitions_and_store_each_batch_once(kafka_broker, tmp_path, reliability):
    prefix = new_topics(kafka_broker.bootstrap, partitions=PARTITIONS)
    configs, ports = two_loader_configs(tmp_path, kafka_broker.bootstrap, prefix, flush_records=25)
    procs = [LoaderProcess(c) for c in configs]
    try:

        def owned(i: int) -> float:
            return metric_sum(_scrape_or_empty(ports[i]), "goodput_loader_assigned_partitions")

        _wait(
            lambda: owned(0) > 0 and owned(1) > 0 and owned(0) + owned(1) == PARTITIONS * len(KINDS),
            90,
            procs,
        )
        split = (owned(0), owned(1))

        sent = good_stream(range(0, 4), nodes=NODES)  # 16 nodes: every partition gets batches
        producer = Producer(kafka_broker.bootstrap, prefix)
        producer.send_all(sent)
        producer.close()
        total = sum(rows for *_, rows in sent)

        def loaded(i: int) -> float:
            return metric_sum(_scrape_or_empty(ports[i]), "goodput_loader_rows_loaded_total")

        _wait(lambda: loaded(0) + loaded(1) >= total, 90, procs)
        per_loader = (loaded(0), loaded(1))
        for p in procs:
            assert p.terminate() == 0, p.log()[-3000:]
    finally:
        for p in procs:
            p.kill()

    assert split == (PARTITIONS * len(KINDS) / 2,) * 2, "the range assignor gives each member half"
    assert all(n > 0 for n in per_loader), f"both loaders stored rows: {per_loader}"
    counts, keys = [], []
    for i in range(2):
        with ChdbStore(tmp_path / f"store{i}") as store:
            counts.append(raw_counts(store))
            keys.append(ledger_keys(store))
    want = {}
    for kind, _node, _value, rows in sent:
        want[kind] = want.get(kind, 0) + rows
    assert dict(counts[0] + counts[1]) == want
    assert not set(keys[0]) & set(keys[1]), "a batch was stored by both loaders"
    assert len(keys[0]) + len(keys[1]) == len(sent)
    reliability.fault(
        "two loaders in one consumer group",
        "the range assignor splits the partitions; no batch is stored by both",
        produced=len(sent),
        stored=len(set(keys[0]) | set(keys[1])),
        duplicates=len(set(keys[0]) & set(keys[1])),
    )
    for p in procs:
        assert "goodput ingest:" in p.log() and "redelivered" in p.log(), "SIGTERM ends with the summary line"
