"""The agent's Prometheus endpoint: the latest samples as gauges and counters, plus its own health.

Names come from the declarations, never from here: sample metrics from `contracts.schema` (each
numeric field's `metric`, `metric_type`, `metric_scale`, `counts`, and the identifier fields' `label`),
derived and self metrics from `contracts.catalog`. Dashboards and alerts read the same tables.
Counters are totals the agent keeps monotonic (agents/totals.py), not the raw device counters.

Samples are exported as of the last successful run of each collector and vanish when it fails
(`goodput_collector_success` goes to 0 instead): a stale GPU utilisation that looks alive is worse
than a gap. The values are built at scrape time from the rows the agent already has, so exporting costs
nothing between scrapes. The GPU series also carry `Hostname`, as dcgm-exporter's do.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from dataclasses import dataclass
from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agents.totals import Totals
from collectors.base import Row
from contracts.catalog import AGENT_DERIVED_METRICS, AGENT_SELF_METRICS, CLOCK_EVENT_REASONS
from contracts.exporter import MetricsEndpoint, declare
from contracts.schema import KINDS

HOST_LABEL_KINDS = ("gpu",)


class SampleExporter:
    """A prometheus_client custom collector over the latest rows of every collector."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._rows: dict[str, tuple[str, list[Row]]] = {}
        self._xids: Tally[tuple[str, str, str]] = Tally()
        self._totals = Totals()
        self._lock = threading.Lock()

    def update(self, collector: str, kind: str, rows: list[Row]) -> None:
        with self._lock:
            self._rows[collector] = (kind, rows)
            self._totals.add(kind, rows)
            if kind == "gpu":
                for r in rows:
                    if r.get("xid") is not None:
                        self._xids[(str(r["gpu"]), str(r.get("uuid") or ""), str(r["xid"]))] += 1

    def forget(self, collector: str) -> None:
        with self._lock:
            self._rows.pop(collector, None)

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: families depend on what the node has

    def collect(self) -> Iterable[Metric]:
        with self._lock:  # the rows and their totals as of one update
            snapshot = list(self._rows.values())
            families = [
                family
                for kind_name in KINDS
                for family in self._families(
                    kind_name, [r for kind, rs in snapshot if kind == kind_name for r in rs]
                )
            ]
        yield from families
        yield from self._derived(
            [r for kind, rs in snapshot if kind == "gpu" for r in rs],
            [r for kind, rs in snapshot if kind == "nic" for r in rs],
        )

    def _derived(self, gpu_rows: list[Row], nic_rows: list[Row]) -> Iterable[Metric]:
        """catalog.AGENT_DERIVED_METRICS: the XID counter (kept across ticks), lost GPUs, port state, the
        NIC's link layer, the GPU's active clock events; a family without samples is left out."""
        with self._lock:
            counts = sorted(self._xids.items())
        gpu = [(r, [str(r["gpu"]), str(r.get("uuid") or ""), self.node]) for r in gpu_rows]
        nic = [(r, [str(r["device"]), str(r["port"])]) for r in nic_rows]
        series: dict[str, list[tuple[list[str], float]]] = {
            "goodput_gpu_xid_errors_total": [
                ([g, uuid, self.node, code], n) for (g, uuid, code), n in counts
            ],
            "goodput_gpu_lost": [(ids, 1.0 if r.get("lost") else 0.0) for r, ids in gpu],
            "goodput_nic_port_active": [
                (ids, 1.0 if r["state"] == "ACTIVE" else 0.0) for r, ids in nic if r.get("state")
            ],
            "goodput_nic_info": [
                (ids + [str(r["link_layer"])], 1.0) for r, ids in nic if r.get("link_layer")
            ],
            "goodput_gpu_clock_event_active": [
                (ids + [reason], 1.0 if r["throttle_reasons"] & bit else 0.0)
                for r, ids in gpu
                if r.get("throttle_reasons") is not None
                for bit, reason in CLOCK_EVENT_REASONS.items()
            ],
        }
        for name, samples in series.items():
            kind, help_text, labels = AGENT_DERIVED_METRICS[name]
            family = (
                CounterMetricFamily(name.removesuffix("_total"), help_text, labels=list(labels))
                if kind == "counter"
                else GaugeMetricFamily(name, help_text, labels=list(labels))
            )
            for values, value in samples:
                family.add_metric(values, value)
            if family.samples:
                yield family

    def _families(self, kind_name: str, rows: list[Row]) -> list[Metric]:
        """The kind's series for the latest rows (none without rows); called under the lock."""
        out: list[Metric] = []
        kind = KINDS[kind_name]
        label_fields = [f for f in kind.fields if f.label]
        names = [f.label for f in label_fields if f.label]  # all of them; `if` narrows the type
        host = kind_name in HOST_LABEL_KINDS
        if host:
            names.append("Hostname")
        labels = []
        for r in rows:
            values = ["" if r.get(f.name) is None else str(r[f.name]) for f in label_fields]
            labels.append(values + [self.node] if host else values)
        for f in kind.fields:
            if not f.metric:
                continue
            help_text = f.metric_help or f.help
            if f.counts:
                family: CounterMetricFamily | GaugeMetricFamily = CounterMetricFamily(
                    f.metric.removesuffix("_total"), help_text, labels=names
                )
                for r, lv in zip(rows, labels, strict=True):  # one label list per row
                    total = self._totals.value(kind_name, f, r)
                    if total is not None:
                        family.add_metric(lv, total)
            else:
                family = GaugeMetricFamily(f.metric, help_text, labels=names)
                for r, lv in zip(rows, labels, strict=True):
                    v = r.get(f.name)
                    if v is not None and not isinstance(v, (list, str)):
                        family.add_metric(lv, float(v) * f.metric_scale)
            if family.samples:
                out.append(family)
        return out


