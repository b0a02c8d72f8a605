"""Compacting closed days (pipeline/compaction.py) merges each closed day of the rollups into one part and
changes no analyzer result; the day still running is left alone; a late batch into a compacted day is
compacted by the next run."""

from contracts import catalog
from pipeline.compaction import compact_closed_days
from tests.analyzers.scenario import ms
from tests.analyzers.test_reanalysis import cluster_day

DAY_S = 86_400


def rollup_parts(store) -> dict[tuple[str, str], int]:
    names = ", ".join(f"'{t}'" for t in catalog.ROLLUP_TABLES.values())
    rows = store.query_arrow(
        "SELECT table, partition, count() AS n FROM system.parts WHERE active AND database = "
        f"currentDatabase() AND table IN ({names}) GROUP BY table, partition"
    ).to_pylist()
    return {(r["table"], r["partition"]): r["n"] for r in rows}


def test_compacting_closed_days_leaves_one_part_each_and_every_result_as_it_was(sc):
    cluster_day(sc)
    batches, sc.batches = sc.batches, []
    for i in range(3):  # three loads: three parts in each rollup's day
        sc.load(batches[i::3])
    sc.analyze(0, 1000)
    before = sc.dump()
    parts = rollup_parts(sc.store)
    gpu_rollup = catalog.ROLLUP_TABLES["gpu"]
    assert set(t for t, _ in parts) == set(catalog.ROLLUP_TABLES.values())
    assert [n for (t, _), n in parts.items() if t == gpu_rollup] == [3], parts
    end_s = ms(1000) / 1000

    assert compact_closed_days(sc.store, end_s, settle_s=3600) == [], "the day still running is left alone"
    assert rollup_parts(sc.store) == parts

    done = compact_closed_days(sc.store, end_s + 2 * DAY_S, settle_s=3600)
    assert sorted((c.table, c.day, c.parts) for c in done) == sorted(
        (t, d, n) for (t, d), n in parts.items() if n > 1
    )
    assert all(n == 1 for n in rollup_parts(sc.store).values())
    sc.analyze(0, 1000)
    assert sc.dump() == before

    sc.rows("gpu", "gpu-shr-001", 990, 995, gpu=3, uuid="GPU-late-3", util_gpu_pct=10.0)  # a late batch
    sc.load()
    assert max(n for (t, _), n in rollup_parts(sc.store).items() if t == gpu_rollup) == 2
    again = compact_closed_days(sc.store, end_s + 2 * DAY_S, settle_s=3600)
    assert [(c.table, c.parts) for c in again] == [(gpu_rollup, 2)]
    assert all(n == 1 for n in rollup_parts(sc.store).values())
