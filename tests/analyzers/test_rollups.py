"""The insert-time rollups (pipeline/ddl.py) and the analyzers reading them (goodput.sql 3e, 7, 9).

Every analyzer test already runs on both sources (conftest: `sc` is parametrized); these are the cases
the rollups themselves bring: a batch in the rollup twice, a store from before the rollups, a migration
cut short, and windows that are no multiple of the rollups' 10 s."""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from tests.analyzers.scenario import ms
from tests.analyzers.test_reanalysis import N1, N2, N3, cluster_day

ROLLUPS = tuple(catalog.ROLLUP_TABLES.values())


def rollup_contents(store) -> dict[str, list]:
    """Each rollup merged per key (its parts may not be), every column, sorted; "<kind> recent": its
    time-first copy, the same way."""
    out = {}
    copies = {f"{kind} recent": table for kind, table in catalog.ROLLUP_RECENT.items()}
    for kind, table in {**catalog.ROLLUP_TABLES, **copies}.items():
        cols = store.query_arrow(f"SELECT * FROM {table} LIMIT 0").column_names
        key = [
            c
            for c in cols
            if not store.query_arrow(
                f"SELECT type FROM system.columns WHERE table = '{table}' AND name = '{c}'"
            )
            .column("type")[0]
            .as_py()
            .startswith("SimpleAggregateFunction")
        ]
        merged = {
            "rows": "sum(rows)",
            "seconds": "groupBitOr(seconds)",
            "thr": "groupBitOr(thr)",
            "samples": "arraySort(groupArrayArray(samples))",
            "times": "arraySort(groupUniqArrayArray(times))",
            "first_ms": "min(first_ms)",
            "last_ms": "max(last_ms)",
            "psi_max": "max(psi_max)",
        }
        aggs = [f"{merged.get(c, f'sum({c})')} AS {c}" for c in cols if c not in key]
        t = store.query_arrow(
            f"SELECT {', '.join(key + aggs)} FROM {table} GROUP BY {', '.join(key)} ORDER BY {', '.join(key)}"
        )
        out[kind] = t.to_pylist()
    return out


def test_each_raw_row_is_rolled_up_once_even_when_its_insert_is_replayed(sc):
    cluster_day(sc)
    sc.load()
    raw = sc.store.query_arrow(f"SELECT * FROM {catalog.RAW_TABLES['gpu']} WHERE node = '{N2}'")
    sc.store.insert_arrow(catalog.RAW_TABLES["gpu"], raw, "replayed-token")
    sc.store.insert_arrow(
        catalog.RAW_TABLES["gpu"], raw, "replayed-token"
    )  # a loader killed after the insert
    for kind, table in catalog.ROLLUP_TABLES.items():
        raw_rows = sc.store.query_arrow(f"SELECT count() AS n FROM {catalog.RAW_TABLES[kind]} FINAL")
        rolled = sc.store.query_arrow(f"SELECT sum(rows) AS n FROM {table}")
        extra = raw.num_rows if kind == "gpu" else 0  # the first replay is a new token: a race, counted
        assert rolled.column("n")[0].as_py() == raw_rows.column("n")[0].as_py() + extra, kind


def _store_twice_in_two_blocks(store, table: str, where: str) -> None:
    """As two racing loaders store a batch: a second insert of the same rows."""
    store.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE {where}")


def _store_twice_in_one_block(store, table: str, where: str) -> None:
    """As one load holding a batch twice under two sequence numbers: both copies in one inserted block,
    which the store writes without collapsing them (pipeline.store.NO_COLLAPSE_AT_INSERT)."""
    rows = store.query_arrow(f"SELECT * FROM {table} WHERE {where}")
    before = store.query_arrow(f"SELECT count() AS n FROM {table}").column("n")[0].as_py()
    store.insert_arrow(table, pa.concat_tables([rows, rows]))
    after = store.query_arrow(f"SELECT count() AS n FROM {table}").column("n")[0].as_py()
    assert after == before + 2 * rows.num_rows  # both copies stored, for FINAL and the merges to collapse


