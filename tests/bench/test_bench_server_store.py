"""bench/bench_server_store.py inserts the loader's rows into today's raw tables as the test server's SQL
has them: each must be today's table (so a schema change cannot leave the bench measuring another one),
and what goes in through the server store must come back, every null as NULL."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.server_store import ServerStore

pytestmark = pytest.mark.clickhouse_server

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_server_store", BENCH / "bench_server_store.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("kind", ["gpu", "nic", "storage"])
def test_the_18_16_table_is_todays_with_only_the_sql_changed(bench, kind):
    today = ddl.raw_table_ddl(ddl.KINDS[kind])
    old = bench.server_1816_ddl(kind)
    assert "CODEC" not in old and "TTL" not in old and "DateTime64" not in old and "SETTINGS" not in old
    columns = [line.split()[0] for line in today.splitlines()[1:] if line.startswith("    ")]
    assert [line.split()[0] for line in old.splitlines()[1:] if line.startswith("    ")] == columns
    for clause in ("ENGINE = ", "ORDER BY ", "PARTITION BY "):
        assert [x for x in today.splitlines() if x.startswith(clause)] == [
            x for x in old.splitlines() if x.startswith(clause)
        ]


@pytest.mark.parametrize("kind", ["gpu", "nic", "storage"])
def test_the_loaders_rows_come_back_from_the_server(bench, kind, clickhouse_server):
    t0_ms = (int(time.time()) - 7200) // 3600 * 3600 * 1000
    rows = bench.loader_shape(kind, bench._rows(kind, 2, 30, t0_ms))
    some_null = next(  # a measured column, here null in every other row
        c
        for c in rows.column_names
        if pa.types.is_floating(rows.column(c).type) and not rows.column(c).null_count
    )
    rows = rows.set_column(
        rows.column_names.index(some_null),
        some_null,
        pc.if_else(pa.array([i % 2 == 0 for i in range(rows.num_rows)]), rows.column(some_null), None),
    )
    table = catalog.RAW_TABLES[kind]
    with ServerStore(clickhouse_server.store_config()) as store:
        store.execute(f"DROP TABLE IF EXISTS {table}")
        store.execute(bench.server_1816_ddl(kind))
        try:
            store.insert_arrow(table, rows)
            got = store.query_arrow(
                f"SELECT {', '.join(rows.column_names)} FROM {table} ORDER BY seq, batch_row"
            )
        finally:
            store.execute(f"DROP TABLE {table}")
    assert rows.column(some_null).null_count == rows.num_rows // 2
    want = rows.sort_by([("seq", "ascending"), ("batch_row", "ascending")])
    for name in rows.column_names:
        expected, actual = want.column(name), got.column(name)
        if pa.types.is_timestamp(expected.type):  # DateTime in 18.16: whole seconds, as generated
            expected, actual = pc.divide(expected.cast(pa.int64()), 1000), actual.cast(pa.int64())
        elif pa.types.is_boolean(expected.type):  # UInt8 in 18.16
            expected = expected.cast(pa.uint8())
        assert actual.null_count == expected.null_count, name
        assert actual.to_pylist() == expected.to_pylist(), name
