"""A node's clock offset is estimated from where its job-tagged GPU samples fall against the scheduler's
allocation, and corrected before classification (docs/goodput-model.md, Clock skew)."""

import pytest

from pipeline.loader import Loader, limits_from_config
from pipeline.validate import Limits, decode
from transport.base import Record

N1, N2 = "gpu-core-001", "gpu-core-002"


def _job(sc, skew_s: int) -> None:
    """A 2-node job, running from 30 s to 300 s by the scheduler's clock; N2's clock is `skew_s` ahead."""
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=range(8), **j) for n in (N1, N2)))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=30, event="running", **j))
    sc.job(
        dict(t=300, event="completed", **j),
        *(dict(t=300, event="released", node=n, gpu_indices=range(8), **j) for n in (N1, N2)),
    )
    sc.gpu(N1, range(8), 0, 300, lambda s, g: 90.0 if s > 30 else 2.0, job_id="j")
    sc.gpu(N2, range(8), skew_s, 300 + skew_s, lambda s, g: 90.0 if s - skew_s > 30 else 2.0, job_id="j")
    sc.load()
    sc.analyze(0, 400)


def _offset(sc) -> float:
    t = sc.store.query_arrow("SELECT clock_offset_s FROM job_summary WHERE job_id = 'j'")
    return t.column(0)[0].as_py()


@pytest.mark.parametrize("skew_s", [20, -15])
def test_a_skewed_node_is_corrected(sc, skew_s):
    _job(sc, skew_s)
    got = sc.cats("j")
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6), got
    assert got["productive"] == pytest.approx(270 * 16)
    assert got["startup"] == pytest.approx(30 * 16)
    assert _offset(sc) == pytest.approx(skew_s)


def test_an_offset_below_the_threshold_is_left_alone(sc):
    _job(sc, 1)  # [analyzer] clock_offset_s = 2.0
    assert _offset(sc) == 0.0
    assert sum(sc.cats("j").values()) == pytest.approx(300 * 16)


def test_the_broker_append_time_gives_the_offset_where_samples_carry_no_job(sc):
    """Batches with the Kafka broker's append time (LogAppendTime): sent - appended is the node's offset
    less the delivery delay, and wins over the allocation bound (here absent: N2's samples carry no job)."""
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=range(8), **j) for n in (N1, N2)))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=30, event="running", **j))
    sc.job(
        dict(t=300, event="completed", **j),
        *(dict(t=300, event="released", node=n, gpu_indices=range(8), **j) for n in (N1, N2)),
    )
    sc.gpu(N1, range(8), 0, 300, lambda s, g: 90.0 if s > 30 else 2.0, job_id="j")
    for t0 in range(0, 300, 10):  # N2 25 s ahead, one batch per 10 s, delivered 5 to 500 ms after sending
        sc.gpu(N2, range(8), t0 + 25, t0 + 35, lambda s, g: 90.0 if s - 25 > 30 else 2.0)
    records = []
    for i, (topic, key, value) in enumerate(sc.batches):
        sent = decode(value, Limits()).sent_ms
        skew = 25_000 if key == N2.encode() else 0
        records.append(Record(topic, 0, i, key, value, timestamp_ms=sent - skew + 5 + (i * 37) % 500))
    loader = Loader(sc.store, limits_from_config(sc.cfg))
    stats = loader.load(records)
    assert not stats.dead_letters
    assert 24.5 <= stats.clock_offsets_ms[N2] / 1000 <= 25.0
    assert abs(stats.clock_offsets_ms[N1]) <= 500
    sc.batches = []
    sc.analyze(0, 400)
    assert 24.5 <= _offset(sc) <= 25.0
    got = sc.cats("j")
    assert got["productive"] == pytest.approx(270 * 16, rel=0.01)
    assert got.get("idle", 0.0) <= 0.01 * 300 * 16, got
