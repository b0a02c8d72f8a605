"""The loader service's embedded analyzer schedule (pipeline/loader_service.py): a whole run every
analyze_every_s and a live run every live_every_s between them; a store failure in either is counted
against its operation and loading goes on; no live runs where the whole runs are off."""

from __future__ import annotations

from contracts import config
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.loader_service import LoaderService
from pipeline.store import StoreError
from transport.kafka import KafkaSettings


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_live_runs_go_between_whole_runs_and_a_failure_is_counted(tmp_path):
    cfg = config.parse({"loader": {"analyze_every_s": 10.0, "live_every_s": 2.0, "metrics_address": ""}})
    clock, calls = Clock(), []

    def whole() -> None:
        calls.append(("whole", clock.t))

    def live() -> None:
        calls.append(("live", clock.t))
        if clock.t == 4:
            raise StoreError("chDB statement failed [DELETE FROM goodput_live]: test outage")

    with ChdbStore(tmp_path / "store") as store:
        ddl.migrate(store)
        service = LoaderService(
            cfg, store, KafkaSettings.from_config("127.0.0.1:9"), clock=clock, analyze=whole, live=live
        )
        for t in range(13):
            clock.t = float(t)
            service._maybe_analyze()
        registry = service.metrics.registry
        errors = registry.get_sample_value("goodput_loader_store_errors_total", {"operation": "live"})
        live_ok = registry.get_sample_value("goodput_loader_live_analysis_last_success_timestamp_seconds")
        whole_ok = registry.get_sample_value("goodput_loader_analyzer_last_success_timestamp_seconds")
        service.metrics.close()
    # the whole run at 10 s takes that turn; the failed live run at 4 s is retried on schedule
    assert calls == [("live", 2), ("live", 4), ("live", 6), ("live", 8), ("whole", 10), ("live", 11)]
    assert errors == 1 and live_ok and live_ok > 0 and whole_ok and whole_ok > 0


def test_no_live_runs_where_the_whole_runs_are_off(tmp_path):
    """`--analyze-every 0` overrides the config's analyze_every_s: then live_every_s schedules nothing
    (a live run carries the whole runs' numbers)."""
    cfg = config.parse({"loader": {"analyze_every_s": 10.0, "live_every_s": 2.0, "metrics_address": ""}})
    clock, calls = Clock(), []
    with ChdbStore(tmp_path / "store") as store:
        ddl.migrate(store)
        service = LoaderService(
            cfg,
            store,
            KafkaSettings.from_config("127.0.0.1:9"),
            clock=clock,
            analyze=lambda: calls.append("whole"),
            analyze_every_s=0,
            live=lambda: calls.append("live"),
        )
        for t in range(30):
            clock.t = float(t)
            service._maybe_analyze()
        service.metrics.close()
    assert calls == []
