"""Runs the simulated cluster through the embedded path once per scenario and shares the result."""

from __future__ import annotations

import time

import polars as pl
import pytest

from contracts import config as config_mod
from goodput.sim.cluster import PlannedFailure, SimConfig, scaled_config, simulate
from goodput.sim.emit import messages, truth_table
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader, limits_from_config
from transport.base import InProcessTransport

QUIET = dict(
    failures_per_node_hour=0.0,
    partial_allocation_probability=0.0,
    storage_demand_scale=0.3,
    network_demand_scale=0.3,
    stragglers_per_hour=0.0,
)
SCENARIOS = {
    "quiet": {},
    "data_stall": dict(storage_demand_scale=3.0),
    "comm_stall": dict(network_demand_scale=3.0, stragglers_per_hour=6.0),
    "partial_alloc": dict(partial_allocation_probability=1.0),
    "failure": dict(planned_failures=(PlannedFailure(job_index=0, after_running_s=1500, kind="xid"),)),
}


def run_pipeline(tmp_path, gpus=64, hours=1.0, seed=3, **overrides):
    cfg = scaled_config(config_mod.load(), gpus)
    start_ms = (int(time.time()) // 60) * 60_000 - int(hours * 3_600_000)
    sim_cfg = SimConfig.from_config(cfg, hours=hours, seed=seed, start_ms=start_ms, **{**QUIET, **overrides})
    res = simulate(sim_cfg, cfg)
    store = ChdbStore(tmp_path / "store")
    ddl.migrate(store)
    transport = InProcessTransport()
    loader = Loader(store, limits_from_config(cfg))
    for topic, key, value in messages(res):
        transport.send(topic, key, value)
    while records := transport.poll(5000):
        loader.load(records)
        transport.commit(records)
    analyzers.run(store, cfg, start_ms, start_ms + sim_cfg.horizon_s * 1000)
    got = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, category, sum(gpu_seconds) AS s FROM goodput_windows GROUP BY job_id, category"
        )
    )
    truth = (
        pl.from_arrow(truth_table(res))
        .with_columns(((pl.col("end_ms") - pl.col("start_ms")) / 1000).alias("s"))
        .group_by("job_id", "category")
        .agg(pl.col("s").sum())
    )
    return {
        "store": store,
        "res": res,
        "config": cfg,
        "got": got,
        "truth": truth,
        "loader": loader,
        "start_ms": start_ms,
    }


@pytest.fixture(scope="module", params=list(SCENARIOS))
def scenario(request, tmp_path_factory):
    """Module-scoped, not session: chDB allows one data directory per process, so a store held open
    for the whole session would break every later test that opens its own."""
    out = run_pipeline(tmp_path_factory.mktemp(request.param), **SCENARIOS[request.param])
    out["name"] = request.param
    yield out
    out["store"].close()
