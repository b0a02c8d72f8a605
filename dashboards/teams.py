"""Teams and cost: GPU-hours, goodput and money by team and pool; who holds the core pools; queue delay."""

from __future__ import annotations

from typing import get_args, get_type_hints

from contracts import catalog as c
from contracts.config import Pool
from dashboards import common as k

CORE = get_args(get_type_hints(Pool)["pool_class"])[0]
"""The first pool class of the config model ("core"): the scarce pools whose holders matter."""
DAYS = "$__dateFilter(day)"
SCOPE = f"{k.CLUSTER} AND {k.POOL} AND {k.TEAM} AND {DAYS}"


def build():
    panels = [
        k.freshness(),
        k.table(
            "By team and pool",
            f"SELECT team, pool, sum(gpu_hours) AS allocated_gpu_hours,\n"
            f"  100 * sumIf(gpu_hours, category = '{k.PRODUCTIVE}') / allocated_gpu_hours AS goodput_pct,\n"
            f"  sum(cost) AS spent, sumIf(cost, {k.WASTE}) AS lost\n"
            f"FROM {c.TEAM_DAY} WHERE {SCOPE}\nGROUP BY team, pool ORDER BY lost DESC",
            units={
                "allocated_gpu_hours": "h",
                "goodput_pct": "percent",
                "spent": "currencyUSD",
                "lost": "currencyUSD",
            },
            description="Whole days (UTC) the time range touches.",
            gridPos=k.pos(4, 0, 20, 8),
        ),
        k.timeseries(
            "Money lost per day by team",
            f"SELECT toDateTime(day) AS time, team, sumIf(cost, {k.WASTE}) AS lost\n"
            f"FROM {c.TEAM_DAY} WHERE {SCOPE}\nGROUP BY time, team ORDER BY time",
            unit="currencyUSD",
            thresholds=k.NEUTRAL,
            stacked=True,
            bars=True,
            gridPos=k.pos(0, 8, 12),
        ),
        k.timeseries(
            "Goodput % per day by team",
            f"SELECT toDateTime(day) AS time, team,\n"
            f"  100 * sumIf(gpu_hours, category = '{k.PRODUCTIVE}') / sum(gpu_hours) AS goodput_pct\n"
            f"FROM {c.TEAM_DAY} WHERE {SCOPE}\nGROUP BY time, team ORDER BY time",
            unit="percent",
            thresholds=k.GOODPUT_STEPS,
            gridPos=k.pos(12, 8, 12),
        ),
        k.table(
            "Core-pool holders",
            f"SELECT team, pool, sum(gpu_hours) AS gpu_hours, max(jobs) AS most_jobs_a_day,\n"
            f"  max(longest_hold_s) AS longest_hold,\n"
            f"  argMax(longest_hold_job, longest_hold_s) AS longest_job\n"
            f"FROM {c.POOL_TEAM_DAY} WHERE {SCOPE} AND pool_class = '{CORE}'\n"
            f"GROUP BY team, pool ORDER BY gpu_hours DESC",
            units={"gpu_hours": "h", "longest_hold": "s", "most_jobs_a_day": "none"},
            links={
                "longest_job": "/d/" + k.uid("job") + "?var-job=${__value.raw}&var-cluster=${cluster}"
                "&${__url_time_range}"
            },
            gridPos=k.pos(0, 16, 12),
        ),
        k.timeseries(
            "Queue delay p90 by priority",
            f"SELECT toDateTime(day) AS time, concat('priority ', key) AS priority, max(p90_s) AS p90\n"
            f"FROM {c.QUEUE_DELAY_DAY} WHERE {k.CLUSTER} AND by = 'priority' AND {DAYS}\n"
            f"GROUP BY time, priority ORDER BY time",
            unit="s",
            thresholds=k.steps((k.GREEN, None), (k.YELLOW, 1800), (k.RED, 4 * 3600)),
            bars=True,
            description="Submitted to first GPU, 90th percentile of the jobs submitted that day.",
            gridPos=k.pos(12, 16, 12),
        ),
        k.table(
            "Reclaimable idle GPU-hours by team",
            f"SELECT team, pool, count() AS idle_spells, sum(gpu_hours) AS idle_gpu_hours,\n"
            f"  sum(reclaimable_s) / 3600 AS reclaimable_gpu_hours\n"
            f"FROM {c.IDLE_ALLOCATIONS} WHERE {k.CLUSTER} AND {k.POOL} AND {k.TEAM}\n"
            f"  AND $__timeFilter(idle_from)\n"
            f"GROUP BY team, pool ORDER BY reclaimable_gpu_hours DESC",
            units={"idle_gpu_hours": "h", "reclaimable_gpu_hours": "h", "idle_spells": "none"},
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(0, 24, 24),
        ),
    ]
    return k.dashboard(
        "teams",
        "Teams and cost",
        panels,
        description="GPU-hours, goodput and money per team and pool (docs/summary.md).",
    )
