"""The cluster page (pools and their goodput, allocated vs capacity, fragmentation, core-pool holders,
repeat offenders, capacity signals) and the data coverage every page carries."""

from __future__ import annotations

import polars as pl

from contracts import catalog
from contracts.config import Config
from pipeline.report.data import NETWORK, STORAGE, Page, frame, goodput, local, nearest_rank
from pipeline.store import Params, Store
from pipeline.summary import iso


def cluster_page(
    store: Store,
    cfg: Config,
    w: pl.DataFrame,
    ev: pl.DataFrame,
    sched: pl.DataFrame,
    faults: pl.DataFrame,
    frag: pl.DataFrame,
    a: int,
    b: int,
    tz: str,
) -> Page:
    cluster = cfg.cluster.name
    p: Params = {"cluster": cluster, "a": a // 1000, "b": b // 1000}
    cap = frame(
        store,
        f"""
        SELECT toUnixTimestamp(bucket_start) AS t, pool, pool_class, capacity_gpu_s, allocated_gpu_s,
               unallocated_gpu_s
        FROM {catalog.POOL_CAPACITY}
        WHERE cluster = {{cluster:String}} AND bucket_start >= toDateTime({{a:Int64}}, 'UTC')
              AND bucket_start < toDateTime({{b:Int64}}, 'UTC')""",
        p,
    ).with_columns(hour=local("t", tz).dt.hour())
    pools = (
        goodput(w, ["pool"])
        .select("pool", "allocated_gpu_hours", "goodput_pct", "waste_cost")
        .join(
            cap.group_by("pool").agg(
                pool_class=pl.col("pool_class").first(),
                capacity_gpu_hours=pl.col("capacity_gpu_s").sum() / 3600,
                unallocated_gpu_hours=pl.col("unallocated_gpu_s").sum() / 3600,
            ),
            on="pool",
            how="full",
            coalesce=True,
        )
        .join(frag, on="pool", how="left")
        .sort("pool")
    )
    heat = (
        cap.group_by("pool", "hour")
        .agg(capacity_gpu_s=pl.col("capacity_gpu_s").sum(), allocated_gpu_s=pl.col("allocated_gpu_s").sum())
        .with_columns(
            allocated_pct=100 * pl.col("allocated_gpu_s") / pl.max_horizontal("capacity_gpu_s", 1e-12)
        )
        .select("pool", "hour", "allocated_pct")
        .sort("pool", "hour")
    )
    teams = goodput(w, ["team"]).select("team", "allocated_gpu_hours", "goodput_pct", "cost", "waste_cost")
    team_cats = (
        w.group_by("team", "category")
        .agg(gpu_hours=pl.col("gpu_seconds").sum() / 3600)
        .sort("team", "category")
    )
    holds = frame(
        store,
        f"""
        SELECT job_id, team, pool, toUnixTimestamp64Milli(held_from) AS held_from_ms,
               toUnixTimestamp64Milli(held_to) AS held_to_ms, hold_s, gpus, gpu_hours
        FROM {catalog.POOL_HOLDS}
        WHERE cluster = {{cluster:String}} AND pool_class = 'core'
              AND held_from < toDateTime64({{b:Int64}}, 3, 'UTC')
              AND held_to >= toDateTime64({{a:Int64}}, 3, 'UTC')
        ORDER BY hold_s DESC, job_id LIMIT 20""",
        p,
    )
    repeats = frame(
        store,
        f"""
        SELECT scope, node, gpu, failures, repeats, max_in_window, gpu_seconds,
               arrayStringConcat(kinds, ',') AS kinds
        FROM {catalog.FAULT_REPEATS} WHERE cluster = {{cluster:String}}
        ORDER BY repeats DESC, scope, node, gpu""",
        {"cluster": cluster},
    )
    storage_s = float(ev.filter(pl.col("evidence").str.starts_with(STORAGE))["gpu_seconds"].sum())
    network_s = float(
        ev.filter(pl.any_horizontal(*(pl.col("evidence").str.starts_with(n) for n in NETWORK)))[
            "gpu_seconds"
        ].sum()
    )
    waiting = sched.filter(pl.col("queue_wait_s").is_null() | (pl.col("queue_wait_s") > 0))
    signals = pl.DataFrame(
        [
            {
                "signal": "storage_ceiling",
                "gpu_hours": storage_s / 3600,
                "jobs": ev.filter(pl.col("evidence").str.starts_with(STORAGE))["job_id"].n_unique(),
            },
            {
                "signal": "network_congestion",
                "gpu_hours": network_s / 3600,
                "jobs": ev.filter(
                    pl.any_horizontal(*(pl.col("evidence").str.starts_with(n) for n in NETWORK))
                )["job_id"].n_unique(),
            },
            {
                "signal": "gpu_shortage",
                "gpu_hours": float(w.filter(pl.col("category") == "gang_wait")["gpu_seconds"].sum()) / 3600,
                "jobs": waiting.height,
            },
        ],
        schema={"signal": pl.Utf8, "gpu_hours": pl.Float64, "jobs": pl.Int64},
    )
    qw = sched["queue_wait_s"].drop_nulls()
    alloc = float(w["gpu_seconds"].sum()) / 3600
    numbers: dict[str, float | int | str | None] = {
        "allocated_gpu_hours": alloc,
        "goodput_pct": 100
        * float(w.filter(pl.col("category") == "productive")["gpu_seconds"].sum())
        / 3600
        / alloc
        if alloc
        else None,
        "cost": float(w["cost"].sum()),
        "waste_cost": float(w.filter(pl.col("category") != "productive")["cost"].sum()),
        "capacity_gpu_hours": float(cap["capacity_gpu_s"].sum()) / 3600,
        "unallocated_gpu_hours": float(cap["unallocated_gpu_s"].sum()) / 3600,
        "jobs": w["job_id"].n_unique(),
        "faults": faults.height,
        "queue_wait_p50_s": nearest_rank(qw, 0.5),
        "queue_wait_p95_s": nearest_rank(qw, 0.95),
    }
    return Page(
        None,
        numbers,
        {
            "teams": teams,
            "team_categories": team_cats,
            "pools": pools,
            "pool_hours": heat,
            "core_pool_holders": holds,
            "repeat_offenders": repeats,
            "capacity_signals": signals,
        },
    )


def coverage(store: Store, cluster: str, w: pl.DataFrame, a: int, b: int) -> dict:
    """What tells a bad number from bad data: GPU-time without telemetry, dead letters, analyzer runs."""
    dead = frame(
        store,
        f"""
        SELECT reason, count() AS n FROM {catalog.DEAD_LETTERS}
        WHERE received_at >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND received_at < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')
              AND (cluster = {{cluster:String}} OR cluster = '')
        GROUP BY reason ORDER BY n DESC, reason""",
        {"cluster": cluster, "a": a, "b": b},
    )
    computed = int(w["computed_at"].max()) if w.height else None  # type: ignore[arg-type]
    return {
        "silent_gpu_hours": float(w["silent_gpu_seconds"].sum()) / 3600,
        "allocated_gpu_hours": float(w["gpu_seconds"].sum()) / 3600,
        "dead_letters": dict(dead.iter_rows()),
        "analyzed_at": iso(computed * 1000) if computed else None,
        "reanalyzed_after_day": bool(computed and computed * 1000 > b + 3_600_000),
    }