@pytest.mark.parametrize("store_twice", [_store_twice_in_two_blocks, _store_twice_in_one_block])
def test_a_batch_stored_twice_gives_the_tables_of_one_copy(sc, store_twice):
    """The same batches stored twice, by racing loaders or inside one block: FINAL collapses the raw
    copies, the rollup counts them twice, and 3e sends the node to its raw rows, so nothing is counted
    twice."""
    cluster_day(sc)
    sc.load()
    sc.analyze(0, 1000)
    once = sc.dump()
    for kind, node in (("gpu", N2), ("nic", N3), ("storage", N1)):  # N1's NFS reads: a pool near its ceiling
        store_twice(
            sc.store,
            catalog.RAW_TABLES[kind],
            f"node = '{node}' AND ts < fromUnixTimestamp64Milli({ms(400)})",
        )
    doubled = sc.store.query_arrow(
        "SELECT countIf(r > bitCount(s)) AS dup, count() AS n FROM "
        "(SELECT sum(rows) AS r, groupBitOr(seconds) AS s "
        f"FROM {catalog.ROLLUP_TABLES['gpu']} WHERE node = '{N2}' GROUP BY gpu, window_start)"
    ).to_pylist()[0]
    assert 0 < doubled["dup"] < doubled["n"]  # the rollup does count them twice
    sc.analyze(0, 1000)
    assert sc.dump() == once


def test_a_window_whose_seconds_lie_in_two_parts_is_summed_once(sc):
    """Step 7 takes a rollup row as its window's only one, unsummed, where it holds all 10 seconds
    (goodput.sql `alone`): any other row of the window would repeat a second, which 3e finds. Here every
    window's seconds lie in two of the rollup's parts (even and odd seconds stored apart, the merges held
    off), so no row holds them all: each window is summed from both, and the tables are those of one row
    per window. (Taking the rows of a window wholly inside a running piece as alone without the seconds'
    test counts each window twice.)"""
    cluster_day(sc)
    sc.load()
    sc.analyze(0, 1000)
    once = sc.dump()
    raw, rollup = catalog.RAW_TABLES["gpu"], catalog.ROLLUP_TABLES["gpu"]
    sc.store.execute(f"CREATE TABLE held_rows ENGINE = Memory AS SELECT * FROM {raw} FINAL")
    for table in (raw, rollup, catalog.ROLLUP_RECENT["gpu"]):
        sc.store.execute(f"TRUNCATE TABLE {table}")
    sc.store.execute(f"SYSTEM STOP MERGES {rollup}")
    try:
        for parity in (0, 1):
            sc.store.execute(
                f"INSERT INTO {raw} SELECT * FROM held_rows "
                f"WHERE intDiv(toUnixTimestamp64Milli(ts), 1000) % 2 = {parity}"
            )
        split = sc.store.query_arrow(
            "SELECT count() AS rows, uniqExact(node, gpu, window_start) AS windows, "
            f"countIf(bitCount(seconds) = 10) AS whole FROM {rollup}"
        ).to_pylist()[0]
        assert split["whole"] == 0 and split["rows"] > 1.9 * split["windows"]
        sc.analyze(0, 1000)
    finally:
        sc.store.execute(f"SYSTEM START MERGES {rollup}")
        sc.store.execute("DROP TABLE held_rows")
    assert sc.dump() == once


def test_a_window_no_multiple_of_10_s_reads_the_raw_rows_and_classifies_the_same_seconds(sc):
    cluster_day(sc)
    sc.load()
    by_window = {}
    for window_s in (10.0, 15.0):
        sc.cfg = msgspec.structs.replace(
            sc.cfg, analyzer=msgspec.structs.replace(sc.cfg.analyzer, window_s=window_s)
        )
        sc.analyze(0, 1000)
        t = sc.store.query_arrow(
            "SELECT any(window_s) AS w, category, sum(gpu_seconds) AS s "
            "FROM goodput_windows WHERE job_id != 'c' GROUP BY category"  # c runs to the end of the data,
        ).to_pylist()  # rounded up to a whole window
        assert {r["w"] for r in t} == {window_s}
        by_window[window_s] = {r["category"]: r["s"] for r in t}
    ten, fifteen = by_window[10.0], by_window[15.0]
    assert sum(fifteen.values()) == pytest.approx(sum(ten.values()), abs=1e-6)  # the same allocated seconds
    assert fifteen["productive"] == pytest.approx(ten["productive"], rel=0.02)


