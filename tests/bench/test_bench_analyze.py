"""bench/bench_analyze.py writes its day straight into the store by SQL, chunk by chunk in the tables'
sort order, with a lookup of each gang's running time per chunk: the analysis timed on it only means
something if the rows are the day it describes (every node-second once, running exactly in the jobs'
running time), whatever the chunking, and across a midnight, where the raw tables' partitions split it."""

from __future__ import annotations

import time

import pytest

from pipeline.chdb_store import ChdbStore
from tests.bench import bench_module

GPUS, HOURS = 64, 6.0  # one gang, jobs of 1-4 h: several jobs, and six chunks of an hour
NOW_S = (time.time() - 3 * 3600) // 86_400 * 86_400 + 3 * 3600 + 100
"""The day ends an hour before the last whole hour: here 02:00 UTC, so its six hours cross a midnight and
the rows go to two partitions (and the day is recent, inside the time-first copies' 2 days)."""


@pytest.fixture(scope="module")
def bench_day(tmp_path_factory):
    bench = bench_module("bench_analyze")
    path = tmp_path_factory.mktemp("bench") / "store"
    meta = bench.build(path, GPUS, HOURS, now_s=NOW_S)
    store = ChdbStore(path)
    yield bench, meta, store
    store.close()


def test_every_node_second_once(bench_day):
    bench, meta, store = bench_day
    nodes = bench._nodes(bench._config(GPUS))
    seconds = int(HOURS * 3600)
    for table, key, per_node in (
        ("raw_gpu", "gpu", 8),
        ("raw_nic", "device, port", 8),
        ("raw_storage", "source, device", 3),
    ):
        row = store.query_arrow(
            f"SELECT count() AS n, uniqExact(node, {key}, ts) AS keys, uniqExact(node) AS nodes, "
            f"min(toUnixTimestamp64Milli(ts)) AS first, max(toUnixTimestamp64Milli(ts)) AS last FROM {table}"
        ).to_pylist()[0]
        assert row == {
            "n": len(nodes) * per_node * seconds,
            "keys": len(nodes) * per_node * seconds,
            "nodes": len(nodes),
            "first": meta["t0_ms"],
            "last": meta["end_ms"] - 1000,
        }, table
    days = store.query_arrow(
        "SELECT DISTINCT partition FROM system.parts WHERE active AND database = currentDatabase() "
        "AND table = 'raw_gpu'"
    )
    assert days.num_rows == 2


def test_running_exactly_in_the_jobs_running_time(bench_day):
    """A GPU reads busy (util 90) in a second of a job's running time, [start + 60 s, end), and 0
    outside: counted per node against the jobs' own list, which crosses the generator's chunks and the
    midnight."""
    bench, meta, store = bench_day
    nodes = bench._nodes(bench._config(GPUS))
    t0_s, end_s = meta["t0_ms"] // 1000, meta["end_ms"] // 1000
    jobs = bench._jobs(nodes, t0_s, HOURS)
    assert len(jobs) == meta["jobs"]
    want = {n: 0 for n in nodes}
    for j in jobs:
        for n in j["nodes"]:
            want[n] += max(0, min(j["end"], end_s) - max(j["start"] + 60, t0_s))
    # the edges the lookup must get right: a job ending inside the day (the next starts in its gang),
    # running time across a chunk boundary, and across the midnight
    assert any(j["end"] < end_s for j in jobs)
    midnight = (t0_s // 86_400 + 1) * 86_400
    assert any(j["start"] + 60 < midnight < j["end"] for j in jobs)
    chunk = bench.CHUNK_S
    assert any(
        j["start"] + 60 < t0_s + c * chunk < j["end"] for j in jobs for c in range(1, (end_s - t0_s) // chunk)
    )
    got = {
        r["node"]: r["s"]
        for r in store.query_arrow(
            "SELECT node, countIf(util_gpu_pct = 90) AS busy, count() AS n, busy / 8 AS s "
            "FROM raw_gpu GROUP BY node"
        ).to_pylist()
    }
    assert got == want
    assert 0 < sum(want.values()) < len(nodes) * (end_s - t0_s)


def test_a_gang_meeting_three_jobs_in_a_chunk_is_refused():
    bench = bench_module("bench_analyze")
    nodes = [f"n{i}" for i in range(8)]
    jobs = [{"nodes": nodes, "start": s, "end": s + 600} for s in (0, 1000, 2000)]
    with pytest.raises(ValueError, match="3 jobs run in one 3600 s chunk"):
        bench._samples_sql("c", nodes, jobs, 0, 3600)


def test_the_settled_store_counts_the_rollups_time_first_copies(bench_day):
    """A measurement is flagged when the samples' tables merge during it, and the build waits for their
    merges: the time-first copies too, whose merge a short-lived process would otherwise start and
    abandon in every run (it cost the live runs ~1 s and half their CPU). The day is within the copies' 2
    days, so they hold parts; each is counted."""
    bench, _, store = bench_day
    copies = ", ".join(f"'{t}'" for t in bench.catalog.ROLLUP_RECENT.values())
    in_copies = (
        store.query_arrow(
            "SELECT count() AS n FROM system.parts WHERE active AND database = currentDatabase() "
            f"AND table IN ({copies})"
        )
        .column("n")[0]
        .as_py()
    )
    assert in_copies >= 3
    every = (
        store.query_arrow(
            "SELECT count() AS n FROM system.parts WHERE active AND database = currentDatabase() "
            "AND (table LIKE 'raw\\_%' OR table LIKE '%rollup%')"
        )
        .column("n")[0]
        .as_py()
    )
    assert bench.settle_merges(store, quiet_s=0.5, poll_s=0.1) == every


def test_the_read_floor_reads_all_the_analysis_reads(bench_day):
    """--floor weighs the analysis against its reads, which means something only if each READ_FLOOR query
    reads all of what the analysis reads: every GPU and storage sample (one per raw row), and every NIC
    port's 10 s window once, FINAL merging the windows a chunk boundary split between two inserts (a
    sample at ts T is filed at T - 1 ms, so the second at an hour's start closes the window before it)."""
    bench, meta, store = bench_day
    nodes = len(bench._nodes(bench._config(GPUS)))
    seconds = int(HOURS * 3600)
    windows = seconds // 10 + 1  # the first sample (at t0) closes the window before t0
    read = {name: store.query_arrow(sql).to_pylist()[0]["n_read"] for name, sql in bench.READ_FLOOR.items()}
    assert read == {
        "gpu rollup, every sample": nodes * 8 * seconds,
        "nic rollup, FINAL": nodes * 8 * windows,
        "storage rollup": nodes * 3 * seconds,
    }
    nic = bench.catalog.ROLLUP_TABLES["nic"]
    split = store.query_arrow(  # windows in two rows: without FINAL the NIC read would count them twice
        f"SELECT count() - uniqExact(node, device, port, window_start) AS n FROM {nic}"
    )
    assert meta["t0_ms"] % 10_000 == 0 and split.column("n")[0].as_py() > 0
