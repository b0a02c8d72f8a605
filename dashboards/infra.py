"""Infrastructure health: GPU errors and throttling, links, storage saturation, and the pipeline itself."""

from __future__ import annotations

from contracts import catalog as c
from dashboards import common as k

THERMAL_MASK = 0x20 | 0x40
"""NVML clock event reasons SW/HW thermal slowdown (nvmlClocksEventReasons)."""
POWER_MASK = 0x4 | 0x80
"""NVML clock event reasons SW power cap and HW power brake."""
NODES = f"node IN (SELECT node FROM {c.DIM_NODES} WHERE {k.POOL})"
SCOPE = f"{k.CLUSTER} AND {NODES} AND $__timeFilter(ts)"


def _series(table: str, select: str, by: str = "") -> str:
    group = f"time, {by}" if by else "time"
    return (
        f"SELECT $__timeInterval(ts) AS time, {select}\nFROM {table} WHERE {SCOPE}\n"
        f"GROUP BY {group} ORDER BY time"
    )


def build():
    gpu, nic, storage = c.RAW_TABLES["gpu"], c.RAW_TABLES["nic"], c.RAW_TABLES["storage"]
    lag = next(n for n in c.LOADER_METRICS if n.endswith("_consumer_lag_records"))
    dead = next(n for n in c.LOADER_METRICS if n.endswith("_dead_letters_total"))
    offset = next(n for n in c.LOADER_METRICS if n.endswith("_node_clock_offset_seconds"))
    spool = next(n for n in c.AGENT_SELF_METRICS if n.endswith("_spool_bytes"))
    collector_ok = next(n for n in c.AGENT_SELF_METRICS if n.endswith("_collector_success"))
    panels = [
        k.freshness(),
        k.timeseries(
            "XID errors by code",
            _series(gpu, "concat('xid ', toString(xid)) AS code, count() AS samples", "code").replace(
                "$__timeFilter(ts)", "$__timeFilter(ts) AND xid IS NOT NULL"
            ),
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            bars=True,
            gridPos=k.pos(4, 0, 10),
        ),
        k.timeseries(
            "Faults by kind",
            f"SELECT $__timeInterval(ts) AS time, kind, count() AS faults\nFROM {c.FAULTS}\n"
            f"WHERE {k.CLUSTER} AND $__timeFilter(ts) GROUP BY time, kind ORDER BY time",
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            bars=True,
            gridPos=k.pos(14, 0, 10),
        ),
        k.timeseries(
            "GPUs throttled (thermal, power)",
            _series(
                gpu,
                f"uniqExactIf((node, gpu), bitAnd(ifNull(throttle_reasons, 0), {THERMAL_MASK}) != 0)\n"
                f"  AS thermal,\n"
                f"  uniqExactIf((node, gpu), bitAnd(ifNull(throttle_reasons, 0), {POWER_MASK}) != 0)\n"
                f"  AS power",
            ),
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(0, 8, 12),
        ),
        k.timeseries(
            "Uncorrected ECC errors (max counter per GPU)",
            _series(gpu, "max(ecc_dbe_total) AS ecc_uncorrected, max(remapped_rows) AS remapped_rows"),
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(12, 8, 12),
        ),
        k.timeseries(
            "NIC ports not ACTIVE; link-down and error rates",
            _series(
                nic,
                "uniqExactIf((node, device, port), state != 'ACTIVE') AS ports_not_active,\n"
                "  sum(link_downed_per_s) AS link_downed, sum(symbol_errors_per_s) AS symbol_errors",
            ),
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(0, 16, 12),
        ),
        k.timeseries(
            "Storage saturation (busy, PSI full)",
            _series(storage, "max(busy_pct) AS busy_max, max(psi_full_pct) AS psi_full_max"),
            unit="percent",
            thresholds=k.steps((k.GREEN, None), (k.YELLOW, 80), (k.RED, 95)),
            gridPos=k.pos(12, 16, 12),
        ),
        k.timeseries(
            "Dead letters by reason",
            f"SELECT $__timeInterval(received_at) AS time, reason, count() AS dead_letters\n"
            f"FROM {c.DEAD_LETTERS} WHERE {k.CLUSTER} AND $__timeFilter(received_at)\n"
            f"GROUP BY time, reason ORDER BY time",
            unit="none",
            thresholds=k.LOW_IS_GOOD,
            bars=True,
            gridPos=k.pos(0, 24, 12),
        ),
        k.timeseries(
            "Ingest delay (sent to stored), and broker clock offset",
            f"SELECT $__timeInterval(sent) AS time,\n"
            f"  quantile(0.9)(dateDiff('millisecond', sent, toDateTime64(ingested_at, 3)) / 1000)\n"
            f"  AS delay_p90,\n"
            f"  max(abs(dateDiff('millisecond', sent, appended)) / 1000) AS clock_offset_max\n"
            f"FROM {c.INGESTED_BATCHES} WHERE {k.CLUSTER} AND $__timeFilter(sent)\n"
            f"GROUP BY time ORDER BY time",
            unit="s",
            thresholds=k.steps((k.GREEN, None), (k.YELLOW, 60), (k.RED, 600)),
            gridPos=k.pos(12, 24, 12),
        ),
        k.prom_timeseries(
            "Loader consumer lag and dead-letter rate (live)",
            [
                (f"sum by (topic) ({lag})", "lag {{topic}}"),
                (f"sum by (reason) (rate({dead}[5m]))", "dead letters/s {{reason}}"),
            ],
            unit="short",
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(0, 32, 8),
        ),
        k.prom_timeseries(
            "Agent spool and failing collectors (live)",
            [
                (f"max by (instance) ({spool})", "spool {{instance}}"),
                (f"count by (collector) ({collector_ok} == 0)", "failing {{collector}}"),
            ],
            unit="bytes",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(8, 32, 8),
        ),
        k.prom_timeseries(
            "Node clock offset (live)",
            [(f"max by (node) (abs({offset}))", "{{node}}")],
            unit="s",
            thresholds=k.steps((k.GREEN, None), (k.YELLOW, 1), (k.RED, 5)),
            gridPos=k.pos(16, 32, 8),
        ),
    ]
    return k.dashboard(
        "infra",
        "Infrastructure health",
        panels,
        description="GPU, fabric and storage health; the agents and the pipeline.",
    )
