"""bench/bench_schema.py measures variants of today's raw tables: each must be a real, working change of
today's DDL, so that a schema change cannot leave the bench measuring a table that no longer exists."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.chdb_store import ChdbStore

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_schema.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_schema", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_schema"] = module
    spec.loader.exec_module(module)
    return module


def test_an_edit_that_changes_nothing_fails_loudly(bench):
    with pytest.raises(ValueError, match="no codecs"):
        bench.NO_CODECS("CREATE TABLE t (x Int64) ENGINE = MergeTree ORDER BY (x)")


def test_each_variant_differs_from_today_as_named(bench):
    today = ddl.raw_table_ddl(ddl.KINDS["gpu"])
    for v in bench.variants(20_000):
        statement = bench.variant_ddl("gpu", v, "t")
        assert statement.split("(", 1)[1] == today.split("(", 1)[1] or v.edits, v.name
        if v.edits:
            assert statement.split("(", 1)[1] != today.split("(", 1)[1], v.name
    lean = bench.variant_ddl(
        "gpu", bench.Variant("lean", (bench.MERGETREE, bench.NO_CODECS, bench.NO_NULLABLE)), "t"
    )
    assert "Nullable" not in lean and "CODEC" not in lean and "ReplacingMergeTree" not in lean
    assert "ORDER BY (ts, cluster, node, gpu)" in bench.variant_ddl(
        "gpu", bench.Variant("ts", (bench.TS_FIRST,)), "t"
    )


def test_every_variant_takes_the_loaders_rows_and_keeps_them(bench, tmp_path):
    """Each variant's table (and view) is created, takes the rows in blocks, Arrow and INSERT SELECT,
    and holds them all afterwards; the session settings a variant sets are put back."""
    t0_ms = (int(time.time()) - 7200) // 3600 * 3600 * 1000
    rows = bench.loader_shape("gpu", bench._rows("gpu", 2, 30, t0_ms))
    assert rows.num_rows == 2 * 30 * 8
    assert (
        rows.column_names[:3] == ["cluster", "node", "ts"]
        and rows.column("model").null_count == rows.num_rows
    )
    with ChdbStore(tmp_path / "store") as store:
        source = bench.make_source(store, "gpu", rows)
        counts: list[tuple[int, int]] = []

        def count(table: str) -> None:
            n = store.query_arrow(f"SELECT count() AS n FROM {table}").column("n")[0].as_py()
            rolled = store.query_arrow(
                f"SELECT count() AS n FROM system.tables WHERE name = '{table}_rollup'"
            )
            if rolled.column("n")[0].as_py():
                rolled = store.query_arrow(f"SELECT sum(rows) AS n FROM {table}_rollup")
            counts.append((n, rolled.column("n")[0].as_py()))

        for v in bench.variants(20_000):
            assert bench.run_arrow(store, "gpu", v, rows, 100, f"t-{v.name}", after=count) > 0
            assert bench.run_engine(store, "gpu", v, source, after=count) > 0
            # every row stored; a variant with the view rolled every row up
            assert counts[-2:] == [(rows.num_rows, rows.num_rows if v.views else 0)] * 2, v.name
        got = (
            store.query_arrow("SELECT toString(getSetting('optimize_on_insert')) AS v").column("v")[0].as_py()
        )
        assert got == "true"
        assert catalog.RAW_TABLES["gpu"] not in store.query_arrow("SHOW TABLES").column(0).to_pylist()
