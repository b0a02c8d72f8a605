"""A ClickHouse server SIGKILLed and restarted twice while a loop of inserts runs: the store retries
through both outages (default retry settings), the loop never sees an error, and every row is there
exactly once after merging.

Why "after merging": 18.16 has no insert_deduplication_token, so an insert whose part was written just
before the kill, but whose acknowledgement never arrived, is stored again by the retry. That is the
case ReplacingMergeTree exists for in the goodput schema; the test bounds it (at most one batch per
kill) and shows OPTIMIZE ... FINAL collapsing it. On >= 23.8 the token drops such a retry at once."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pyarrow as pa
import pytest

from pipeline.server_store import ServerStore
from pipeline.store import StoreError

pytestmark = pytest.mark.clickhouse_server

BATCHES = 60
ROWS = 2_000
KILL_AFTER_BATCHES = (12, 36)
DOWN_S = 1.0


def _batch(b: int) -> pa.Table:
    ids = range(b * ROWS, (b + 1) * ROWS)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "node": [f"gpu-{i % 16:03d}" for i in ids],
            "value": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def test_server_killed_and_restarted_mid_load_loses_nothing(clickhouse_server, caplog, reliability):
    caplog.set_level(logging.WARNING, logger="goodput.store.server")
    store = ServerStore(clickhouse_server.store_config())
    name = f"restart_{uuid.uuid4().hex[:8]}"
    store.execute(
        f"CREATE TABLE {name} (id Int64, node String, value Float64) ENGINE = ReplacingMergeTree ORDER BY id"
    )
    done = [0]
    failure: list[BaseException] = []

    def load() -> None:
        try:
            for b in range(BATCHES):
                store.insert_arrow(name, _batch(b), dedup_token=f"{name}-{b}")
                done[0] = b + 1
        except BaseException as e:  # re-raised below, in the test's own thread
            failure.append(e)

    # The loop runs in a worker; kills and restarts stay in this thread, because PR_SET_PDEATHSIG
    # kills the server when the *thread* that started it ends.
    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    kills = []
    for threshold in KILL_AFTER_BATCHES:
        while done[0] < threshold and loader.is_alive():
            time.sleep(0.005)
        clickhouse_server.stop(kill=True)
        kills.append(done[0])
        time.sleep(DOWN_S)
        clickhouse_server.start()
    loader.join(120)
    if failure:
        raise failure[0]
    assert not loader.is_alive(), "the insert loop did not finish within 120 s"
    assert done[0] == BATCHES
    assert len(kills) == len(KILL_AFTER_BATCHES)
    assert any("retry" in r.getMessage() for r in caplog.records), "the store never saw an outage"

    expected = BATCHES * ROWS
    raw = store.query_arrow(
        f"SELECT count() AS n, uniqExact(id) AS u, min(id) AS lo, max(id) AS hi FROM {name}"
    )
    row = raw.to_pylist()[0]
    assert row["u"] == expected and row["lo"] == 0 and row["hi"] == expected - 1  # nothing lost
    assert expected <= row["n"] <= expected + len(kills) * ROWS  # at most one re-sent batch per kill
    print(f"rows stored before merging: {row['n']} for {expected} sent; kills after batches {kills}")
    store.execute(f"OPTIMIZE TABLE {name} FINAL")
    assert store.query_arrow(f"SELECT count() AS n FROM {name}").column("n")[0].as_py() == expected
    store.close()
    reliability.fault(
        f"ClickHouse server process SIGKILLed {len(kills)} times mid-load (rows)",
        f"inserts are retried; {row['n'] - expected} re-sent rows before merging, none after "
        "(ReplacingMergeTree by batch)",
        produced=expected,
        stored=row["u"],
        duplicates=0,
    )


def test_insert_select_cut_off_by_a_crash_is_reported_not_retried(clickhouse_server):
    """The analyzers' INSERT ... SELECT may have been applied when the connection breaks; a blind retry
    could double an output table, so the store says so and leaves the rerun to the caller."""
    store = ServerStore(clickhouse_server.store_config())
    name = f"insel_{uuid.uuid4().hex[:8]}"
    store.execute(f"CREATE TABLE {name} (n UInt64) ENGINE = MergeTree ORDER BY n")
    killer = threading.Timer(0.5, clickhouse_server.stop, kwargs={"kill": True})  # SIGKILL needs no parent
    killer.start()
    try:
        with pytest.raises(StoreError, match="may or may not have been applied, so it is not retried"):
            store.execute(f"INSERT INTO {name} SELECT number FROM system.numbers WHERE sleep(2) = 0 LIMIT 10")
    finally:
        killer.join()
        clickhouse_server.start()
    store.execute(f"INSERT INTO {name} SELECT number FROM system.numbers LIMIT 3")  # the store reconnects
    assert store.query_arrow(f"SELECT count() AS n FROM {name}").column("n")[0].as_py() == 3
    store.close()
