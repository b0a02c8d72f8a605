"""Runs goodput on the cluster layout inside chDB, in a process of its own, and prints what happened as
JSON: `python -m tests.clickhouse.chdb_cluster WORKDIR START_MS [--single]`. `--single` runs the same
simulated half hour on the single-server layout instead: the reference the cluster's derived tables
must equal. START_MS is given by the caller so that both runs cover the same range.

Why chDB and a subprocess: no Keeper and no ClickHouse >= 23.8 server run here, but chDB is the real
engine, and started with a config file that declares a one-shard cluster whose only replica is this
process, it accepts the local tables and the Distributed tables over them and runs queries through
them. Replicated engines and ON CLUSTER need Keeper, so the store below rewrites every statement it
runs without those two (`without_keeper`): production code renders and issues the real cluster
statements, whose text is checked in test_cluster_ddl.py. chDB allows one embedded engine per process,
hence the subprocess (the other tests hold their own).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CLUSTER = "goodput"
CONFIG = f"""<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers>
    <{CLUSTER}><shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard></{CLUSTER}>
  </remote_servers>
  <macros><shard>01</shard><replica>r1</replica></macros>
</clickhouse>
"""
"""tcp_port equal to the replica's port makes the engine treat the replica as itself: nothing is sent
over the network (chDB has no TCP server)."""
_REPLICATED = re.compile(r"ENGINE = Replicated(\w*MergeTree)\('[^']*', '[^']*'\)")


def without_keeper(sql: str) -> str:
    """A cluster statement as an engine without Keeper takes it: no ON CLUSTER (this process is the
    whole cluster), and each Replicated engine as its single-server family with that family's insert
    deduplication window."""
    sql = sql.replace(f" ON CLUSTER {CLUSTER}", "")
    sql, n = _REPLICATED.subn(r"ENGINE = \1", sql)
    if n:
        sql = re.sub(r"\breplicated_deduplication_window", "non_replicated_deduplication_window", sql)
    return sql


DERIVED = {
    "dim_nodes": "SELECT * FROM dim_nodes ORDER BY node",
    "dim_pools": "SELECT * FROM dim_pools ORDER BY pool",
    "dim_accounts": "SELECT * FROM dim_accounts ORDER BY account",
    "goodput_windows": "SELECT job_id, window_start, sum(gpu_seconds), sum(cost), "
    "count() - uniqExact(category) AS repeated FROM goodput_windows GROUP BY job_id, window_start "
    "ORDER BY job_id, window_start",
    "job_summary": "SELECT job_id, account, team, pool, gpus, attempts, first_allocated, last_seen, "
    "allocated_gpu_seconds, cost, count() AS n FROM job_summary GROUP BY ALL ORDER BY job_id",
    "team_day": "SELECT day, team, pool, sum(gpu_hours), sum(cost), "
    "count() - uniqExact(category) AS repeated FROM team_day GROUP BY day, team, pool "
    "ORDER BY day, team, pool",
    "scheduling_delay": "SELECT * EXCEPT computed_at FROM scheduling_delay ORDER BY job_id",
    "faults": "SELECT * EXCEPT computed_at FROM faults ORDER BY job_id, ts, event",
    "fault_repeats": "SELECT * EXCEPT computed_at FROM fault_repeats ORDER BY scope, node, gpu",
    "queue_delay_day": "SELECT * EXCEPT computed_at FROM queue_delay_day ORDER BY day, by, key",
    "pool_capacity": "SELECT bucket_start, pool, capacity_gpu_s, "
    "round(allocated_gpu_s + unallocated_gpu_s, 3), count() AS n "
    "FROM pool_capacity GROUP BY ALL ORDER BY bucket_start, pool",
    "pool_holds": "SELECT * EXCEPT computed_at FROM pool_holds ORDER BY job_id, pool",
    "job_placement": "SELECT job_id, nodes, leaves, count() AS n FROM job_placement "
    "GROUP BY ALL ORDER BY job_id",
}
"""The derived tables as the test compares them with the single-server run. Which category a GPU-second
lands in may differ between two runs (the healthy level comes from sampled quantiles), so goodput_windows
and team_day are compared per window / day as totals, with `repeated` counting categories stored twice;
every other column is deterministic and compared as stored."""


def main(workdir: Path, start_ms: int, single: bool) -> dict:
    from chdb import session

    from contracts import catalog
    from contracts import config as config_mod
    from goodput.sim.cluster import PlannedFailure, SimConfig, scaled_config, simulate
    from goodput.sim.emit import messages
    from pipeline import ddl
    from pipeline.analyzers import run as analyzers
    from pipeline.chdb_store import ChdbStore
    from pipeline.compaction import compact_closed_days
    from pipeline.loader import Loader, SeqTracker, limits_from_config
    from pipeline.store import StoreError
    from transport.base import Record

    class ClusterChdb(ChdbStore):
        """ChdbStore's statements over a chDB engine started with the cluster config above, each
        rewritten by `without_keeper`."""

        cluster = CLUSTER
        database = "default"

        def __init__(self, path: Path, config_file: Path) -> None:
            self.path, self.config_file = path, config_file
            self._lock_file = open(path / self.LOCK_NAME, "a+")
            self._session = session.Session(self.connection)
            self._start_pool()

        @property
        def connection(self) -> str:
            return f"{super().connection}&config-file={self.config_file}"

        def _run(self, sql: str, fmt: str, params=None):
            return super()._run(without_keeper(sql), fmt, params)

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.xml").write_text(CONFIG)
    (workdir / "store").mkdir(exist_ok=True)
    store = ChdbStore(workdir / "store") if single else ClusterChdb(workdir / "store", workdir / "config.xml")
    out: dict = {}

    def count(table: str, final: bool = False) -> int:
        sql = f"SELECT count() AS n FROM {table}{' FINAL' if final else ''}"
        return store.query_arrow(sql).column("n")[0].as_py()

    try:
        ddl.migrate(store)
        engines = store.query_arrow("SELECT name, engine FROM system.tables WHERE database = 'default'")
        out["engines"] = dict(
            zip(engines.column("name").to_pylist(), engines.column("engine").to_pylist(), strict=True)
        )

        cfg = scaled_config(config_mod.load(), 16)
        planned = tuple(PlannedFailure(0, t, "xid") for t in (200, 400))  # faults, and a repeat offender
        sim_cfg = SimConfig.from_config(cfg, hours=0.5, seed=3, start_ms=start_ms, planned_failures=planned)
        records = [
            Record(topic, 0, i, key, value)
            for i, (topic, key, value) in enumerate(messages(simulate(sim_cfg, cfg)))
        ]
        loader = Loader(store, limits_from_config(cfg))
        half = len(records) // 2
        loader.load(records[:half])  # two loads: two parts in each day of the rollups, for compaction
        loader.load(records[half:])
        out["loaded_rows"] = dict(loader.totals.rows)
        if not single:
            replay = Loader(store, limits_from_config(cfg)).load(records)  # a restarted loader, same records
            out["replay_rows"] = dict(replay.rows)
            out["distributed_rows"] = {
                k: count(catalog.RAW_TABLES[k], final=True) for k in out["loaded_rows"]
            }
            out["local_rows"] = {
                k: count(catalog.RAW_TABLES[k] + ddl.LOCAL_SUFFIX) for k in out["loaded_rows"]
            }
            out["ledger_streams"] = len(SeqTracker.from_store(store).floor)
            out["rollup_rows"] = {  # each shard's view rolled up its own raw rows, the replay not again
                k: store.query_arrow(f"SELECT sum(rows) AS n FROM {t}").column("n")[0].as_py()
                for k, t in catalog.ROLLUP_TABLES.items()
            }

        out["analyzer_error"] = None
        try:
            for _ in range(2):  # a second run over the same range must replace, not add
                analyzers.run(store, cfg, start_ms, start_ms + sim_cfg.horizon_s * 1000)
        except StoreError as e:
            out["analyzer_error"] = str(e)
        out["derived"] = {
            name: [list(row.values()) for row in store.query_arrow(sql).to_pylist()]
            for name, sql in DERIVED.items()
        }
        if not single:
            out["derived_rows"] = {name: [count(name), count(name + ddl.LOCAL_SUFFIX)] for name in DERIVED}
            closed = start_ms / 1000 + 3 * 86_400
            out["compacted"] = [[c.table, c.parts] for c in compact_closed_days(store, closed, settle_s=0)]
            out["rollup_parts"] = store.query_arrow(
                "SELECT table, partition, count() AS n FROM system.parts WHERE active AND database = "
                "currentDatabase() AND table IN {locals} GROUP BY table, partition".format(
                    locals=tuple(t + ddl.LOCAL_SUFFIX for t in catalog.ROLLUP_TABLES.values())
                )
            ).to_pylist()
            analyzers.run(store, cfg, start_ms, start_ms + sim_cfg.horizon_s * 1000)
            out["derived_after_compaction"] = {
                name: [list(row.values()) for row in store.query_arrow(sql).to_pylist()]
                for name, sql in DERIVED.items()
            }
            for _ in range(2):
                analyzers.refresh_dimensions(
                    store, cfg
                )  # TRUNCATE TABLE + insert, as every analyzer run starts
            out["dim_nodes_rows"] = count(catalog.DIM_NODES)
            out["configured_nodes"] = sum(len(p.nodes) for p in cfg.pools)
    finally:
        store.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]), "--single" in sys.argv[3:]), default=str))
