"""Schedulers that report only a coarse `running` (Slurm, Kubernetes: with gang_complete): the first step,
or else the jump in SM activity, marks the real start (docs/goodput-model.md)."""

import pytest

from contracts.envelope import encode_batch
from contracts.schema import topic_for
from tests.analyzers.scenario import ms

N1 = "gpu-core-001"


def slurm_job(sc, job_id="s1", restart=False):
    j = dict(job_id=job_id, account="research", source="slurm")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=range(4), **j))
    sc.job(dict(t=10, event="gang_complete", **j), dict(t=10, event="running", **j))
    if restart:
        sc.job(dict(t=150, event="failed", reason="node_lost", **j))
        sc.job(
            dict(t=160, event="restarted", attempt=2, **j),
            dict(t=160, event="gang_complete", attempt=2, **j),
            dict(t=160, event="running", attempt=2, **j),
        )
    sc.job(dict(t=300, event="completed", attempt=2 if restart else 1, **j))
    sc.job(dict(t=300, event="released", node=N1, gpu_indices=range(4), attempt=2 if restart else 1, **j))


def test_sm_jump_marks_the_start_when_the_scheduler_says_running_at_allocation(sc):
    slurm_job(sc)
    # imports, model build, checkpoint load until 70: the GPUs barely work
    sc.gpu(N1, range(4), 0, 300, lambda s, g: 90.0 if s > 70 else 3.0)
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("s1")
    assert got["startup"] == pytest.approx(60 * 4)
    assert got["productive"] == pytest.approx(230 * 4)
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_after_a_restart_the_wait_for_the_first_step_is_retry_waste(sc):
    slurm_job(sc, "s2", restart=True)
    sc.gpu(N1, range(4), 0, 300, lambda s, g: 90.0 if 70 < s <= 150 or s > 190 else 3.0)
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("s2")
    assert got["startup"] == pytest.approx(60 * 4)
    # lost progress 70 -> 150 (no checkpoint), restart 150 -> 190 (the first step again)
    assert got["retry_waste"] == pytest.approx((80 + 40) * 4)
    assert got["productive"] == pytest.approx(110 * 4)


def test_the_first_step_event_wins_over_the_sm_jump(sc):
    slurm_job(sc, "s3")
    # warm-up kernels from 45 look busy, but the first training step starts at 50
    sc.gpu(N1, range(4), 0, 300, lambda s, g: 90.0 if s > 45 else 3.0)
    cols = {
        "ts_ms": [ms(52), ms(54)],
        "job_id": ["s3", "s3"],
        "rank": [0, 0],
        "step": [1, 2],
        "duration_ms": [2000.0, 2000.0],
    }
    value = encode_batch(
        kind="step", cluster=sc.cfg.cluster.name, node=N1, seq=0, sent_ms=ms(54), columns=cols, agent="t/0"
    )
    sc.batches.append((topic_for("step"), N1.encode(), value))
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("s3")
    assert got["startup"] == pytest.approx(40 * 4)
