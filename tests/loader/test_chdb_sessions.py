"""The embedded store runs a statement from each thread at once (pipeline/chdb_store.py `_checkout`): the
analyzers' live runs run two statements at a time. One chDB session runs one statement at a time, so a
second thread's statement goes through a second connection to the same engine, which sees the same
tables; closing the store closes every connection."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.chdb_store import ChdbStore
from pipeline.store import StoreError

SLOW = "INSERT INTO t SELECT sleepEachRow(1) + 1 FROM numbers(3)"  # 3 s in the engine


def slow_insert_running(store: ChdbStore) -> threading.Thread:
    """Starts SLOW in a thread of its own and returns once the engine runs it."""
    store.execute("CREATE TABLE IF NOT EXISTS t (x UInt8) ENGINE = Memory")
    thread = threading.Thread(target=store.execute, args=(SLOW,))
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        running = store.query_arrow(
            "SELECT count() AS n FROM system.processes WHERE query LIKE 'INSERT INTO t SELECT sleepEachRow%'"
        )
        if running.column("n")[0].as_py():
            return thread
        time.sleep(0.01)
    raise AssertionError("the slow insert never ran")


def test_a_second_threads_statement_does_not_wait_for_the_first(tmp_path):
    with ChdbStore(tmp_path / "store") as store:
        thread = slow_insert_running(store)
        assert store.query_arrow("SELECT count() AS n FROM t").column("n")[0].as_py() == 0  # not ended yet
        assert thread.is_alive()
        thread.join()
        assert store.query_arrow("SELECT count() AS n FROM t").column("n")[0].as_py() == 3
        assert len(store._extra) == 1  # one more connection, to the same tables


def test_closing_the_store_closes_every_connection(tmp_path):
    store = ChdbStore(tmp_path / "store")
    slow_insert_running(store).join()
    assert len(store._extra) == 1
    store.close()
    assert store._extra == []
    with pytest.raises(StoreError, match="is closed"):
        store.execute("SELECT 1")
    with ChdbStore(tmp_path / "store") as again:  # the directory is free for the next process
        assert again.query_arrow("SELECT 1 AS one").column("one")[0].as_py() == 1


def test_every_session_opens_with_the_engines_options(tmp_path):
    """No JIT compilation of expressions (ENGINE_OPTIONS): a long-lived process would pay for it in the
    fourth analyzer run, for no faster runs after. The second thread's connection has them too."""
    jit = "SELECT getSetting('compile_expressions') AS e, getSetting('compile_aggregate_expressions') AS a, "
    jit += "getSetting('compile_sort_description') AS s"
    off = [{"e": False, "a": False, "s": False}]
    with ChdbStore(tmp_path / "store") as store:
        assert store.query_arrow(jit).to_pylist() == off
        thread = slow_insert_running(store)
        assert store.query_arrow(jit).to_pylist() == off  # through the second connection
        thread.join()
        assert len(store._extra) == 1
