"""Runs goodput on the cluster layout inside chDB, in a process of its own, and prints what happened as
JSON: `python -m tests.clickhouse.chdb_cluster WORKDIR`.

Why chDB and a subprocess: no Keeper and no ClickHouse >= 23.8 server run here, but chDB is the real
engine, and started with a config file that declares a one-shard cluster whose only replica is this
process, it accepts the local tables and the Distributed tables over them and runs queries through
them. Replicated engines and ON CLUSTER need Keeper, so the statements are rendered without those two
(`cluster_ddl(..., replicated=False, on_cluster=False)`); their text is checked in test_cluster_ddl.py.
chDB allows one embedded engine per process, hence the subprocess (the other tests hold their own).
"""

from __future__ import annotations

import json
import sys
import time
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


def main(workdir: Path) -> dict:
    from chdb import session

    from agents.sim.cluster import SimConfig, scaled_config, simulate
    from agents.sim.emit import messages
    from pipeline import catalog, config as config_mod, ddl
    from pipeline.analyzers import run as analyzers
    from pipeline.loader import Loader, SeqTracker, limits_from_config
    from pipeline.store import ChdbStore, StoreError
    from pipeline.transport import Record

    class ClusterChdb(ChdbStore):
        """ChdbStore's statements over a chDB engine started with the cluster config above."""

        def __init__(self, path: Path, config_file: Path) -> None:
            self.path = path
            self._lock_file = open(path / self.LOCK_NAME, "a+")
            self._session = session.Session(f"{path}?config-file={config_file}")

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.xml").write_text(CONFIG)
    (workdir / "store").mkdir(exist_ok=True)
    store = ClusterChdb(workdir / "store", workdir / "config.xml")
    out: dict = {}
    try:
        for statement in ddl.cluster_ddl(CLUSTER, "default", replicated=False, on_cluster=False):
            store.execute(statement)
        engines = store.query_arrow("SELECT name, engine FROM system.tables WHERE database = 'default'")
        out["engines"] = dict(zip(engines.column("name").to_pylist(), engines.column("engine").to_pylist()))

        cfg = scaled_config(config_mod.load(), 16)
        start_ms = (int(time.time()) // 60) * 60_000 - 1_800_000
        sim_cfg = SimConfig.from_config(cfg, hours=0.5, seed=3, start_ms=start_ms)
        records = [Record(topic, 0, i, key, value) for i, (topic, key, value) in enumerate(messages(simulate(sim_cfg, cfg)))]
        loader = Loader(store, limits_from_config(cfg))
        loader.load(records)
        out["loaded_rows"] = dict(loader.totals.rows)
        replay = Loader(store, limits_from_config(cfg)).load(records)  # a restarted loader, same records
        out["replay_rows"] = dict(replay.rows)

        def count(table: str, final: bool = False) -> int:
            sql = f"SELECT count() AS n FROM {table}{' FINAL' if final else ''}"
            return store.query_arrow(sql).column("n")[0].as_py()

        out["distributed_rows"] = {k: count(catalog.RAW_TABLES[k], final=True) for k in out["loaded_rows"]}
        out["local_rows"] = {k: count(catalog.RAW_TABLES[k] + ddl.LOCAL_SUFFIX) for k in out["loaded_rows"]}
        out["ledger_streams"] = len(SeqTracker.from_store(store).floor)

        out["analyzer_error"] = None
        try:
            for _ in range(2):  # a second run over the same range must replace, not add
                analyzers.run(store, cfg, start_ms, start_ms + sim_cfg.horizon_s * 1000)
        except StoreError as e:
            out["analyzer_error"] = str(e)
        for _ in range(2):
            analyzers.refresh_dimensions(store, cfg)  # TRUNCATE TABLE + insert, as every analyzer run starts
        out["dim_nodes_rows"] = count(catalog.DIM_NODES)
        out["configured_nodes"] = sum(len(p.nodes) for p in cfg.pools)
    finally:
        store.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
