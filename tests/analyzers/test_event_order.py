"""Events of the same millisecond are taken in the order their source reported them (docs/messages.md)."""

import pytest

NODES = [f"gpu-core-{i:03d}" for i in range(1, 9)]
G = 8 * len(NODES)


def busy(run: list[tuple[int, int]]):
    return lambda s, g: 90.0 if any(a < s <= b for a, b in run) else 5.0


def failed_once(sc, split_batches: bool) -> None:
    """8 nodes x 8 GPUs: running at 30, checkpoint at 200, XID at 330, resume at 360 with `restarted` and
    `running` in the same millisecond, completed at 600."""
    j = dict(job_id="j1", account="research")
    sc.job(dict(t=0, event="submitted", gpus_requested=G, **j))
    sc.job(*[dict(t=10, event="allocated", node=n, gpu_indices=range(8), **j) for n in NODES])
    sc.job(dict(t=20, event="gang_complete", **j), dict(t=30, event="running", **j))
    sc.job(dict(t=200, event="checkpoint_saved", step=100, duration_ms=0, **j))
    sc.job(dict(t=330, event="failed", reason="xid:79", **j))
    again = [dict(t=360, event="restarted", attempt=2, **j), dict(t=360, event="running", attempt=2, **j)]
    if split_batches:
        sc.job(again[0])
        sc.job(again[1])
    else:
        sc.job(*again)
    sc.job(dict(t=600, event="completed", attempt=2, **j))
    sc.job(*[dict(t=600, event="released", node=n, gpu_indices=range(8), attempt=2, **j) for n in NODES])
    for n in NODES:
        sc.gpu(n, range(8), 0, 600, busy([(30, 330), (360, 600)]))
    sc.load()
    sc.analyze(0, 700)


@pytest.mark.parametrize("split_batches", [False, True], ids=["one_batch", "two_batches"])
def test_resume_in_the_same_millisecond_is_running_not_retry_waste(sc, split_batches):
    failed_once(sc, split_batches)
    got = sc.cats("j1")
    # lost progress 200 -> 330 plus restart 330 -> 360, on every GPU; nothing after the resume
    assert got["retry_waste"] == pytest.approx(160 * G)
    assert got["gang_wait"] == pytest.approx(10 * G)
    assert got["startup"] == pytest.approx(10 * G)
    assert got["productive"] == pytest.approx((170 + 240) * G, rel=0.01)
