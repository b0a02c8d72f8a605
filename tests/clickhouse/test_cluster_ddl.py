"""The cluster layout: replicated local tables created ON CLUSTER plus a Distributed table per catalog
name. No Keeper runs here, so the replicated statements are checked as text; chDB (the real engine,
given a one-shard cluster that is itself) then runs the rest: the local and Distributed tables, the
loader through them, and the analyzers, whose derived tables must equal a single-server run's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from contracts import catalog
from contracts import config as config_mod
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.compaction import compact_closed_days

ROOT = Path(__file__).resolve().parents[2]
TABLES = [ddl.table_name(s) for s in ddl.all_ddl()]


def test_every_table_gets_a_replicated_local_table_and_a_distributed_one():
    rendered = ddl.cluster_ddl("prod", "goodput")
    assert len(rendered) == 2 * len(TABLES)
    for name, local, dist in zip(TABLES, rendered[0::2], rendered[1::2], strict=True):
        assert local.startswith(f"CREATE TABLE IF NOT EXISTS {name}_local ON CLUSTER prod (")
        engine = re.search(r"ENGINE = (\w+)\('([^']*)', '([^']*)'\)", local)
        assert engine, local
        assert engine[1] in (
            "ReplicatedMergeTree",
            "ReplicatedReplacingMergeTree",
            "ReplicatedAggregatingMergeTree",
        )
        assert engine[2] == "/clickhouse/tables/{shard}/{database}/{table}" and engine[3] == "{replica}"
        assert "non_replicated_deduplication_window" not in local
        assert dist == (
            f"CREATE TABLE IF NOT EXISTS {name} ON CLUSTER prod AS goodput.{name}_local\n"
            f"ENGINE = Distributed(prod, goodput, {name}_local, {ddl.SHARD_KEYS[name]})"
        )


def test_replicated_engines_keep_the_single_server_engine_family_and_dedup_window():
    single = dict(zip(TABLES, ddl.all_ddl(), strict=True))
    for name, local in zip(TABLES, ddl.cluster_ddl("prod", "goodput")[0::2], strict=True):
        replacing = "ENGINE = ReplacingMergeTree" in single[name]
        assert ("ReplicatedReplacingMergeTree(" in local) == replacing, name
        aggregating = "ENGINE = AggregatingMergeTree" in single[name]
        assert ("ReplicatedAggregatingMergeTree(" in local) == aggregating, name
        if name in (*catalog.RAW_TABLES.values(), *catalog.ROLLUP_TABLES.values()):
            assert "SETTINGS replicated_deduplication_window = 10000" in local
        # Everything but the name, ON CLUSTER, the engine and the dedup setting is the single-server DDL.
        assert (
            local.split("ENGINE", 1)[0].split("(", 1)[1]
            == single[name].split("ENGINE", 1)[0].split("(", 1)[1]
        )


def test_raw_tables_and_rollups_shard_by_a_leading_order_by_column():
    for table in (*catalog.RAW_TABLES.values(), *catalog.ROLLUP_TABLES.values()):
        statement = dict(zip(TABLES, ddl.all_ddl(), strict=True))[table]
        order_by = statement.split("ORDER BY (", 1)[1].split(")", 1)[0].split(", ")
        column = ddl.SHARD_KEYS[table].removeprefix("cityHash64(").removesuffix(")")
        assert column in order_by[:2], (table, order_by)


def test_each_shards_rollup_views_read_and_fill_its_local_tables():
    views, copies = ddl.rollup_views("prod")[:3], ddl.rollup_views("prod")[3:]
    for kind, view in zip(catalog.ROLLUP_TABLES, views, strict=True):
        rollup, raw = catalog.ROLLUP_TABLES[kind], catalog.RAW_TABLES[kind]
        assert view.startswith(
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {rollup}_mv_local ON CLUSTER prod TO {rollup}_local AS\n"
        )
        assert f"\nFROM {raw}_local\n" in view
        assert ddl.SHARD_KEYS[rollup] == ddl.SHARD_KEYS[raw] == "cityHash64(node)"
    for kind, view in zip(catalog.ROLLUP_TABLES, copies, strict=True):
        copy, rollup = catalog.ROLLUP_RECENT[kind], catalog.ROLLUP_TABLES[kind]
        assert view == (
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {copy}_mv_local ON CLUSTER prod TO {copy}_local AS\n"
            f"SELECT * FROM {rollup}_local"
        )
        assert ddl.SHARD_KEYS[copy] == ddl.SHARD_KEYS[rollup]  # a shard's copy holds its own rollup's rows


def test_single_server_ddl_is_unchanged_by_the_cluster_option():
    assert ddl.all_ddl()[0].startswith(f"CREATE TABLE IF NOT EXISTS {catalog.RAW_TABLES['gpu']} (\n")
    assert all(
        " ON CLUSTER " not in s and "Distributed" not in s and "Replicated" not in s for s in ddl.all_ddl()
    )


class RecordingServer:
    """What ddl.migrate sees of a ServerStore configured with a cluster: its attributes, and a server
    that answers the migration query. Only the statement list is under test here."""

    cluster = "prod"
    database = "goodput"

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.required: tuple | None = None

    def require_version(self, minimum, needs) -> None:
        self.required = minimum

    def execute(self, sql: str) -> None:
        self.statements.append(sql)

    def query_arrow(self, sql: str, params=None) -> pa.Table:
        if sql.startswith("SELECT name FROM system.merge_tree_settings"):  # ddl.tune_tables: all known
            return pa.table({"name": [n for n in ("merge_selector_base",) if f"'{n}'" in sql]})
        if sql.startswith("SELECT name, engine_full FROM system.tables"):  # tables from before the tuning
            return pa.table(
                {"name": ["goodput_live_local"], "engine_full": ["ReplicatedMergeTree ORDER BY x"]}
            )
        assert sql == f"SELECT DISTINCT version FROM {catalog.SCHEMA_MIGRATIONS}", sql
        return pa.table({"version": pa.array([], pa.uint32())})


def test_migrate_on_a_cluster_checks_the_version_then_creates_the_cluster_layout():
    store = RecordingServer()
    assert ddl.migrate(store) == catalog.SCHEMA_VERSION_DDL
    assert store.required == ddl.MIN_SERVER_VERSION == (23, 8)
    tables = ddl.cluster_ddl("prod", "goodput") + ddl.added_columns("prod")
    rollups = [
        f"{name}_local ON CLUSTER prod"
        for name in (*catalog.ROLLUP_TABLES.values(), *catalog.ROLLUP_RECENT.values())
    ]
    assert store.statements[: len(tables)] == tables
    rest = store.statements[len(tables) :]
    assert rest[:6] == [f"TRUNCATE TABLE {r}" for r in rollups]  # a migration cut short starts over
    assert rest[6:12] == ddl.rollup_views("prod")
    assert rest[9].startswith(
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {catalog.ROLLUP_RECENT['gpu']}_mv_local"
    )
    assert [s.split(" SELECT")[0].split("\n")[0] for s in rest[12:15]] == [
        f"INSERT INTO {name} WITH toInt64(round(coalesce(sm_active_pct, util_gpu_pct) * 1000)) AS bm"
        if kind == "gpu"
        else f"INSERT INTO {name}"
        for kind, name in catalog.ROLLUP_TABLES.items()
    ]
    tuned = len(ddl.TABLE_TUNING)
    assert [s.split("VALUES ")[1] for s in rest[15:-tuned]] == [
        f"({v}, '{d}')" for v, d in ddl.MIGRATIONS.items()
    ]
    recorded = f"INSERT INTO {catalog.SCHEMA_MIGRATIONS} (version, description)"
    assert all(s.startswith(recorded) for s in rest[15:-tuned])
    assert rest[-tuned:] == [  # each output table's local table once, ON CLUSTER
        f"ALTER TABLE {table}_local ON CLUSTER prod MODIFY SETTING merge_selector_base = 2"
        for table in ddl.TABLE_TUNING
    ]
    assert catalog.GOODPUT_LIVE in ddl.TABLE_TUNING and set(catalog.ANALYZER_OUTPUTS) <= set(ddl.TABLE_TUNING)


class RecordingCluster(RecordingServer):
    """What the analyzers see of a ServerStore configured with a cluster. The range holds 1,001 jobs, one
    with a quote and a backslash in its id; the statement list is under test."""

    jobs = [f"job-{i:04d}" for i in range(1000)] + ["o'brien\\1"]

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        self.statements.append(f"INSERT INTO {table} <{data.num_rows} rows>")

    def query_arrow(self, sql: str, params=None) -> pa.Table:
        if sql.startswith("SELECT (SELECT toUnixTimestamp64Milli(max(ts)) FROM raw_job"):  # data_end
            return pa.table(
                {
                    "events": pa.array([0], pa.int64()),
                    "copied": pa.array([1], pa.uint64()),
                    "copy": pa.array([1], pa.int64()),
                    "now_ms": pa.array([3_600_000], pa.int64()),
                }
            )
        if sql.startswith("SELECT (SELECT count() FROM schema_migrations WHERE version = 4)"):  # copies_from
            return pa.table(
                {"copied": pa.array([1], pa.uint64()), "now_ms": pa.array([3_600_000], pa.int64())}
            )
        if re.fullmatch(r"SELECT count\(\) AS n FROM tmp_piece_windows_\w+", sql):  # analyzers.part_count
            return pa.table({"n": pa.array([5_000_000], pa.uint64())})  # 3 parts: their statements too
        if re.fullmatch(r"SELECT day_lo, day_hi FROM tmp_span_\w+", sql):
            return pa.table({"day_lo": pa.array([0], pa.int64()), "day_hi": pa.array([3600_000], pa.int64())})
        if re.match(
            r"SELECT \(SELECT min\(t\) FROM tmp_events_\w+ WHERE event = 'submitted'\) AS new_lo", sql
        ):
            return pa.table(
                {k: pa.array([None], pa.int64()) for k in ("new_lo", "new_hi", "old_lo", "old_hi")}
            )
        assert re.fullmatch(r"SELECT DISTINCT job_id FROM tmp_events_\w+ ORDER BY job_id", sql), sql
        return pa.table({"job_id": self.jobs})


DESTRUCTIVE = re.compile(r"(DELETE FROM|TRUNCATE TABLE) (\S+)")


def test_analyzers_on_a_cluster_delete_on_the_local_tables_with_literal_jobs():
    store = RecordingCluster()
    analyzers.run(store, config_mod.load(), 0, 3_600_000)
    destructive = [s for s in store.statements if DESTRUCTIVE.match(s)]
    targets = [DESTRUCTIVE.match(s)[2] for s in destructive]
    dims, outputs = (
        [catalog.DIM_NODES, catalog.DIM_POOLS, catalog.DIM_TOPOLOGY, catalog.DIM_ACCOUNTS],
        list(analyzers.OUTPUT_TABLES),
    )
    assert sorted(set(targets)) == sorted(name + ddl.LOCAL_SUFFIX for name in dims + outputs)
    for statement in destructive:
        assert f"{DESTRUCTIVE.match(statement)[2]} ON CLUSTER prod" in statement
        assert "tmp_" not in statement  # ON CLUSTER runs it on hosts without the initiator's temporary tables
    # Two slices of job ids per job-keyed table: 1,000 and the one left, quoted as ClickHouse reads them.
    want = [", ".join(f"'{j}'" for j in store.jobs[:1000]), "'o\\'brien\\\\1'"]
    for table in (catalog.GOODPUT_WINDOWS, catalog.JOB_SUMMARY, catalog.SCHEDULING_DELAY, catalog.FAULTS):
        slices = [
            s.split("job_id IN (", 1)[1].removesuffix(")")
            for s in destructive
            if DESTRUCTIVE.match(s)[2] == table + ddl.LOCAL_SUFFIX
        ]
        assert slices == want, table
    # Everything else (reads, inserts) names the Distributed tables.
    assert not any(ddl.LOCAL_SUFFIX in s for s in store.statements if s not in destructive)
    assert any(s.startswith(f"INSERT INTO {catalog.GOODPUT_WINDOWS} (cluster,") for s in store.statements)


def test_a_live_run_on_a_cluster_replaces_only_its_windows_of_goodput_live():
    store = RecordingCluster()
    analyzers.run_live(store, config_mod.load(), 3_000_000)
    destructive = [s for s in store.statements if DESTRUCTIVE.match(s)]
    targets = {DESTRUCTIVE.match(s)[2] for s in destructive}
    dims = [catalog.DIM_NODES, catalog.DIM_POOLS, catalog.DIM_TOPOLOGY, catalog.DIM_ACCOUNTS]
    assert targets == {name + ddl.LOCAL_SUFFIX for name in [*dims, catalog.GOODPUT_LIVE]}
    live = [s for s in destructive if DESTRUCTIVE.match(s)[2] == catalog.GOODPUT_LIVE + ddl.LOCAL_SUFFIX]
    assert len(live) == 2 and all("window_start >= toDateTime(intDiv(3000000, 1000))" in s for s in live)
    assert any(s.startswith(f"INSERT INTO {catalog.GOODPUT_LIVE} (cluster,") for s in store.statements)
    run_hits = next(s for s in store.statements if s.startswith("CREATE OR REPLACE TABLE tmp_run_hits_"))
    assert f"FROM {catalog.ROLLUP_RECENT['gpu']} WHERE" in run_hits  # the Distributed copy, as the rollup
    assert not any(
        f"INTO {catalog.GOODPUT_WINDOWS} " in s or f"INTO {catalog.JOB_STATE} " in s for s in store.statements
    )


def test_analyzers_on_one_server_delete_from_the_catalog_tables():
    store = RecordingCluster()
    store.cluster = None  # a ServerStore without `cluster`; ChdbStore has no such attribute at all
    analyzers.run(store, config_mod.load(), 0, 3_600_000)
    destructive = [s for s in store.statements if DESTRUCTIVE.match(s)]
    assert len(destructive) == 4 + len(analyzers.OUTPUT_TABLES) and not any(
        " ON CLUSTER " in s or ddl.LOCAL_SUFFIX in s for s in destructive
    )
    alive = re.compile(r"job_id IN \(SELECT DISTINCT job_id FROM tmp_events_\w+\)")
    assert (
        sum(bool(alive.search(s)) for s in destructive) == 9
    )  # 3 classification, job_state, faults, stragglers, 3 fleet (per job)


def _chdb_run(workdir: Path, start_ms: int, *flags: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.clickhouse.chdb_cluster", str(workdir), str(start_ms), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, f"chdb_cluster.py failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sim_start_ms() -> int:
    return (int(time.time()) // 60) * 60_000 - 1_800_000


@pytest.fixture(scope="module")
def chdb_cluster(tmp_path_factory, sim_start_ms):
    """One run of tests/clickhouse/chdb_cluster.py (the cluster layout in chDB, loader and analyzers)."""
    return _chdb_run(tmp_path_factory.mktemp("chdb-cluster"), sim_start_ms)


@pytest.fixture(scope="module")
def chdb_single(tmp_path_factory, sim_start_ms):
    """The same run on the single-server layout: what the cluster's derived tables must hold."""
    return _chdb_run(tmp_path_factory.mktemp("chdb-single"), sim_start_ms, "--single")


