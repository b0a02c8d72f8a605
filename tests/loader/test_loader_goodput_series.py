"""The loader service with embedded analyzers serves the goodput exporter's series on its own /metrics
after each analyzer run (pipeline/loader_service.py), beside its own health series, and then compacts the
closed days; between the whole runs it runs live ones (goodput_live); promtool accepts the whole scrape."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest

from pipeline.chdb_store import ChdbStore
from tests.fixtures.ports import free_port
from tests.loader.helpers import (
    LoaderProcess,
    Producer,
    Scrape,
    good_stream,
    ingest_old_day_in_parts,
    metric_sum,
    new_topics,
    write_config,
)


@pytest.mark.kafka
def test_loader_serves_goodput_series_after_its_analyzers(kafka_broker, tmp_path):
    prefix = new_topics(kafka_broker.bootstrap, partitions=1)
    port = free_port()
    config = write_config(
        tmp_path / "goodput.toml",
        kafka_broker.bootstrap,
        prefix,
        tmp_path / "store",
        metrics_address=f"127.0.0.1:{port}",
        analyze_every_s=1.0,
        live_every_s=0.2,
    )
    old_day = ingest_old_day_in_parts(config, tmp_path)  # compacted after the first analyzer run
    producer = Producer(kafka_broker.bootstrap, prefix)
    producer.send_all(good_stream(range(0, 3)))
    producer.close()
    loader = LoaderProcess(config)
    try:
        deadline = time.monotonic() + 120
        scrape: dict = {}
        while "goodput_analysed_until_timestamp_seconds" not in scrape:
            assert loader.proc.poll() is None, loader.log()[-3000:]
            assert time.monotonic() < deadline, loader.log()[-3000:]
            time.sleep(0.5)
            try:
                scrape = Scrape(port)
            except OSError:
                continue
        assert scrape["goodput_gpu_seconds"], "GPU time by pool, team and category"
        assert "goodput_loader_analyzer_last_success_timestamp_seconds" in scrape
        while "goodput_loader_live_analysis_last_success_timestamp_seconds" not in scrape:
            assert time.monotonic() < deadline, loader.log()[-3000:]
            time.sleep(0.5)
            scrape = Scrape(port)
        while not metric_sum(scrape, "goodput_loader_compacted_partitions_total", table="gpu_rollup_10s"):
            assert time.monotonic() < deadline, loader.log()[-3000:]
            time.sleep(0.5)
            scrape = Scrape(port)
        assert f"compacted gpu_rollup_10s day {old_day}: 2 parts into one" in loader.log()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        assert loader.terminate() == 0, loader.log()[-3000:]
    finally:
        loader.kill()
    assert "live analysis failed" not in loader.log()
    store = ChdbStore(tmp_path / "store")
    try:  # the live runs wrote the last minutes' windows, as the whole runs wrote theirs
        live = store.query_arrow("SELECT count() AS n, sum(gpu_seconds) AS s FROM goodput_live").to_pylist()[
            0
        ]
    finally:
        store.close()
    assert live["n"] > 0 and live["s"] > 0
