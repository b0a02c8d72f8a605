"""Cluster goodput (ops): where the cluster's GPU time goes, by category and pool, against capacity."""

from __future__ import annotations

from contracts import catalog as c
from dashboards import common as k

W = c.GOODPUT_WINDOWS
SCOPE = f"{k.CLUSTER} AND {k.POOL} AND {k.TEAM}"


def build():
    panels = [
        k.freshness(),
        k.timeseries(
            "Goodput %",
            f"SELECT $__timeInterval(window_start) AS time,\n"
            f"  100 * sumIf(gpu_seconds, category = '{k.PRODUCTIVE}') / sum(gpu_seconds) AS goodput_pct\n"
            f"FROM {W} WHERE {SCOPE} AND $__timeFilter(window_start)\nGROUP BY time ORDER BY time",
            unit="percent",
            thresholds=k.GOODPUT_STEPS,
            description="Productive share of allocated GPU time.",
            gridPos=k.pos(4, 0, 20),
        ),
        k.timeseries(
            "Lost GPU-hours by category",
            f"SELECT $__timeInterval(window_start) AS time, category, sum(gpu_seconds) / 3600 AS gpu_hours\n"
            f"FROM {W} WHERE {SCOPE} AND {k.WASTE} AND $__timeFilter(window_start)\n"
            f"GROUP BY time, category ORDER BY time",
            unit="h",
            thresholds=k.NEUTRAL,
            stacked=True,
            bars=True,
            gridPos=k.pos(0, 8, 12),
        ),
        k.timeseries(
            "Goodput % by pool",
            f"SELECT $__timeInterval(window_start) AS time, pool,\n"
            f"  100 * sumIf(gpu_seconds, category = '{k.PRODUCTIVE}') / sum(gpu_seconds) AS goodput_pct\n"
            f"FROM {W} WHERE {SCOPE} AND $__timeFilter(window_start)\nGROUP BY time, pool ORDER BY time",
            unit="percent",
            thresholds=k.GOODPUT_STEPS,
            gridPos=k.pos(12, 8, 12),
        ),
        k.timeseries(
            "Allocated vs capacity (GPU-hours)",
            f"SELECT $__timeInterval(bucket_start) AS time, sum(allocated_gpu_s) / 3600 AS allocated,\n"
            f"  sum(unallocated_gpu_s) / 3600 AS unallocated\n"
            f"FROM {c.POOL_CAPACITY} WHERE {k.CLUSTER} AND {k.POOL} AND $__timeFilter(bucket_start)\n"
            f"GROUP BY time ORDER BY time",
            unit="h",
            thresholds=k.NEUTRAL,
            stacked=True,
            bars=True,
            description="Capacity is the stack's height: allocated plus unallocated GPU-hours.",
            gridPos=k.pos(0, 16, 12),
        ),
        k.timeseries(
            "Stranded GPUs (fragmentation)",
            f"SELECT $__timeInterval(window_start) AS time, pool, max(stranded_gpus) AS stranded_gpus\n"
            f"FROM {c.POOL_FRAGMENTATION} WHERE {k.CLUSTER} AND {k.POOL} AND $__timeFilter(window_start)\n"
            f"GROUP BY time, pool ORDER BY time",
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            description="Free GPUs no pending gang can use (scattered over nodes, or too few).",
            gridPos=k.pos(12, 16, 12),
        ),
        k.table(
            "Top jobs by waste",
            f"SELECT job_id, team, pool, gpus, goodput_pct, waste_cost, cost,\n"
            f"  (allocated_gpu_seconds - s_productive) / 3600 AS lost_gpu_hours\n"
            f"FROM {c.JOB_SUMMARY} WHERE {SCOPE}\n"
            f"  AND last_seen >= $__fromTime AND first_allocated <= $__toTime\n"
            f"ORDER BY waste_cost DESC, job_id LIMIT 20",
            units={
                "goodput_pct": "percent",
                "waste_cost": "currencyUSD",
                "cost": "currencyUSD",
                "lost_gpu_hours": "h",
                "gpus": "none",
            },
            thresholds=k.NEUTRAL,
            links={
                "job_id": "/d/" + k.uid("job") + "?var-job=${__value.raw}&var-cluster=${cluster}"
                "&${__url_time_range}"
            },
            gridPos=k.pos(0, 24, 24, 10),
        ),
        k.timeseries(
            "Goodput % in the last minutes (live runs, provisional)",
            f"SELECT $__timeInterval(window_start) AS time,\n"
            f"  100 * sumIf(gpu_seconds, category = '{k.PRODUCTIVE}') / sum(gpu_seconds) AS goodput_pct\n"
            f"FROM {c.GOODPUT_LIVE} WHERE {SCOPE} AND $__timeFilter(window_start)\n"
            f"GROUP BY time ORDER BY time",
            unit="percent",
            thresholds=k.GOODPUT_STEPS,
            description="The live runs' windows ([loader].live_every_s): each job classified with the "
            "numbers its last whole run kept, ahead of the next whole run; provisional, replaced by "
            "the panels above once a whole run reaches them (docs/goodput-model.md, Live runs).",
            gridPos=k.pos(0, 34, 24),
        ),
    ]
    return k.dashboard(
        "cluster",
        "Cluster goodput",
        panels,
        description="Where the cluster's allocated GPU time goes (docs/goodput-model.md).",
    )
