"""The goodput exporter: recent analyzer results as Prometheus series (catalog.GOODPUT_METRICS).

Alerts and live dashboards need the analyzers' answers (goodput, lost GPU-seconds by category, stragglers,
queue and gang waits, faults) where Prometheus can evaluate rules on them; the store is not a scrape
target. So after each analyzer run the loader service (pipeline/loader_service.py), or `goodput exporter
--config` on its own schedule, reads the latest `lookback_s` of results into one snapshot that every
scrape serves unchanged: a scrape never touches the store, and a failed read keeps the previous snapshot
(counted in goodput_exporter_refresh_errors_total, while goodput_analysed_until_timestamp_seconds ages
and the freshness alert fires).

The lookback ends at the latest analysed window, not at the wall clock: the series describe the data the
analyzers saw, and how old that is is a series of its own.

Cardinality is fixed by configuration ([exporter], docs/alerts.md): job_id series only for the
`top_jobs` jobs with the most waste in the lookback, then jobs running in the latest window, at most
`max_jobs` in all (goodput_exporter_jobs says how many were left out); the rest is per pool x team x
category, per node (stragglers), per pool (queue, gang) and per fault kind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from contracts import catalog
from contracts.config import Config
from contracts.exporter import MetricsEndpoint
from pipeline.store import Store, StoreError

log = logging.getLogger("goodput.exporter")

_W = catalog.GOODPUT_WINDOWS
_RANGE = "cluster = {cluster:String} AND window_start >= toDateTime({since:Int64}, 'UTC') " + (
    "AND window_start < toDateTime({until:Int64}, 'UTC')"
)


def _family(name: str) -> GaugeMetricFamily:
    mtype, help_text, labels = catalog.GOODPUT_METRICS[name]
    assert mtype == "gauge"  # the snapshot's series; the one counter is the collector's own
    return GaugeMetricFamily(name, help_text, labels=list(labels))


def select_jobs(jobs: list[dict], latest_start: int, top: int, most: int) -> list[str]:
    """The job_ids that get their own series: the `top` with the most waste, then those running in the
    latest window (most waste first), `most` in all. `jobs`: job_id, waste, last_start."""
    by_waste = sorted(jobs, key=lambda j: (-j["waste"], j["job_id"]))
    chosen = [j["job_id"] for j in by_waste[:top]]
    taken = set(chosen)
    for j in by_waste:
        if len(chosen) >= most:
            break
        if j["job_id"] not in taken and j["last_start"] == latest_start:
            chosen.append(j["job_id"])
            taken.add(j["job_id"])
    return chosen


def read_snapshot(store: Store, cfg: Config) -> list[Metric]:
    """Every gauge of catalog.GOODPUT_METRICS as of the store's latest analysed window."""
    ec = cfg.exporter
    params: dict[str, str | int | float] = {"cluster": cfg.cluster.name}
    end = store.query_arrow(
        f"""SELECT max(toInt64(toUnixTimestamp(window_start)) + window_s) AS until,
                   max(toInt64(toUnixTimestamp(window_start))) AS latest
            FROM {_W} WHERE cluster = {{cluster:String}}""",
        params,
    ).to_pylist()[0]
    lookback = _family("goodput_exporter_lookback_seconds")
    lookback.add_metric([], ec.lookback_s)
    if not end["until"]:
        return [lookback]  # nothing analysed yet: no analysed-until, so the freshness alert fires
    until, latest = int(end["until"]), int(end["latest"])
    params |= {"since": until - int(ec.lookback_s), "until": until}
    out: list[Metric] = [lookback]

    f = _family("goodput_analysed_until_timestamp_seconds")
    f.add_metric([], until)
    out.append(f)

    f = _family("goodput_gpu_seconds")
    for r in store.query_arrow(
        f"""SELECT pool, team, category, sum(gpu_seconds) AS s FROM {_W} WHERE {_RANGE}
            GROUP BY pool, team, category ORDER BY pool, team, category""",
        params,
    ).to_pylist():
        f.add_metric([r["pool"], r["team"], r["category"]], r["s"])
    out.append(f)
    out += _job_families(store, params, latest, ec.top_jobs, ec.max_jobs)

    f = _family("goodput_straggler_windows")
    for r in store.query_arrow(
        f"""SELECT splitByChar(' ', evidence)[2] AS node, uniqExact(job_id, window_start) AS n
            FROM {_W} WHERE {_RANGE} AND category = 'comm_stall' AND startsWith(evidence, 'straggler ')
            GROUP BY node ORDER BY node""",
        params,
    ).to_pylist():
        f.add_metric([r["node"]], r["n"])
    out.append(f)
    out += _scheduling_families(store, params)

    f = _family("goodput_faults")
    counts = {
        r["kind"]: r["n"]
        for r in store.query_arrow(
            f"""SELECT kind, count() AS n FROM {catalog.FAULTS} WHERE cluster = {{cluster:String}}
                AND ts >= toDateTime64({{since:Int64}}, 3, 'UTC')
                AND ts < toDateTime64({{until:Int64}}, 3, 'UTC')
                GROUP BY kind""",
            params,
        ).to_pylist()
    }
    for kind in catalog.FAULT_KINDS:  # every kind, 0 included: increase() and `> 0` need a series
        f.add_metric([kind], counts.get(kind, 0))
    out.append(f)
    return out + _live_families(store, cfg)


