"""`goodput ingest` as an operator meets it: what it says without Kafka configured, how it behaves
while the brokers cannot be reached, and a backfill that runs the analyzers in the same process."""

from __future__ import annotations

import subprocess
import time

import pytest

from pipeline.chdb_store import ChdbStore
from tests.fixtures.ports import free_port
from tests.loader.helpers import (
    GOODPUT,
    ROOT,
    LoaderProcess,
    Producer,
    good_stream,
    new_topics,
    write_config,
)


def test_without_kafka_configured_it_says_what_to_set(tmp_path):
    p = subprocess.run(
        [GOODPUT, "ingest", "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 2
    assert (
        '[transport] kind = "kafka"' in p.stderr and "--from FILE" in p.stderr and "Traceback" not in p.stderr
    )


def test_unreachable_brokers_are_retried_with_a_log_naming_them_until_sigterm(tmp_path):
    port = free_port()  # nothing listens there
    config = write_config(
        tmp_path / "goodput.toml",
        f"127.0.0.1:{port}",
        "nowhere",
        tmp_path / "store",
        kafka={"bootstrap_timeout_ms": 500},
    )
    loader = LoaderProcess(config)
    try:
        deadline = time.monotonic() + 60
        while loader.log().count("could not connect to Kafka") < 2:
            assert loader.proc.poll() is None, loader.log()[-3000:]
            assert time.monotonic() < deadline, loader.log()[-3000:]
            time.sleep(0.3)
        started = time.monotonic()
        assert loader.terminate() == 0, loader.log()[-3000:]
        assert time.monotonic() - started < 15, "SIGTERM during the backoff must not wait it out"
    finally:
        loader.kill()
    text = loader.log()
    assert f"127.0.0.1:{port}" in text and "up and reachable" in text and "retrying in" in text
    assert "Traceback" not in text


@pytest.mark.kafka
def test_backfill_until_caught_up_runs_the_analyzers_in_the_loader_process(kafka_broker, tmp_path):
    prefix = new_topics(kafka_broker.bootstrap, partitions=1)
    config = write_config(tmp_path / "goodput.toml", kafka_broker.bootstrap, prefix, tmp_path / "store")
    producer = Producer(kafka_broker.bootstrap, prefix)
    producer.send_all(good_stream(range(0, 3)))
    producer.close()
    loader = LoaderProcess(config, "--until-caught-up", "--analyze-every", "3600", "--progress")
    assert loader.wait() == 0, loader.log()[-3000:]
    text = loader.log()
    assert "analyzers: goodput.sql" in text, "the analyzers ran at the end of the backfill"
    assert "ingest: done in" in text and "rows/s" in text, "the progress bar reports rates"
    with ChdbStore(tmp_path / "store") as store:
        windows = store.query_arrow("SELECT count() AS n FROM goodput_windows").column("n")[0].as_py()
    assert windows > 0, "the allocated GPUs were classified"
