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


@pytest.fixture
def sc(_store):
    reset(_store)
    return Scenario(_store)
