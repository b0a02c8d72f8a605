"""The node agent: collectors on their intervals → one envelope per kind per tick → spool → Kafka.

One thread collects (this module), one sends (agents/sender.py), one serves /metrics
(prometheus_client). Collection never waits for Kafka: each tick's batches are appended to the
write-ahead spool and the sender is woken. A collector that raises is reported
(`goodput_collector_success{collector=...} 0`, one log line when it starts and one when it recovers)
and the others carry on.

Ticks of a kind are aligned to multiples of its interval in wall-clock time, so every node samples at
the same instants and per-second rows from different nodes join on `ts_ms`; a tick that falls behind
(a slow NFS mount, a stopped VM) skips ahead instead of bursting to catch up.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from agents.metrics import AgentMetrics
from agents.sender import KafkaProducerLike, SpoolSender
from agents.seqstate import SeqState
from agents.spool import Spool
from collectors.base import Collector, Row
from contracts.config import AgentConfig, parse_address
from contracts.envelope import encode_batch, envelope_keys
from contracts.schema import KINDS, topic_for

log = logging.getLogger(__name__)


def agent_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"goodput-agent/{version('goodput')}"
    except PackageNotFoundError:
        return "goodput-agent/unknown"


def columns(kind: str, rows: list[Row]) -> dict[str, list]:
    """Rows (dicts) to the envelope's column arrays, in schema order; a field no row has is left out,
    one some rows lack is null there (absent, never zero)."""
    present = set().union(*rows) if rows else set()
    return {f.name: [r.get(f.name) for r in rows] for f in KINDS[kind].fields if f.name in present}


@dataclass
class _Running:
    """A collector and what the agent remembers about it between ticks."""

    collector: Collector
    failing: str | None = None


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        *,
        cluster: str,
        topic_prefix: str,
        collectors: list[Collector],
        make_producer: Callable[[], KafkaProducerLike],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.topic_prefix = topic_prefix
        self.clock = clock
        self.version = agent_version()
        self.metrics = AgentMetrics(cfg.node)
        self.metrics.started(self.version)
        self.by_kind: dict[str, list[_Running]] = {}
        for c in collectors:
            self.by_kind.setdefault(c.kind, []).append(_Running(c))
        self.spool = Spool(
            cfg.spool_dir,
            max_bytes=cfg.spool_max_bytes,
            segment_bytes=min(cfg.spool_segment_bytes, cfg.spool_max_bytes),
            fsync=cfg.spool_fsync,
        )
        self.seqs = SeqState(cfg.seq_path, cfg.node)
        self._raise_seqs_from_spool()
        self.sender = SpoolSender(
            self.spool, make_producer, self.metrics, window=cfg.send_window, clock=clock
        )
        self._dropped_seen = 0
        self.metrics_address: tuple[str, int] | None = None

    def _raise_seqs_from_spool(self) -> None:
        highest: dict[str, int] = {}
        for e in self.spool.replay():
            env = envelope_keys(e.value)  # either message version: the spool may hold both
            if env is None:
                continue
            if env.get("node") == self.cfg.node and env.get("kind") in KINDS:
                highest[env["kind"]] = max(highest.get(env["kind"], -1), int(env.get("seq", -1)))
        for kind, seq in highest.items():
            self.seqs.floor(kind, seq + 1)

    # ---------------------------------------------------------------- one tick

    def tick(self, kind: str, now_ms: int) -> int:
        """Runs every collector of `kind` once and spools one batch of their rows; returns the row count."""
        rows: list[Row] = []
        for run in list(self.by_kind.get(kind, ())):
            rows.extend(self._collect(run, kind, now_ms))
        if not rows:
            return 0  # nothing measured (job and step events are sparse): no empty batch, no seq used
        seq = self.seqs.reserve(kind)
        value = encode_batch(
            kind=kind,
            cluster=self.cluster,
            node=self.cfg.node,
            seq=seq,
            sent_ms=int(self.clock() * 1000),
            columns=columns(kind, rows),
            agent=self.version,
            version=self.cfg.message_version,
        )
        self.spool.append(topic_for(kind, self.topic_prefix), self.cfg.node.encode(), value)
        return len(rows)

    def _collect(self, run: _Running, kind: str, now_ms: int) -> list[Row]:
        c = run.collector
        start = time.perf_counter()
        try:
            rows = c.collect(now_ms)
            unknown = sorted(set().union(*rows) - {f.name for f in KINDS[kind].fields}) if rows else []
            if unknown:
                raise ValueError(f"rows carry fields not in the schema: {', '.join(unknown)}")
        except Exception as e:  # one broken source must never stop the others; a source that went
            # away (CollectorUnavailable mid-run: a driver reload) is retried every tick like any failure
            why = f"{type(e).__name__}: {e}"
            if run.failing != why:
                log.error("collector %s failed: %s", c.name, why, extra={"collector": c.name})
            run.failing = why
            self.metrics.samples.forget(c.name)
            self.metrics.collector_ran(c.name, False, time.perf_counter() - start, 0)
            return []
        if run.failing:
            log.info("collector %s recovered", c.name, extra={"collector": c.name})
            run.failing = None
        for problem in getattr(c, "skipped", None) or ():
            log.debug("collector %s skipped %s", c.name, problem, extra={"collector": c.name})
        rejected = getattr(c, "rejected", None) or []
        if rejected and kind == "step":
            self.metrics.steps_rejected(len(rejected))
            log.warning(
                "step receiver rejected %d datagrams, first: %s",
                len(rejected),
                rejected[0]["reason"],
                extra={"collector": c.name},
            )
        self.metrics.collector_ran(c.name, True, time.perf_counter() - start, len(rows))
        self.metrics.samples.update(c.name, kind, rows)
        return rows

    def _report_spool(self) -> None:
        stats = self.spool.stats
        self.metrics.spool(stats, stats.dropped - self._dropped_seen)
        self._dropped_seen = stats.dropped

    # ---------------------------------------------------------------- the loop

    def run(self, stop: threading.Event) -> None:
        """Collects until `stop` is set, then sends what it can within shutdown_timeout_s."""
        if self.cfg.metrics_address:
            host, port = parse_address(self.cfg.metrics_address, "[agent].metrics_address")
            self.metrics_address = self.metrics.serve(host, port)
        kinds = [k for k in KINDS if self.by_kind.get(k)]
        log.info(
            "agent %s started on %s: %s; metrics on %s",
            self.version,
            self.cfg.node,
            ", ".join(
                f"{k} every {self.cfg.interval_s(k):g}s "
                f"({', '.join(r.collector.name for r in self.by_kind[k])})"
                for k in kinds
            )
            or "no collectors",
            "%s:%d" % self.metrics_address if self.metrics_address else "off",
        )
        self.sender.start()
        due = {k: self._next_aligned(k, self.clock()) for k in kinds}
        try:
            while not stop.is_set():
                now = self.clock()
                ticked = False
                for kind in kinds:
                    if now >= due[kind]:
                        ticked |= self.tick(kind, int(due[kind] * 1000)) > 0
                        due[kind] = self._next_aligned(kind, max(due[kind], self.clock()))
                if ticked:
                    self.sender.wake()  # once per tick, not per batch: one produce round for all kinds
                self._report_spool()
                if not due:
                    stop.wait(1.0)
                    continue
                stop.wait(max(0.0, min(due.values()) - self.clock()))
            if self.by_kind.get("step"):
                # Step events are not resampled like gauges: drain what reporters sent since the last
                # tick, so a stop loses none of them.
                self.tick("step", int(self.clock() * 1000))
        finally:
            self.close()

    def _next_aligned(self, kind: str, after_s: float) -> float:
        step = self.cfg.interval_s(kind)
        return (int(after_s / step) + 1) * step

    def close(self) -> None:
        left = self.spool.stats.batches
        log.info(
            "agent stopping: sending for up to %.0fs (%d batches in the spool)",
            self.cfg.shutdown_timeout_s,
            left,
        )
        self.sender.stop(self.cfg.shutdown_timeout_s)
        self.spool.sync()
        self.seqs.close()
        left = self.spool.stats.batches
        if left:
            log.warning(
                "agent stopped with %d batches in the spool %s; they are sent at the next start",
                left,
                self.cfg.spool_dir,
            )
        self.spool.close()
        for runs in self.by_kind.values():
            for run in runs:
                close = getattr(run.collector, "close", None)
                if close:
                    close()
        self.metrics.close()