def _live_families(store: Store, cfg: Config) -> list[Metric]:
    """The live runs' last `[loader].live_window_s` (goodput_live), by pool, team and category, and where
    their windows end: on-call's view of the last minutes, provisional, the same span whenever a whole
    run last ran (so the rules on it do not flap with the whole runs)."""
    params: dict[str, str | int | float] = {
        "cluster": cfg.cluster.name,
        "span": int(cfg.loader.live_window_s),
    }
    rows = store.query_arrow(
        f"""SELECT pool, team, category, sum(gpu_seconds) AS s, any(w.until) AS live_until
            FROM {catalog.GOODPUT_LIVE}
            CROSS JOIN (SELECT max(toInt64(toUnixTimestamp(window_start)) + window_s) AS until
                        FROM {catalog.GOODPUT_LIVE} WHERE cluster = {{cluster:String}}) AS w
            WHERE cluster = {{cluster:String}}
              AND window_start >= toDateTime(w.until - {{span:Int64}}, 'UTC')
            GROUP BY pool, team, category ORDER BY pool, team, category""",
        params,
    ).to_pylist()
    until = _family("goodput_live_until_timestamp_seconds")
    if rows:
        until.add_metric([], rows[0]["live_until"])
    seconds = _family("goodput_live_gpu_seconds")
    for r in rows:
        seconds.add_metric([r["pool"], r["team"], r["category"]], r["s"])
    return [until, seconds]


def _job_families(store: Store, params: dict, latest: int, top: int, most: int) -> list[Metric]:
    jobs = store.query_arrow(
        f"""SELECT job_id, sumIf(gpu_seconds, category != 'productive') AS waste,
                   max(toInt64(toUnixTimestamp(window_start))) AS last_start
            FROM {_W} WHERE {_RANGE} GROUP BY job_id""",
        params,
    ).to_pylist()
    chosen = set(select_jobs(jobs, latest, top, most))
    counted = _family("goodput_exporter_jobs")
    counted.add_metric(["true"], len(chosen))
    counted.add_metric(["false"], len(jobs) - len(chosen))
    totals = _family("goodput_job_gpu_seconds")
    for r in store.query_arrow(
        f"""SELECT job_id, any(pool) AS pool, any(team) AS team, category, sum(gpu_seconds) AS s
            FROM {_W} WHERE {_RANGE} GROUP BY job_id, category ORDER BY job_id, category""",
        params,
    ).to_pylist():
        if r["job_id"] in chosen:
            totals.add_metric([r["job_id"], r["pool"], r["team"], r["category"]], r["s"])
    last = _family("goodput_job_last_window_ratio")
    rows = store.query_arrow(
        f"""SELECT job_id, any(pool) AS pool, any(team) AS team, category, sum(gpu_seconds) AS s
            FROM {_W} WHERE {_RANGE} AND (job_id, window_start) IN
                (SELECT job_id, max(window_start) FROM {_W} WHERE {_RANGE} GROUP BY job_id)
            GROUP BY job_id, category ORDER BY job_id, category""",
        params,
    ).to_pylist()
    per_job: dict[str, float] = defaultdict(float)
    for r in rows:
        per_job[r["job_id"]] += r["s"]
    for r in rows:
        if r["job_id"] in chosen and per_job[r["job_id"]] > 0:
            last.add_metric([r["job_id"], r["pool"], r["team"], r["category"]], r["s"] / per_job[r["job_id"]])
    return [counted, totals, last]