@dataclass(frozen=True)
class AgentSelfSeries:
    """contracts.catalog.AGENT_SELF_METRICS as attributes (contracts.exporter.attribute names them)."""

    collector_success: Gauge
    collector_duration_seconds: Gauge
    collector_rows: Gauge
    agent_batches_sent: Counter
    agent_send_errors: Counter
    agent_spool_bytes: Gauge
    agent_spool_batches: Gauge
    agent_spool_dropped_batches: Counter
    agent_spool_replayed_batches: Counter
    agent_last_send_timestamp_seconds: Gauge
    agent_step_events_rejected: Counter
    agent_build_info: Gauge


class AgentMetrics(MetricsEndpoint):
    """Self metrics (contracts.catalog.AGENT_SELF_METRICS) and the sample exporter, on one registry."""

    def __init__(self, node: str) -> None:
        super().__init__(CollectorRegistry(auto_describe=True))
        self.samples = SampleExporter(node)
        self.registry.register(self.samples)
        self.m = declare(AgentSelfSeries, AGENT_SELF_METRICS, self.registry)

    # ------------------------------------------------------------ what the agent reports

    def started(self, version: str) -> None:
        self.m.agent_build_info.labels(version).set(1)

    def collector_ran(self, collector: str, ok: bool, seconds: float, rows: int) -> None:
        self.m.collector_success.labels(collector).set(1 if ok else 0)
        self.m.collector_duration_seconds.labels(collector).set(seconds)
        self.m.collector_rows.labels(collector).set(rows)

    def delivered(self, entries, replayed: int, now_s: float) -> None:
        for e in entries:
            self.m.agent_batches_sent.labels(_kind(e.topic)).inc()
        if replayed:
            self.m.agent_spool_replayed_batches.inc(replayed)
        self.m.agent_last_send_timestamp_seconds.set(now_s)

    def failed(self, entries) -> None:
        for e in entries:
            self.m.agent_send_errors.labels(_kind(e.topic)).inc()

    def spool(self, stats, dropped_since_last: int) -> None:
        self.m.agent_spool_bytes.set(stats.bytes)
        self.m.agent_spool_batches.set(stats.batches)
        if dropped_since_last:
            self.m.agent_spool_dropped_batches.inc(dropped_since_last)

    def steps_rejected(self, n: int) -> None:
        if n:
            self.m.agent_step_events_rejected.inc(n)


def _kind(topic: str) -> str:
    return topic.rsplit(".", 1)[-1]
