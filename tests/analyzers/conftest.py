"""One chDB store per module (chDB allows one data directory per process), emptied before each test."""

import pytest

from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from tests.analyzers.scenario import Scenario, reset


@pytest.fixture(scope="module")
def _store(tmp_path_factory):
    store = ChdbStore(tmp_path_factory.mktemp("analyzers") / "store")
    ddl.migrate(store)
    yield store
    store.close()


@pytest.fixture(params=["rollups", "raw"])
def sc(_store, request):
    """Every analyzer test runs twice: reading the insert-time rollups, and reading every node's raw rows
    (what nodes with a clock offset or a duplicate, and windows no multiple of 10 s, get): both must
    pass the same assertions. The first runs the widest statements in one part, as a small run does; the
    second in two, as a large run does (analyzers.run.ROWS_PER_PART)."""
    reset(_store)
    raw = request.param == "raw"
    return Scenario(_store, rollups=not raw, parts=2 if raw else 1)
