"""`goodput ingest --config FILE` as a real process, SIGKILLed in the one window that matters — rows
inserted, offsets not yet committed — and restarted: the counts stay exact, and the records Kafka
delivers again are recognised as stored (not dead-lettered as duplicates).

The window is hit deterministically by running the command through tests/loader/kill_before_commit.py,
which kills the process at its N-th commit, after that load returned."""

from __future__ import annotations

import re
import signal
import sys

import pytest

from pipeline.chdb_store import ChdbStore
from tests.loader.helpers import (
    LoaderProcess,
    Producer,
    good_stream,
    ledger_keys,
    new_topics,
    raw_counts,
    write_config,
)

pytestmark = pytest.mark.kafka


def test_sigkill_between_insert_and_commit_then_restart_is_exact(kafka_broker, tmp_path, reliability):
    prefix = new_topics(kafka_broker.bootstrap, partitions=2)
    store_dir = tmp_path / "store"
    config = write_config(
        tmp_path / "goodput.toml",
        kafka_broker.bootstrap,
        prefix,
        store_dir,
        flush_records=15,
        flush_interval_s=5.0,
    )
    sent = good_stream(range(0, 5))
    producer = Producer(kafka_broker.bootstrap, prefix)
    producer.send_all(sent)
    producer.close()

    crashed = LoaderProcess(
        config,
        "--until-caught-up",
        log=tmp_path / "crash.log",
        command=(sys.executable, "-m", "tests.loader.kill_before_commit", "3"),
    )
    assert crashed.wait() == -signal.SIGKILL, crashed.log()[-3000:]
    assert "SIGKILL before commit 3" in crashed.log()
    with ChdbStore(store_dir) as store:
        stored_before = sum(raw_counts(store, final=False).values())
        batches_before = len(ledger_keys(store))
    assert stored_before > 0 and batches_before == 3 * 15, "three loads of 15 were stored before the kill"

    again = LoaderProcess(config, "--until-caught-up", log=tmp_path / "restart.log")
    assert again.wait() == 0, again.log()[-3000:]
    redelivered = int(re.search(r"([\d,]+) redelivered", again.log())[1].replace(",", ""))
    assert redelivered > 0, "the killed load was stored but not committed, so Kafka must deliver it again"

    want = {}
    for kind, _node, _value, rows in sent:
        want[kind] = want.get(kind, 0) + rows
    with ChdbStore(store_dir) as store:
        assert dict(raw_counts(store)) == want
        assert dict(raw_counts(store, final=False)) == want, "the replay inserted nothing twice"
        keys = ledger_keys(store)
        assert len(keys) == len(set(keys)) == len(sent)
        dead = store.query_arrow("SELECT count() AS n FROM dead_letters").column("n")[0].as_py()
        assert dead == 0, "a redelivered batch is not an agent's duplicate"
    reliability.fault(
        "loader SIGKILLed between storing a batch and committing its offset",
        f"Kafka redelivers the uncommitted load ({redelivered} records) and the store keeps one copy",
        produced=len(sent),
        stored=len(set(keys)),
        duplicates=len(keys) - len(set(keys)),
        dead_lettered=dead,
    )
