"""What the openb replay found, read back from the analyzers' tables (docs/real-traces.md, "Where each
figure comes from"): queue delay from scheduling_delay, GPU-hours from job_summary weighted by each pod's
GPU share, the final state from the stored end events, allocation from pool_capacity, fragmentation from
pool_fragmentation."""

from __future__ import annotations

from typing import Iterator

import polars as pl

from contracts.config import Config
from goodput.replay import REPLAY_VERSION
from pipeline.store import Store

QUEUE_DELAY = """
-- the scheduled pods' queue waits, all and per team, at the nearest rank as fleet.sql's queue_delay_day
-- (the ceil(q n)-th smallest), over the whole trace rather than per day of submission
SELECT g.1 AS by, g.2 AS key, length(ws) AS jobs, n - length(ws) AS withdrawn,
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.50 * length(ws), 6)))] / 1000, NULL) AS p50,
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.90 * length(ws), 6)))] / 1000, NULL) AS p90,
       if(notEmpty(ws), ws[toUInt64(ceil(round(0.99 * length(ws), 6)))] / 1000, NULL) AS p99,
       if(notEmpty(ws), ws[-1] / 1000, NULL) AS max
FROM (
    SELECT g, arraySort(groupArrayIf(w, w >= 0)) AS ws, count() AS n
    FROM (SELECT if(queue_wait_s IS NULL, toInt64(-1), toInt64(round(queue_wait_s * 1000))) AS w,
                 arrayJoin([('all', ''), ('team', toString(team))]) AS g
          FROM scheduling_delay WHERE cluster = {cluster:String})
    GROUP BY g
)
ORDER BY by, key
"""


def _keyed(delay: pl.DataFrame) -> Iterator[tuple[str, dict]]:
    """QUEUE_DELAY's rows as (`all` or the team, row)."""
    for row in delay.iter_rows(named=True):
        yield ("all" if row["by"] == "all" else row["key"]), row


