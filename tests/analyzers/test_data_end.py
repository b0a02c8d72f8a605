"""The end of the data (pipeline/analyzers/run.py data_end), which every run starts from: a cluster's
latest job event or GPU sample, read from the GPU rollup's time-first copy where that holds it, else from
the rollup's newest day, and over all its days where the cluster has no sample there. It must equal the
raw rows' own latest."""

import msgspec

from contracts import catalog
from pipeline import ddl
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


def test_a_copy_not_filled_by_the_migration_is_not_read(sc):
    """Before `migrate` copies the rollups' last days (version 4), the copy holds only what its view took
    since it exists: here an older backlog, stored after the newest rows, which the copy alone would
    give as the end."""
    sc.gpu(N1, [0], 0, 300)
    sc.load()
    sc.store.execute(f"DELETE FROM {catalog.SCHEMA_MIGRATIONS} WHERE version = 4")
    try:
        sc.store.execute(f"TRUNCATE TABLE {catalog.ROLLUP_RECENT['gpu']}")
        sc.gpu(N1, [1], -3600, -3000)
        sc.load()
        assert (
            analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(300) == raw_end(sc, sc.cfg.cluster.name)
        )
    finally:
        ddl.migrate(sc.store)  # version 4 again, for the tests after this one on the same store


def test_a_day_the_copy_no_longer_keeps_is_not_read(sc, monkeypatch):
    """The copy drops a day part once all its rows are older than the days it keeps, in its own time: an
    older day may linger after a newer one went. Its answer then lies beyond the days kept, and the
    rollup answers instead. (The copy keeping 12 h here: the older day, 24 h before, lingers.)"""
    sc.gpu(N1, [0], -DAY, -DAY + 120)
    sc.gpu(N1, [0], 0, 300)
    sc.load()
    recent = catalog.ROLLUP_RECENT["gpu"]
    newest = (
        sc.store.query_arrow(
            "SELECT DISTINCT partition FROM system.parts WHERE active AND database = currentDatabase() "
            f"AND table = '{recent}' ORDER BY partition DESC LIMIT 1"
        )
        .column(0)[0]
        .as_py()
    )
    sc.store.execute(f"ALTER TABLE {recent} DROP PARTITION '{newest}'")
    monkeypatch.setattr(ddl, "RECENT_TTL_DAYS", 0.5)
    assert analyzers.data_end(sc.store, sc.cfg.cluster.name) == ms(300) == raw_end(sc, sc.cfg.cluster.name)
