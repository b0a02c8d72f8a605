"""A sample with ts T describes the second (T-1s, T] and is filed with the time it describes."""

import pytest


def test_no_spurious_idle_at_the_start_of_running(sc):
    j = dict(job_id="j7", account="research")
    n = "gpu-core-001"
    sc.job(dict(t=0, event="allocated", node=n, gpu_indices=range(8), **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=30, event="running", **j))
    sc.job(
        dict(t=300, event="completed", **j), dict(t=300, event="released", node=n, gpu_indices=range(8), **j)
    )
    # startup seconds are quiet, running seconds busy: the sample at ts 30 still describes startup
    sc.gpu(n, range(8), 0, 300, lambda s, g: 90.0 if s > 30 else 2.0)
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("j7")
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["productive"] == pytest.approx(270 * 8)
    assert got["startup"] == pytest.approx(30 * 8)
