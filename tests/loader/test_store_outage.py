"""A store outage in the middle of a load: the service retries with backoff, commits nothing while the
store is down, keeps its partitions, and once the store is back every row is stored exactly once —
including the kinds the interrupted load had already inserted before the failure."""

from __future__ import annotations

import threading

import pytest

from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.store import StoreError
from tests.fixtures.ports import free_port
from tests.loader.helpers import (
    Producer,
    ServiceThread,
    good_stream,
    ledger_keys,
    metric_sum,
    new_topics,
    raw_counts,
    scrape,
    write_config,
)

pytestmark = pytest.mark.kafka


class OutageStore:
    """A real ChdbStore whose inserts start failing after `allowed` of them succeeded, until `heal()`:
    an outage that begins halfway through a load."""

    def __init__(self, store: ChdbStore, allowed: int) -> None:
        self.store, self.allowed = store, allowed
        self.healed = threading.Event()
        self.refused = 0
        self.before_outage: list[str] = []

    def insert_arrow(self, table, data, dedup_token=None) -> None:
        if not self.healed.is_set():
            if self.allowed == 0:
                self.refused += 1
                raise StoreError(f"chDB statement failed [INSERT INTO {table}]: test outage")
            self.allowed -= 1
            self.before_outage.append(table)
        self.store.insert_arrow(table, data, dedup_token)

    def execute(self, sql: str) -> None:
        self.store.execute(sql)

    def query_arrow(self, sql: str):
        return self.store.query_arrow(sql)

    def heal(self) -> None:
        self.healed.set()


def test_store_outage_mid_load_commits_nothing_then_stores_everything_once(
    kafka_broker, tmp_path, reliability
):
    prefix = new_topics(kafka_broker.bootstrap, partitions=2)
    port = free_port()
    config = write_config(
        tmp_path / "goodput.toml",
        kafka_broker.bootstrap,
        prefix,
        tmp_path / "store",
        metrics_address=f"127.0.0.1:{port}",
        flush_records=1000,
    )
    sent = good_stream(range(0, 4))
    producer = Producer(kafka_broker.bootstrap, prefix)
    producer.send_all(sent)
    producer.close()

    with ChdbStore(tmp_path / "store") as real:
        ddl.migrate(real)
        store = OutageStore(real, allowed=1)  # the first load stores one kind, then the store goes away
        svc = ServiceThread(config, store).start()
        svc.wait_for(lambda: store.refused >= 3)
        during = scrape(port)
        svc.wait_for(lambda: metric_sum(scrape(port), "goodput_loader_consumer_lag_records") == len(sent))
        assert metric_sum(during, "goodput_loader_batches_committed_total") == 0, (
            "committed while the store was down"
        )
        assert metric_sum(during, "goodput_loader_store_errors_total", operation="load") >= 3
        assert svc.service.loader.totals.records == 0, "no load counts as done before the store took it"
        assert store.before_outage and store.before_outage[0].startswith("raw_"), (
            "the outage cut a load in two"
        )

        store.heal()
        svc.wait_for(
            lambda: (
                svc.service.loader.totals.records >= len(sent)
                and metric_sum(scrape(port), "goodput_loader_consumer_lag_records") == 0
            )
        )
        svc.stop_and_join()

        want = {}
        for kind, _node, _value, rows in sent:
            want[kind] = want.get(kind, 0) + rows
        assert dict(raw_counts(real)) == want
        assert dict(raw_counts(real, final=False)) == want, "the retried insert of the first kind was a no-op"
        keys = ledger_keys(real)
        assert len(keys) == len(set(keys)) == len(sent)
        reliability.fault(
            "store refusing inserts halfway through a load (outage), then back",
            "nothing is committed while it is down; the retried load stores every batch once",
            produced=len(sent),
            stored=len(set(keys)),
            duplicates=len(keys) - len(set(keys)),
        )
