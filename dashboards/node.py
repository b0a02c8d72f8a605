"""Node drill-down (variable `node`): its GPUs and NICs over time, the jobs it ran, its faults."""

from __future__ import annotations

from contracts import catalog as c
from dashboards import common as k

NODE = "node = ${node:singlequote}"
HERE = f"{k.CLUSTER} AND {NODE} AND $__timeFilter(ts)"
GPU_LABEL = "concat('gpu ', toString(gpu)) AS gpu"


def _per_gpu(expr: str, name: str) -> str:
    return (
        f"SELECT $__timeInterval(ts) AS time, {GPU_LABEL}, avg({expr}) AS {name}\n"
        f"FROM {c.RAW_TABLES['gpu']} WHERE {HERE}\nGROUP BY time, gpu ORDER BY time"
    )


def build():
    gpu_metric = k.metric("gpu", "sm_active_pct")
    panels = [
        k.freshness(),
        k.table(
            "Node",
            f"SELECT node, pool, pool_class, gpu_type, gpus_per_node, network_tier, price_per_gpu_hour\n"
            f"FROM {c.DIM_NODES} WHERE {NODE}",
            units={"gpus_per_node": "none", "price_per_gpu_hour": "currencyUSD"},
            gridPos=k.pos(4, 0, 20, 4),
        ),
        k.timeseries(
            "SM active per GPU",
            _per_gpu("sm_active_pct", "sm_active_pct"),
            unit="percent",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(0, 4, 12),
        ),
        k.timeseries(
            "Temperature per GPU",
            _per_gpu("temp_c", "temp_c"),
            unit="celsius",
            thresholds=k.steps((k.GREEN, None), (k.YELLOW, 80), (k.RED, 88)),
            gridPos=k.pos(12, 4, 12),
        ),
        k.timeseries(
            "Power per GPU",
            _per_gpu("power_w", "power_w"),
            unit="watt",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(0, 12, 12),
        ),
        k.timeseries(
            "NIC transmit per port",
            f"SELECT $__timeInterval(ts) AS time, concat(device, ':', toString(port)) AS port,\n"
            f"  avg(tx_bytes_per_s) AS transmit\nFROM {c.RAW_TABLES['nic']} WHERE {HERE}\n"
            f"GROUP BY time, port ORDER BY time",
            unit="Bps",
            thresholds=k.NEUTRAL,
            gridPos=k.pos(12, 12, 12),
        ),
        k.prom_timeseries(
            "SM active per GPU (live)",
            [(f'{gpu_metric}{{Hostname="$node"}}', "gpu {{gpu}}")],
            unit="percentunit",  # a 0-1 ratio (metrics version 2)
            thresholds=k.NEUTRAL,
            gridPos=k.pos(0, 20, 12),
        ),
        k.table(
            "Jobs on this node",
            f"SELECT job_id, min(ts) AS first_allocated, max(ts) AS last_event,\n"
            f"  uniqExact(attempt) AS attempts\n"
            f"FROM {c.RAW_TABLES['job']} WHERE {HERE}\n"
            f"GROUP BY job_id ORDER BY first_allocated DESC LIMIT 100",
            units={"first_allocated": "dateTimeAsIso", "last_event": "dateTimeAsIso", "attempts": "none"},
            links={
                "job_id": "/d/" + k.uid("job") + "?var-job=${__value.raw}&var-cluster=${cluster}"
                "&${__url_time_range}"
            },
            gridPos=k.pos(12, 20, 12),
        ),
        k.table(
            "Faults on this node",
            f"SELECT ts, job_id, kind, reason, gpu, xid, nic, gpu_seconds / 3600 AS gpu_hours\n"
            f"FROM {c.FAULTS} WHERE {HERE} ORDER BY ts DESC LIMIT 100",
            units={"ts": "dateTimeAsIso", "gpu_hours": "h", "gpu": "none", "xid": "none"},
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(0, 28, 12),
        ),
        k.table(
            "Repeat offenders (this node and its GPUs)",
            f"SELECT scope, gpu, failures, repeats, max_in_window, last_failure, kinds\n"
            f"FROM {c.FAULT_REPEATS} WHERE {k.CLUSTER} AND {NODE} ORDER BY failures DESC",
            units={
                "last_failure": "dateTimeAsIso",
                "failures": "none",
                "repeats": "none",
                "max_in_window": "none",
                "gpu": "none",
            },
            thresholds=k.LOW_IS_GOOD,
            gridPos=k.pos(12, 28, 12),
        ),
    ]
    node = k.query_variable(
        "node", f"SELECT node FROM {c.DIM_NODES} WHERE {k.POOL} ORDER BY node", multi=False
    )
    return k.dashboard(
        "node",
        "Node drill-down",
        panels,
        extra_vars=[node],
        description="One node: its GPUs and NICs, the jobs it ran, its faults.",
    )
