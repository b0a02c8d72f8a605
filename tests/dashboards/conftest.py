"""A small simulated store (16 GPUs x 1 h, a failure and stragglers) that every dashboard query runs on,
with a live run over its last 10 minutes (goodput_live) after the whole one."""

from __future__ import annotations

import pytest

from goodput.sim.cluster import PlannedFailure
from pipeline.analyzers import run as analyzers
from tests.skeleton.conftest import run_pipeline


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory):
    out = run_pipeline(
        tmp_path_factory.mktemp("dash"),
        gpus=16,
        hours=1.0,
        seed=5,
        stragglers_per_hour=6.0,
        storage_demand_scale=2.0,
        planned_failures=(PlannedFailure(job_index=0, after_running_s=900, kind="xid"),),
    )
    end = analyzers.data_end(out["store"], out["config"].cluster.name)
    analyzers.run_live(out["store"], out["config"], end - 600_000)
    yield out
    out["store"].close()
