"""Job drill-down (variable `job`): what one job's GPUs did, and why, from its own telemetry."""

from __future__ import annotations

from contracts import catalog as c
from dashboards import common as k

JOB = "job_id = ${job:singlequote}"
NODES = (
    f"node IN (SELECT DISTINCT assumeNotNull(node) FROM {c.RAW_TABLES['job']}\n"
    f"  WHERE {k.CLUSTER} AND {JOB} AND event = '{k.event('allocated')}' AND node IS NOT NULL)"
)
"""The nodes the job was allocated on (its NIC and storage traffic is theirs)."""


def _per_node_sum(table: str, expr: str, name: str) -> str:
    """Sum over the nodes of each node's mean in the interval: throughput that adds up across nodes."""
    return (
        f"SELECT time, sum(v) AS {name} FROM (\n"
        f"  SELECT $__timeInterval(ts) AS time, node, avg({expr}) AS v FROM {table}\n"
        f"  WHERE {k.CLUSTER} AND {NODES} AND $__timeFilter(ts) GROUP BY time, node)\n"
        f"GROUP BY time ORDER BY time"
    )


def build():
    nic, gpu, storage = c.RAW_TABLES["nic"], c.RAW_TABLES["gpu"], c.RAW_TABLES["storage"]
    panels = [
        k.freshness(),
        k.table(
            "Job",
            f"SELECT job_id, team, pool, gpus, attempts, goodput_pct, sm_active_pct, cost, waste_cost,\n"
            f"  first_allocated, last_seen\nFROM {c.JOB_SUMMARY} WHERE {k.CLUSTER} AND {JOB}",
            units={
                "goodput_pct": "percent",
                "sm_active_pct": "percent",
                "cost": "currencyUSD",
                "waste_cost": "currencyUSD",
                "gpus": "none",
                "attempts": "none",
                "first_allocated": "dateTimeAsIso",
                "last_seen": "dateTimeAsIso",
            },
            gridPos=k.pos(4, 0, 20, 4),
        ),
        k.timeseries(
            "GPUs by category",
            f"SELECT $__timeInterval(window_start) AS time, category,\n"
            f"  sum(gpu_seconds) / $__interval_s AS gpus\n"
            f"FROM {c.GOODPUT_WINDOWS} WHERE {k.CLUSTER} AND {JOB} AND $__timeFilter(window_start)\n"
            f"GROUP BY time, category ORDER BY time",
            unit="none",
            thresholds=k.NEUTRAL,
            stacked=True,
            description="Mean GPUs of the job in each category: the category timeline.",
            gridPos=k.pos(0, 4, 24),
        ),
        k.heatmap(
            "SM activity per GPU",
            f"SELECT $__timeInterval(ts) AS time, concat(node, ' gpu ', toString(gpu)) AS gpu,\n"
            f"  avg(sm_active_pct) AS sm_active_pct\n"
            f"FROM {gpu} WHERE {k.CLUSTER} AND {JOB} AND $__timeFilter(ts)\n"
            f"GROUP BY time, gpu ORDER BY time",
            unit="percent",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(0, 12, 24, 10),
        ),
        k.timeseries(
            "NIC throughput (job's nodes)",
            _per_node_sum(nic, "tx_bytes_per_s", "transmit"),
            unit="Bps",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(0, 22, 12),
        ),
        k.timeseries(
            "Congestion: ECN, CNP, PFC, xmit_wait (job's nodes)",
            f"SELECT $__timeInterval(ts) AS time, avg(ecn_marked_per_s) AS ecn_marked,\n"
            f"  avg(cnp_sent_per_s) AS cnp_sent, avg(pfc_pause_rx_per_s) AS pfc_pause,\n"
            f"  avg(xmit_wait_per_s) AS xmit_wait\n"
            f"FROM {nic} WHERE {k.CLUSTER} AND {NODES} AND $__timeFilter(ts)\nGROUP BY time ORDER BY time",
            unit="short",
            thresholds=k.LOW_IS_GOOD,
            description="Per port, mean over the job's ports (events per second).",
            gridPos=k.pos(12, 22, 12),
        ),
        k.timeseries(
            "Storage read vs the pool's ceiling",
            f"SELECT t.time AS time, t.read AS read, p.ceiling AS ceiling FROM (\n"
            f"  SELECT time, sum(v) AS read FROM (\n"
            f"    SELECT $__timeInterval(ts) AS time, node, avg(read_bytes_per_s) AS v FROM {storage}\n"
            f"    WHERE {k.CLUSTER} AND $__timeFilter(ts) AND node IN (SELECT node FROM {c.DIM_NODES}\n"
            f"      WHERE pool = (SELECT any(pool) FROM {c.JOB_SUMMARY} WHERE {k.CLUSTER} AND {JOB}))\n"
            f"    GROUP BY time, node) GROUP BY time) AS t\n"
            f"CROSS JOIN (SELECT any(storage_ceiling_bytes_per_s) AS ceiling FROM {c.DIM_POOLS}\n"
            f"  WHERE pool = (SELECT any(pool) FROM {c.JOB_SUMMARY} WHERE {k.CLUSTER} AND {JOB})) AS p\n"
            f"ORDER BY time",
            unit="Bps",
            thresholds=k.NEUTRAL,
            description="The pool's nodes together (the ceiling is the pool's shared storage).",
            gridPos=k.pos(0, 30, 12),
        ),
        k.table(
            "Stragglers",
            f"SELECT evidence, sum(gpu_seconds) / 3600 AS gpu_hours, min(window_start) AS first_seen,\n"
            f"  max(window_start) AS last_seen\n"
            f"FROM {c.GOODPUT_WINDOWS} WHERE {k.CLUSTER} AND {JOB} AND evidence LIKE 'straggler%'\n"
            f"  AND $__timeFilter(window_start)\nGROUP BY evidence ORDER BY gpu_hours DESC",
            units={"gpu_hours": "h", "first_seen": "dateTimeAsIso", "last_seen": "dateTimeAsIso"},
            thresholds=k.LOW_IS_GOOD,
            description="Comm stall the analyzer blamed on a slow GPU (docs/summary.md evidence).",
            gridPos=k.pos(12, 30, 12),
        ),
        k.table(
            "Evidence: why the time was lost",
            f"SELECT category, evidence, sum(gpu_seconds) / 3600 AS gpu_hours, sum(cost) AS cost\n"
            f"FROM {c.GOODPUT_WINDOWS} WHERE {k.CLUSTER} AND {JOB} AND evidence != ''\n"
            f"  AND $__timeFilter(window_start)\n"
            f"GROUP BY category, evidence ORDER BY gpu_hours DESC LIMIT 50",
            units={"gpu_hours": "h", "cost": "currencyUSD"},
            gridPos=k.pos(0, 38, 12),
        ),
        k.table(
            "Failures and preemptions",
            f"SELECT ts, attempt, event, kind, owner, reason, node, gpu, xid,\n"
            f"  gpu_seconds / 3600 AS gpu_hours\n"
            f"FROM {c.FAULTS} WHERE {k.CLUSTER} AND {JOB} ORDER BY ts",
            units={"ts": "dateTimeAsIso", "gpu_hours": "h", "attempt": "none", "gpu": "none", "xid": "none"},
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(12, 38, 12),
        ),
    ]
    job = k.query_variable(
        "job",
        f"SELECT job_id FROM {c.JOB_SUMMARY} WHERE {k.CLUSTER} AND {k.POOL} AND {k.TEAM}\n"
        f"  AND last_seen >= $__fromTime AND first_allocated <= $__toTime\n"
        f"ORDER BY waste_cost DESC LIMIT 1000",
        multi=False,
    )
    annotations = [
        k.annotation(
            "Failures",
            f"SELECT toUnixTimestamp64Milli(ts) AS time, concat(kind, ': ', reason) AS text,\n"
            f"  CAST([event, kind, owner], 'Array(String)') AS tags\n"
            f"FROM {c.FAULTS} WHERE {k.CLUSTER} AND {JOB} AND $__timeFilter(ts)",
            "red",
        ),
        k.annotation(
            "Restarts",
            f"SELECT toUnixTimestamp64Milli(ts) AS time, concat('attempt ', toString(attempt)) AS text,\n"
            f"  CAST([event], 'Array(String)') AS tags\n"
            f"FROM {c.RAW_TABLES['job']} WHERE {k.CLUSTER} AND {JOB} AND event = '{k.event('restarted')}'\n"
            f"  AND $__timeFilter(ts)",
            "orange",
        ),
    ]
    return k.dashboard(
        "job",
        "Job drill-down",
        panels,
        extra_vars=[job],
        annotations=annotations,
        description="One job: category timeline, its GPUs, fabric and storage, and why.",
    )
