"""The end of the data (pipeline/analyzers/run.py data_end), which every run starts from: a cluster's
latest job event or GPU sample, read from the GPU rollup's newest day, and over all its days where the
cluster has no sample there. It must equal the raw rows' own latest."""

import msgspec

from pipeline.analyzers import run as analyzers
from tests.analyzers.scenario import Scenario, ms

N1 = "gpu-core-001"
DAY = 86_400


def raw_end(sc: Scenario, cluster: str) -> int:
    """The latest job event or GPU sample of `cluster` in the raw rows: what data_end stands for."""
    t = sc.store.query_arrow(
        "SELECT greatest((SELECT toUnixTimestamp64Milli(max(ts)) FROM raw_job WHERE cluster = {c:String}), "
        "(SELECT toUnixTimestamp64Milli(max(ts)) FROM raw_gpu WHERE cluster = {c:String})) AS t",
        {"c": cluster},
    )
    return t.column(0)[0].as_py()


def other_cluster(sc: Scenario) -> Scenario:
    """A second cluster writing into the same store."""
    cluster = msgspec.structs.replace(sc.cfg.cluster, name="other-west")
    return Scenario(sc.store, msgspec.structs.replace(sc.cfg, cluster=cluster))


def test_an_empty_store_ends_at_zero(sc):
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == 0


def test_the_latest_sample_or_job_event_whichever_is_later(sc):
    sc.job(dict(t=0, event="submitted", job_id="j"))
    sc.gpu(N1, [0, 1], 0, 300, job_id=None)
    sc.load()
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(300) == raw_end(sc, sc.cfg.cluster.name)
    sc.job(dict(t=450.5, event="cancelled", job_id="j"))
    sc.load()
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(450.5)


def test_a_cluster_silent_for_days_while_another_writes_reads_all_its_days(sc):
    """The other cluster's samples are 3 days newer, so this cluster has none in the store's newest day:
    its end comes from the read over all days, and is its own, not the other's."""
    sc.gpu(N1, [0], -3 * DAY, -3 * DAY + 120)
    sc.load()
    other = other_cluster(sc)
    other.gpu(N1, [0], 0, 60)
    other.load()
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(-3 * DAY + 120)
    assert ms(-3 * DAY + 120) == raw_end(sc, sc.cfg.cluster.name)
    assert analyzers.data_end(sc.store, "other-west") == ms(60) == raw_end(sc, "other-west")


def test_samples_within_the_newest_day_are_found_there(sc):
    """This cluster's last sample is 23 h before the other's newest: inside the day read first."""
    sc.gpu(N1, [0], -DAY + 3600, -DAY + 3720)
    sc.load()
    other = other_cluster(sc)
    other.gpu(N1, [0], 0, 60)
    other.load()
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(-DAY + 3720)