def test_a_window_of_several_rollup_windows_gives_the_tables_the_raw_rows_give(sc):
    """A 30 s window sums three 10 s rollup rows per GPU and per NIC port (goodput.sql 7, and 9 through
    run.py's NIC_ROLLUP_PORTS, which sums a 10 s window's merged row as it is): the same tables, byte for
    byte, as reading every node's raw rows at 30 s."""
    cluster_day(sc)
    d = dict(job_id="d", account="llm")  # stalls in (300, 330] while one port of N1 congests for 10 s of it
    sc.job(dict(t=99, event="submitted", gpus_requested=2, **d))
    sc.job(
        dict(t=100, event="allocated", node=N1, gpu_indices=[2, 3], **d),
        dict(t=100, event="gang_complete", **d),
    )
    sc.job(dict(t=105, event="running", **d), dict(t=500, event="completed", **d))
    sc.job(dict(t=500, event="released", node=N1, gpu_indices=[2, 3], **d))
    sc.gpu(N1, [2, 3], 100, 500, lambda s, g: 15.0 if 300 < s <= 330 else 90.0 - (s % 7))
    port = dict(device="mlx5_0", port=1, link_layer="InfiniBand")
    threshold = sc.cfg.analyzer.xmit_wait_per_s
    for t0, t1, level in ((100, 300, 0.0), (300, 310, 2.4), (310, 500, 0.0)):
        sc.rows("nic", N1, t0, t1, xmit_wait_per_s=level * threshold, **port)  # 0.8 of it over (300, 330]
    sc.load()
    sc.cfg = msgspec.structs.replace(sc.cfg, analyzer=msgspec.structs.replace(sc.cfg.analyzer, window_s=30.0))
    dumps = []
    for rollups in (sc.rollups, not sc.rollups):
        sc.rollups = rollups
        sc.analyze(0, 1000)
        dumps.append(sc.dump())
    evidence = sc.store.query_arrow(
        "SELECT groupUniqArray(category) AS c FROM goodput_windows WHERE window_s = 30 AND evidence != ''"
    ).to_pylist()[0]["c"]
    assert {"comm_stall", "data_stall"} <= set(evidence)  # the NIC and storage rollups were read
    assert dumps[0] == dumps[1]


def _forget_rollups(store, versions: tuple[int, ...] = (2, 4)) -> None:
    """The store as version 1 left it: no rollups, no views, versions 2 and 4 not recorded; with
    `versions` (4,), as version 3 left it: no time-first copies of the rollups."""
    copies = tuple(catalog.ROLLUP_RECENT.values())
    tables = (*ROLLUPS, *copies) if 2 in versions else copies
    for table in tables:
        store.execute(f"DROP VIEW IF EXISTS {table}_mv")
        store.execute(f"DROP TABLE IF EXISTS {table}")
    store.execute(
        f"DELETE FROM {catalog.SCHEMA_MIGRATIONS} WHERE version IN ({', '.join(map(str, versions))})"
    )


@pytest.mark.parametrize("cut_short", [False, True])
def test_migrate_fills_the_rollups_of_a_store_from_before_them(sc, cut_short):
    cluster_day(sc)
    sc.load()
    fed = rollup_contents(sc.store)
    assert all(fed.values())
    _forget_rollups(sc.store)
    if cut_short:  # the views and part of a backfill exist, version 2 was never recorded
        tables = [ddl.rollup_table_ddl(k, recent) for recent in (False, True) for k in catalog.ROLLUP_TABLES]
        for statement in tables + ddl.rollup_views():
            sc.store.execute(statement)
        ddl.backfill_rollup(sc.store, "gpu")
    assert ddl.migrate(sc.store) == catalog.SCHEMA_VERSION_DDL == 4
    assert rollup_contents(sc.store) == fed
    assert ddl.migrate(sc.store) == 4  # and once done, never again
    assert rollup_contents(sc.store) == fed
    versions = sc.store.query_arrow(f"SELECT version FROM {catalog.SCHEMA_MIGRATIONS} ORDER BY version")
    assert versions.column("version").to_pylist() == [1, 2, 3, 4]