def _scheduling_families(store: Store, params: dict) -> list[Metric]:
    """Queue wait, queued jobs and gang wait per pool from scheduling_delay."""
    rows = store.query_arrow(
        f"""SELECT pool,
                   countIf(first_allocated IS NULL OR first_allocated >= end_t) AS queued,
                   arraySort(groupArrayIf(queue_wait_s, allocated)) AS waits,
                   maxIf(if(gang_complete IS NULL OR gang_complete > end_t,
                            toFloat64(dateDiff('millisecond', first_allocated, end_t)) / 1000,
                            gang_wait_s), allocated) AS gang_max
            FROM (SELECT *, toDateTime64({{until:Int64}}, 3, 'UTC') AS end_t,
                         first_allocated >= toDateTime64({{since:Int64}}, 3, 'UTC')
                           AND first_allocated < end_t AS allocated
                  FROM {catalog.SCHEDULING_DELAY}
                  WHERE cluster = {{cluster:String}} AND submitted < toDateTime64({{until:Int64}}, 3, 'UTC')
                    AND (submitted >= toDateTime64({{since:Int64}}, 3, 'UTC')
                         OR first_allocated >= toDateTime64({{since:Int64}}, 3, 'UTC')))
            GROUP BY pool ORDER BY pool""",
        params,
    ).to_pylist()
    p90, queued, gang = (
        _family("goodput_queue_wait_p90_seconds"),
        _family("goodput_queued_jobs"),
        _family("goodput_gang_wait_max_seconds"),
    )
    for r in rows:
        queued.add_metric([r["pool"]], r["queued"])
        waits = [w for w in r["waits"] if w is not None]
        if waits:
            p90.add_metric([r["pool"]], waits[-(-9 * len(waits) // 10) - 1])  # nearest rank: ceil(0.9 n)-th
        if r["gang_max"] is not None and waits:
            gang.add_metric([r["pool"]], r["gang_max"])
    return [p90, queued, gang]


class GoodputExporter:
    """A prometheus_client collector serving the latest snapshot; `refresh` replaces it in one step."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._snapshot: list[Metric] = []
        self._refreshed_at: float | None = None
        self._errors = 0
        self._lock = threading.Lock()

    def refresh(self, store: Store) -> bool:
        """Reads the store; False (and the old snapshot kept) when the store failed."""
        try:
            snapshot = read_snapshot(store, self.cfg)
        except StoreError as e:
            with self._lock:
                self._errors += 1
            log.error("goodput exporter could not read the store: %s; serving the previous values", e)
            return False
        with self._lock:
            self._snapshot, self._refreshed_at = snapshot, time.time()
        return True

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: which families exist depends on the store

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot, at, errors = list(self._snapshot), self._refreshed_at, self._errors
        yield from snapshot
        if at is not None:
            f = _family("goodput_exporter_refresh_timestamp_seconds")
            f.add_metric([], at)
            yield f
        name = "goodput_exporter_refresh_errors_total"
        c = CounterMetricFamily(name.removesuffix("_total"), catalog.GOODPUT_METRICS[name][1])
        c.add_metric([], errors)
        yield c


class ExporterEndpoint(MetricsEndpoint):
    """`goodput exporter`'s own /metrics: only the goodput series, on [exporter].metrics_address."""

    def __init__(self, exporter: GoodputExporter) -> None:
        super().__init__(CollectorRegistry(auto_describe=True))
        self.registry.register(exporter)