def test_chdb_accepts_the_local_and_distributed_tables(chdb_cluster):
    engines = chdb_cluster["engines"]
    for name in TABLES:
        assert engines[name] == "Distributed", name
        assert engines[name + ddl.LOCAL_SUFFIX] in (
            "MergeTree",
            "ReplacingMergeTree",
            "AggregatingMergeTree",
        ), name
    for name in (*catalog.ROLLUP_TABLES.values(), *catalog.ROLLUP_RECENT.values()):
        assert engines[f"{name}_mv{ddl.LOCAL_SUFFIX}"] == "MaterializedView", name


def test_loader_writes_and_dedups_through_distributed_tables(chdb_cluster):
    loaded = chdb_cluster["loaded_rows"]
    assert loaded["gpu"] > 0 and loaded["job"] > 0
    assert chdb_cluster["distributed_rows"] == loaded == chdb_cluster["local_rows"]
    assert chdb_cluster["rollup_rows"] == {k: loaded[k] for k in catalog.ROLLUP_TABLES}
    assert chdb_cluster["ledger_streams"] > 0  # the sequence ledger reloads through the Distributed table
    assert (
        chdb_cluster["replay_rows"] == {}
    )  # a restarted loader stores nothing twice (counts above are after it)


def test_analyzers_run_unchanged_on_distributed_tables(chdb_cluster, chdb_single):
    """Two analyzer runs over the same range, then two more dimension refreshes: the Distributed tables
    show exactly the local rows, and those are the rows one server holds after the same runs."""
    assert chdb_cluster["analyzer_error"] is None and chdb_single["analyzer_error"] is None
    for name, (distributed, local) in chdb_cluster["derived_rows"].items():
        assert distributed == local > 0, name
    for name, want in chdb_single["derived"].items():
        got = chdb_cluster["derived"][name]
        assert got == [
            [pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in row] for row in want
        ], name
    windows, summaries = (
        chdb_cluster["derived"][catalog.GOODPUT_WINDOWS],
        chdb_cluster["derived"][catalog.JOB_SUMMARY],
    )
    assert all(row[-1] == 0 for row in windows)  # no category stored twice for a job's window
    assert all(row[-1] == 1 for row in summaries)  # one summary row per job
    assert chdb_cluster["dim_nodes_rows"] == chdb_cluster["configured_nodes"]


