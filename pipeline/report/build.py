"""Builds every page of a day's report from one read of the analyzer tables (`goodput report`)."""

from __future__ import annotations

from datetime import date, timedelta

import polars as pl

from contracts import catalog
from contracts.config import Config
from pipeline.report.cluster import cluster_page, coverage
from pipeline.report.data import (
    TREND_DAYS,
    Report,
    checkpoint_saves,
    day_range,
    evidence,
    frame,
    goodput,
    windows,
)
from pipeline.report.team import team_page
from pipeline.store import Store


def build(store: Store, cfg: Config, day: date, team: str | None = None) -> Report:
    """Every page of the report of `day` (the reader's): the cluster page and one per team (or `team`)."""
    tz = cfg.report.timezone
    cluster = cfg.cluster.name
    a, b = day_range(day, tz)
    trend_a, _ = day_range(day - timedelta(days=TREND_DAYS), tz)
    w_all = windows(store, cluster, trend_a, b, tz)
    w = w_all.filter(pl.col("day") == day)
    ev = evidence(store, cluster, a, b)
    jobs = frame(
        store,
        f"SELECT job_id, gpus, sm_active_pct FROM {catalog.JOB_SUMMARY} WHERE cluster = {{cluster:String}}",
        {"cluster": cluster},
    )
    sched = frame(
        store,
        f"""
        SELECT job_id, team, pool, gpus_requested, queue_wait_s, gang_wait_s,
               toUnixTimestamp64Milli(submitted) AS submitted_ms
        FROM {catalog.SCHEDULING_DELAY}
        WHERE cluster = {{cluster:String}} AND submitted >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND submitted < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')""",
        {"cluster": cluster, "a": a, "b": b},
    )
    faults = frame(
        store,
        f"""
        SELECT job_id, toUnixTimestamp64Milli(ts) AS ts_ms, kind, owner, reason, node, gpu, nic,
               gpu_seconds, held_gpu_seconds, cost
        FROM {catalog.FAULTS}
        WHERE cluster = {{cluster:String}} AND ts >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND ts < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC') ORDER BY ts, job_id""",
        {"cluster": cluster, "a": a, "b": b},
    )
    frag = frame(
        store,
        f"""
        SELECT pool, count() AS samples, countIf(fragmented) AS fragmented_samples,
               avg(stranded_gpus) AS mean_stranded_gpus, max(free_gpus) AS max_free_gpus,
               max(pending_jobs) AS max_pending_jobs
        FROM {catalog.POOL_FRAGMENTATION}
        WHERE cluster = {{cluster:String}} AND window_start >= toDateTime({{a:Int64}}, 'UTC')
              AND window_start < toDateTime({{b:Int64}}, 'UTC') GROUP BY pool ORDER BY pool""",
        {"cluster": cluster, "a": a // 1000, "b": b // 1000},
    )
    job_team = w.select("job_id", "team").unique("job_id")
    team_of_job = dict(job_team.iter_rows())
    faults = faults.with_columns(team=pl.col("job_id").replace_strict(team_of_job, default=""))
    idle = frame(
        store,
        f"""
        SELECT job_id, team, pool, node, gpu, toUnixTimestamp64Milli(idle_from) AS idle_from_ms,
               toUnixTimestamp64Milli(idle_to) AS idle_to_ms, idle_s, reclaimable_s, gpu_hours
        FROM {catalog.IDLE_ALLOCATIONS}
        WHERE cluster = {{cluster:String}} AND idle_from < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')
              AND idle_to >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
        ORDER BY reclaimable_s DESC, job_id, node, gpu""",
        {"cluster": cluster, "a": a, "b": b},
    )
    episodes = frame(
        store,
        f"""
        SELECT job_id, rank, node, gpu, toUnixTimestamp64Milli(toDateTime64(start, 3)) AS start_ms,
               toUnixTimestamp64Milli(toDateTime64(end, 3)) AS end_ms, kind, slowdown_pct,
               cost_gpu_seconds
        FROM {catalog.STRAGGLER_EPISODES}
        WHERE cluster = {{cluster:String}} AND start < toDateTime({{b:Int64}}, 'UTC')
              AND end > toDateTime({{a:Int64}}, 'UTC')
        ORDER BY cost_gpu_seconds DESC, job_id, rank, start""",
        {"cluster": cluster, "a": a // 1000, "b": b // 1000},
    )
    saves = checkpoint_saves(store, cluster, a, b)
    teams = sorted(w["team"].unique().to_list()) if team is None else [team]
    cluster_goodput = goodput(w.with_columns(all=pl.lit("")), ["all"])
    cluster_pct = float(cluster_goodput["goodput_pct"][0]) if cluster_goodput.height else None
    pages = [cluster_page(store, cfg, w, ev, sched, faults, frag, a, b, tz)]
    for t in teams:
        pages.append(
            team_page(
                cfg, t, w, w_all, ev, jobs, sched, faults, idle, frag, episodes, saves, day, tz, cluster_pct
            )
        )
    cov = coverage(store, cluster, w, a, b)
    return Report(cluster, cfg.cluster.currency, day, tz, a, b, pages, cov, empty=w.height == 0)
