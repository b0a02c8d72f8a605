"""The analyzers recover the simulator's ground truth from messages alone (issue 2's acceptance)."""

import polars as pl
import pytest

from contracts.catalog import CATEGORIES
from pipeline.analyzers import run as analyzers

OWN_CATEGORY = {
    "data_stall": "data_stall",
    "comm_stall": "comm_stall",
    "partial_alloc": "gang_wait",
    "failure": "retry_waste",
}


def totals(df: pl.DataFrame) -> dict[str, float]:
    return dict(df.group_by("category").agg(pl.col("s").sum()).iter_rows())


def test_categories_sum_to_allocated_time_per_job(scenario):
    got = scenario["got"].group_by("job_id").agg(pl.col("s").sum().alias("got"))
    want = scenario["truth"].group_by("job_id").agg(pl.col("s").sum().alias("want"))
    both = want.join(got, on="job_id", how="full", coalesce=True).fill_null(0.0)
    assert both.height > 0
    bad = both.filter((pl.col("got") - pl.col("want")).abs() > 1e-6 + 0.001 * pl.col("want"))
    assert bad.height == 0, f"{scenario['name']}: allocated GPU-seconds differ per job:\n{bad}"


def test_every_category_is_a_known_one(scenario):
    assert set(scenario["got"]["category"].unique()) <= set(CATEGORIES)


def test_injected_phenomenon_lands_in_its_category(scenario):
    name = scenario["name"]
    if name == "quiet":
        got, want = totals(scenario["got"]), totals(scenario["truth"])
        # nothing injected: no stalls, no waits of those kinds in the truth, and nearly none found
        for cat in ("data_stall", "comm_stall", "retry_waste"):
            assert want.get(cat, 0.0) == 0.0
            assert got.get(cat, 0.0) <= 0.005 * sum(got.values()), (cat, got)
        return
    cat = OWN_CATEGORY[name]
    got, want = totals(scenario["got"]), totals(scenario["truth"])
    assert want.get(cat, 0.0) > 0.01 * sum(want.values()), (
        f"scenario {name} injected too little {cat}: {want}"
    )
    assert got.get(cat, 0.0) == pytest.approx(want[cat], rel=0.05), f"{name}: got {got}, truth {want}"


def test_productive_time_within_five_percent(scenario):
    got, want = totals(scenario["got"]), totals(scenario["truth"])
    assert got["productive"] == pytest.approx(want["productive"], rel=0.05)


def test_no_dead_letters_from_the_simulator(scenario):
    assert not scenario["loader"].totals.dead_letters


@pytest.mark.parametrize("last_s", [600, 1800])
def test_live_runs_give_the_whole_runs_windows(scenario, last_s):
    """A live run over the last minutes, after the whole run over the same data, carries that run's
    numbers (job_state) and finds the same rows per (job, window, category): stalls, stragglers, a
    failure's retry waste and partial allocations included (docs/goodput-model.md, Live runs)."""
    store, cfg = scenario["store"], scenario["config"]
    end = analyzers.data_end(store, cfg.cluster.name)
    analyzers.run_live(store, cfg, end - last_s * 1000)
    since = (end - last_s * 1000) // 10_000 * 10

    def rows(table: str) -> pl.DataFrame:
        return pl.from_arrow(
            store.query_arrow(
                "SELECT job_id, toInt64(toUnixTimestamp(window_start)) AS w, category, team, pool, "
                f"evidence, sum(gpu_seconds) AS s FROM {table} WHERE window_start >= toDateTime({since}) "
                "GROUP BY ALL ORDER BY ALL"
            )
        )

    whole, live = rows("goodput_windows"), rows("goodput_live")
    assert live.height > 0
    both = whole.join(
        live, on=["job_id", "w", "category", "team", "pool", "evidence"], how="full", coalesce=True
    )
    bad = both.fill_null(0.0).filter((pl.col("s") - pl.col("s_right")).abs() > 1e-6)
    assert bad.height == 0, f"{scenario['name']}: live rows differ from the whole run's:\n{bad}"