@pytest.mark.parametrize("cut_short", [False, True])
def test_migrate_copies_the_rollups_last_days_time_first_for_a_store_from_version_3(sc, cut_short):
    cluster_day(sc)
    sc.load()
    fed = rollup_contents(sc.store)
    assert all(fed[f"{kind} recent"] == fed[kind] != [] for kind in catalog.ROLLUP_TABLES)  # one insert
    _forget_rollups(sc.store, versions=(4,))
    if cut_short:  # the copies' tables, views and a first copy exist, version 4 was never recorded
        copies = [ddl.rollup_table_ddl(k, recent=True) for k in catalog.ROLLUP_TABLES]
        for statement in [*copies, *ddl.rollup_views()]:
            sc.store.execute(statement)
        ddl.backfill_recent(sc.store)
    assert ddl.migrate(sc.store) == 4
    assert rollup_contents(sc.store) == fed
    assert ddl.migrate(sc.store) == 4
    assert rollup_contents(sc.store) == fed


class RawNodes:
    """A store that keeps what step 3e chose in each run: per kind, the nodes read from their raw rows."""

    def __init__(self, store):
        self.store, self.nodes = store, {}

    def execute(self, sql):
        self.store.execute(sql)
        for kind in catalog.ROLLUP_TABLES:
            if sql.startswith(f"CREATE OR REPLACE TABLE tmp_raw_{kind}_nodes_"):
                table = sql.split()[4]
                self.nodes[kind] = sorted(
                    self.store.query_arrow(f"SELECT node FROM {table}").column("node").to_pylist()
                )

    def __getattr__(self, name):
        return getattr(self.store, name)

    @staticmethod
    def only(kind, nodes):
        """What `nodes` reads raw when only `kind`'s rollup holds a duplicate."""
        return {k: nodes if k == kind else [] for k in catalog.ROLLUP_TABLES}


@pytest.mark.parametrize(
    ("kind", "node", "retag"),
    [("gpu", N2, ""), ("gpu", N2, "another-job"), ("nic", N3, ""), ("storage", N1, "")],
)
def test_one_second_stored_twice_in_any_rollup_sends_its_node_to_the_raw_rows(sc, kind, node, retag):
    """3e's duplicate check finds a single row stored twice in another part (as racing loaders store it),
    in each rollup: the NIC rollup read FINAL, the GPU and storage rollups summed per block of windows
    (run.py DUPLICATES), the GPU's across the job a sample was tagged with, since a second stored under two
    tags is a duplicate all the same."""
    cluster_day(sc)
    sc.load()
    watch = RawNodes(sc.store)
    analyzers.run(watch, sc.cfg, ms(0), ms(1000), rollups=sc.rollups)
    assert watch.nodes == RawNodes.only(kind, [])
    raw = catalog.RAW_TABLES[kind]
    copy = f"* REPLACE ('{retag}' AS job_id)" if retag else "*"
    sc.store.execute(
        f"INSERT INTO {raw} SELECT {copy} FROM {raw} WHERE node = '{node}' ORDER BY ts LIMIT 1 OFFSET 10"
    )
    analyzers.run(watch, sc.cfg, ms(0), ms(1000), rollups=sc.rollups)
    # only that kind's rows are read raw; the raw path reads every node raw anyway
    assert watch.nodes == RawNodes.only(kind, [node] if sc.rollups else [])


@pytest.mark.parametrize("position", [0, 1, analyzers.CHECK_WINDOWS - 1])
def test_the_gpu_check_finds_a_second_stored_twice_wherever_its_window_sits_in_a_block(sc, position):
    """3e's GPU check ORs the seconds of CHECK_WINDOWS windows side by side in one integer: a second stored
    twice (under another job tag) is found in the block's first, second and last window alike."""
    cluster_day(sc)
    sc.load()
    raw = catalog.RAW_TABLES["gpu"]
    window = f"intDiv(toUnixTimestamp64Milli(ts) - 1, {ddl.R_MS})"  # the rollup's window of the sample
    sc.store.execute(
        f"INSERT INTO {raw} SELECT * REPLACE ('another-job' AS job_id) FROM {raw} WHERE node = '{N2}' "
        f"AND {window} % {analyzers.CHECK_WINDOWS} = {position} ORDER BY ts LIMIT 1 OFFSET 3"
    )
    watch = RawNodes(sc.store)
    analyzers.run(watch, sc.cfg, ms(0), ms(1000), rollups=sc.rollups)
    assert watch.nodes == RawNodes.only("gpu", [N2] if sc.rollups else [])