def test_closed_days_compact_on_the_local_tables_and_change_no_result(chdb_cluster):
    """Compaction on the cluster layout merges the local tables' parts (the Distributed table has none)
    and the analyzers, run again, find what they found before."""
    compacted = chdb_cluster["compacted"]
    assert {table for table, _ in compacted} == set(catalog.ROLLUP_TABLES.values())
    assert all(parts >= 2 for _, parts in compacted), compacted
    parts = chdb_cluster["rollup_parts"]
    assert {p["table"] for p in parts} == {t + ddl.LOCAL_SUFFIX for t in catalog.ROLLUP_TABLES.values()}
    assert all(p["n"] == 1 for p in parts), parts
    assert chdb_cluster["derived_after_compaction"] == chdb_cluster["derived"]


def test_compaction_on_a_cluster_merges_the_local_tables_on_every_shard():
    """The statement text production issues on the cluster layout: the local table, ON CLUSTER (the engine
    test above runs it without Keeper, which drops ON CLUSTER)."""

    class Recording:
        cluster = "prod"

        def __init__(self) -> None:
            self.statements: list[str] = []
            self.asked: list[str] = []

        def query_arrow(self, sql: str, params=None) -> pa.Table:
            self.asked.append(sql)
            return pa.table(
                {
                    "table": ["gpu_rollup_10s_local"],
                    "partition": ["2026-12-01"],
                    "partition_id": ["20261201"],
                    "parts": pa.array([3], pa.uint64()),
                }
            )

        def execute(self, sql: str, params=None) -> None:
            self.statements.append(sql)

    store = Recording()
    done = compact_closed_days(store, 1_796_500_000, settle_s=3600)
    assert [(c.table, c.day, c.parts) for c in done] == [("gpu_rollup_10s", "2026-12-01", 3)]
    assert store.statements == [
        "OPTIMIZE TABLE gpu_rollup_10s_local ON CLUSTER prod PARTITION ID '20261201' FINAL"
    ]
    assert "'gpu_rollup_10s_local'" in store.asked[0] and "'gpu_rollup_10s'" not in store.asked[0]