def findings(store: Store, cfg: Config, pods: pl.DataFrame, gpus: int, end_s: int, base_ms: int) -> dict:
    """The replay's figures, read from the analyzers' tables of the store. `pods`: the imported pods
    (name, share, scheduled_time); `gpus`: the cluster's; `end_s`: the trace's span; `base_ms`: where the
    trace's second 0 was put."""
    cluster = {"cluster": cfg.cluster.name}
    delay = pl.from_arrow(store.query_arrow(QUEUE_DELAY, cluster))
    assert isinstance(delay, pl.DataFrame)
    queue = {key: {k: row[k] for k in ("jobs", "p50", "p90", "p99", "max")} for key, row in _keyed(delay)}
    withdrawn = {key: row["withdrawn"] for key, row in _keyed(delay) if key != "all" and row["withdrawn"]}
    state = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, countIf(event = 'allocated') > 0 AS allocated, "
            "anyIf(event, event IN ('completed', 'failed', 'cancelled')) AS ended "
            "FROM raw_job FINAL WHERE cluster = {cluster:String} GROUP BY job_id",
            cluster,
        )
    )
    assert isinstance(state, pl.DataFrame)
    state = state.with_columns(pl.col("allocated").cast(pl.Boolean)).with_columns(
        state=pl.when(pl.col("ended") == "completed")
        .then(pl.lit("Succeeded"))
        .when(pl.col("ended") == "failed")
        .then(pl.lit("Failed"))
        .when((pl.col("ended") == "cancelled") & pl.col("allocated"))
        .then(pl.lit("Running"))
        .when(pl.col("ended") == "cancelled")
        .then(pl.lit("Pending"))
        .otherwise(pl.lit("open at trace end"))
    )
    held = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, team, allocated_gpu_seconds AS s, cost FROM job_summary "
            "WHERE cluster = {cluster:String}",
            cluster,
        )
    )
    assert isinstance(held, pl.DataFrame)
    jobs = (
        state.join(held, on="job_id", how="left")
        .join(pods.select(pl.col("name").alias("job_id"), "share"), on="job_id", how="left")
        .with_columns(pl.col("s").fill_null(0.0), pl.col("cost").fill_null(0.0))
        .with_columns(
            used_h=pl.col("s") * pl.col("share") / 3600,
            held_h=pl.col("s") / 3600,
            used_cost=pl.col("cost") * pl.col("share"),
        )
    )

    def hours(col: str, by: str) -> dict:
        g = jobs.filter(pl.col(by).is_not_null()).group_by(by).agg(pl.col(col).sum()).sort(by)
        return {k: round(v, 6) for k, v in g.rows()}

    cap = pl.from_arrow(
        store.query_arrow(
            "SELECT toInt64(toUnixTimestamp(bucket_start)) * 1000 AS b, sum(capacity_gpu_s) AS cap, "
            "sum(allocated_gpu_s) AS alloc FROM pool_capacity WHERE cluster = {cluster:String} "
            "GROUP BY b ORDER BY b",
            cluster,
        )
    )
    assert isinstance(cap, pl.DataFrame)
    daily = (
        cap.with_columns(day=(pl.col("b") - base_ms) // 86_400_000)
        .group_by("day")
        .agg(
            pct=100 * pl.col("alloc").sum() / pl.col("cap").sum(),
            peak=(100 * pl.col("alloc") / pl.col("cap")).max(),
        )
        .sort("day")
    )
    frag = store.query_arrow(
        "SELECT count() AS instants, countIf(fragmented) AS fragmented, max(stranded_gpus) AS max_stranded "
        "FROM pool_fragmentation WHERE cluster = {cluster:String}",
        cluster,
    ).to_pylist()[0]
    total_cap = float(cap["cap"].sum()) if cap.height else 0.0
    return {
        "replay_version": REPLAY_VERSION,
        "trace": "alibaba-openb",
        "cluster_gpus": gpus,
        "trace_days": round(end_s / 86400, 3),
        "pods": {
            "gpu_pods": pods.height,
            "scheduled": int(pods["scheduled_time"].is_not_null().sum()),
            "withdrawn_while_queued": withdrawn,
        },
        "queue_delay_s": queue,
        "gpu_hours": {
            "rule": "num_gpu x gpu_milli/1000 x (deletion_time - scheduled_time)",
            "total": round(float(jobs["used_h"].sum()), 6),
            "by_class": hours("used_h", "team"),
            "by_state": hours("used_h", "state"),
        },
        "cost": {
            "rule": "the pool's price per GPU-hour x the GPU-hours by the share rule",
            "currency": cfg.cluster.currency,
            "total": round(float(jobs["used_cost"].sum()), 6),
            "by_class": hours("used_cost", "team"),
        },
        "gpu_hours_held": {
            "rule": "whole GPUs held (a sharing pod holds one GPU in the replay's packing)",
            "total": round(float(jobs["held_h"].sum()), 6),
            "by_class": hours("held_h", "team"),
            "by_state": hours("held_h", "state"),
        },
        "allocated_pct": {
            "of_gpus": gpus,
            "mean": round(100 * float(cap["alloc"].sum()) / total_cap, 4) if total_cap else None,
            "peak_hour": round(float(cap.select((100 * pl.col("alloc") / pl.col("cap")).max()).item()), 4)
            if cap.height
            else None,
            "by_trace_day": [
                {"day": int(d), "mean": round(p, 4), "peak_hour": round(k, 4)} for d, p, k in daily.rows()
            ],
        },
        "fragmentation": {
            "basis": "the replay's first-fit packing, not the cluster's own placement",
            "instants_with_pending": int(frag["instants"]),
            "fragmented_instants": int(frag["fragmented"]),
            "max_stranded_gpus": int(frag["max_stranded"] or 0),
        },
    }


def describe(f: dict) -> str:
    """The findings as a few plain tables, for a terminal."""
    lines = [
        f"Alibaba openb: {f['pods']['gpu_pods']:,} GPU pods over {f['trace_days']:g} days "
        f"on {f['cluster_gpus']:,} GPUs",
        "",
        f"{'queue delay (s)':<18}{'pods':>7}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for k, q in f["queue_delay_s"].items():
        if q["jobs"]:
            lines.append(f"{k:<18}{q['jobs']:>7}{q['p50']:>10g}{q['p90']:>10g}{q['p99']:>10g}")
    g = f["gpu_hours"]
    lines += ["", f"GPU-hours ({g['rule']}): {g['total']:,.1f}"]
    for by in ("by_class", "by_state"):
        lines.append("  " + ", ".join(f"{k} {v:,.1f}" for k, v in g[by].items()))
    a = f["allocated_pct"]
    lines += [
        "",
        f"allocated: {a['mean']:.2f}% of {a['of_gpus']:,} GPUs on average, "
        f"{a['peak_hour']:.2f}% at the peak hour",
    ]
    return "\n".join(lines)