@pytest.mark.parametrize(("retag", "where"), [("", "raw"), ("another-job", "raw"), ("", "copy")])
def test_a_live_run_reading_the_time_first_copies_finds_a_second_stored_twice(sc, retag, where):
    """A duplicate reaches a rollup and its time-first copy alike (one insert fills both), and 3e finds it
    in a live run reading the copies; so does a row only the copy holds twice (a batch inserted while
    `migrate` copied the rollup's last days): either way that node's raw rows are read."""
    cluster_day(sc)
    sc.load()
    analyzers.run(sc.store, sc.cfg, ms(0), ms(1000), rollups=sc.rollups)
    after = f"node = '{N2}' AND window_start > toDateTime({ms(700) // 1000})"
    if where == "raw":
        raw = catalog.RAW_TABLES["gpu"]
        copy = f"* REPLACE ('{retag}' AS job_id)" if retag else "*"
        sc.store.execute(
            f"INSERT INTO {raw} SELECT {copy} FROM {raw} WHERE node = '{N2}' AND ts > "
            f"fromUnixTimestamp64Milli({ms(700)}) ORDER BY ts LIMIT 1"
        )
    else:
        recent, rollup = catalog.ROLLUP_RECENT["gpu"], catalog.ROLLUP_TABLES["gpu"]
        sc.store.execute(f"INSERT INTO {recent} SELECT * FROM {rollup} WHERE {after} LIMIT 1")
    assert analyzers.recent_covers(analyzers.copies_from(sc.store), ms(600))
    watch = RawNodes(sc.store)
    analyzers.run_live(watch, sc.cfg, ms(600), rollups=sc.rollups, parts=sc.parts)
    assert watch.nodes == RawNodes.only("gpu", [N2] if sc.rollups else [])


def test_the_nic_rollup_is_read_from_its_copy_only_where_the_copy_holds_every_row(sc, monkeypatch):
    """Every run reads the NIC rollup's windows from its time-first copy from the instant the copy holds
    every row on (`copies_from`), and the earlier ones from the rollup (run.py nic_rollup_rows). A job
    losing a third of its seconds under fabric congestion from 0 to 400 s; the copy's rows before 200 s
    deleted, as its TTL drops them, and that instant made the copies' first: the fabric stall is found on
    both sides of it, as before. Read from the copy alone, the first half would have no evidence (idle)."""
    j = dict(job_id="j", account="research")
    sc.job(dict(t=0, event="allocated", node=N3, gpu_indices=[0, 1], **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=400, event="completed", **j), dict(t=400, event="released", node=N3, gpu_indices=[0, 1], **j)
    )
    sc.gpu(N3, [0, 1], 0, 400, lambda s, g: 90.0 if s % 2 else 30.0)
    sc.rows("nic", N3, 0, 400, device="mlx5_0", port=1, link_layer="InfiniBand", xmit_wait_per_s=5e6)
    sc.load()
    sc.analyze(0, 500)
    assert sc.cats("j")["comm_stall"] == pytest.approx(800 / 3, rel=0.02)
    before = sc.dump()
    cut_s = (ms(200) + 999) // 1000
    sc.store.execute(
        f"DELETE FROM {catalog.ROLLUP_RECENT['nic']} WHERE window_start < toDateTime({cut_s}, 'UTC')"
    )
    now_s = sc.store.query_arrow("SELECT toUnixTimestamp(now()) AS t").column("t")[0].as_py()
    monkeypatch.setattr(ddl, "RECENT_TTL_DAYS", (now_s - cut_s) / 86_400)
    assert cut_s * 1000 <= analyzers.copies_from(sc.store) < ms(400)
    sc.analyze(0, 500)
    assert sc.dump() == before
