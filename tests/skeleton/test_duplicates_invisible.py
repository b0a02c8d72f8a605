"""Rows stored twice (two loaders racing on one batch, a replay on a server too old for insert tokens)
must not change what the analyzers conclude: they read the raw tables with FINAL."""

from __future__ import annotations

import polars as pl
import pytest

from pipeline.analyzers import run as analyzers
from tests.skeleton.conftest import run_pipeline


def _totals(store) -> dict[str, float]:
    t = pl.from_arrow(
        store.query_arrow("SELECT category, sum(gpu_seconds) AS s FROM goodput_windows GROUP BY category")
    )
    return dict(zip(t["category"], t["s"], strict=True))


def test_duplicated_raw_rows_do_not_change_the_classification(tmp_path):
    out = run_pipeline(
        tmp_path,
        gpus=64,
        hours=1.0,
        storage_demand_scale=0.45,
        network_demand_scale=3.0,
        stragglers_per_hour=6.0,
    )
    store, cfg, start = out["store"], out["config"], out["start_ms"]
    end = start + 3_600_000
    try:
        before = _totals(store)
        # Network-bound with storage below its ceiling: doubled storage rates (sum over rows) would add
        # storage evidence to comm-stalled windows and move GPU time from comm_stall to data_stall
        # (without FINAL this test fails exactly so).
        assert before.get("comm_stall", 0) > 600, before
        for table in ("raw_gpu", "raw_nic", "raw_storage"):
            store.execute(f"INSERT INTO {table} SELECT * FROM {table}")  # every row once more, no token
            n, distinct = (
                store.query_arrow(
                    f"SELECT count() AS n, (SELECT count() FROM {table} FINAL) AS d FROM {table}"
                )
                .to_pylist()[0]
                .values()
            )
            assert n == 2 * distinct, f"{table}: the copies must really be there (unmerged)"
        analyzers.run(store, cfg, start, end)
        after = _totals(store)
        assert set(after) == set(before)
        for category, seconds in before.items():
            # quantile sketches make two runs differ by ~0.2 %; a doubled storage rate moves whole windows
            assert after[category] == pytest.approx(seconds, rel=0.01, abs=60), category
    finally:
        store.close()
