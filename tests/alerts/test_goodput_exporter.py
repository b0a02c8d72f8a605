"""The goodput exporter: what it serves from analyzer output, its job cap, and a real scrape that
prometheus_client's parser and `promtool check metrics` accept, in-process and as `goodput exporter`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

import msgspec
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contracts import catalog
from contracts import config as config_mod
from pipeline.goodput_exporter import ExporterEndpoint, GoodputExporter, select_jobs
from pipeline.store import StoreError
from tests.alerts.conftest import CHECKPOINTING, HEALTHY, STALLED, STRAGGLER_NODE, T0, WINDOW_S, WINDOWS


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def serve(store, **exporter) -> tuple[ExporterEndpoint, str]:
    cfg = config_mod.load()
    cfg = msgspec.structs.replace(cfg, exporter=msgspec.structs.replace(cfg.exporter, **exporter))
    exp = GoodputExporter(cfg)
    assert exp.refresh(store)
    endpoint = ExporterEndpoint(exp)
    port = endpoint.serve("127.0.0.1", 0)[1]
    return endpoint, scrape(port)


def test_scrape_carries_the_analyzer_results(alert_store):
    endpoint, text = serve(alert_store)
    endpoint.close()
    got = samples(text)
    assert got[("goodput_analysed_until_timestamp_seconds", ())] == T0 + WINDOWS * WINDOW_S
    stall = dict(category="data_stall", job_id=STALLED, pool="core", team="llm-pretrain")
    assert got[("goodput_job_gpu_seconds", tuple(sorted(stall.items())))] == 300.0 * WINDOWS
    ckpt = dict(category="checkpoint", job_id=CHECKPOINTING, pool="core", team="vision")
    assert got[("goodput_job_last_window_ratio", tuple(sorted(ckpt.items())))] == 1.0
    assert got[("goodput_straggler_windows", (("node", STRAGGLER_NODE),))] == 3
    assert got[("goodput_faults", (("kind", "xid_hw"),))] == 1
    assert got[("goodput_faults", (("kind", "oom"),))] == 0
    assert got[("goodput_gang_wait_max_seconds", (("pool", "core"),))] == 1500  # still waiting at the end
    assert got[("goodput_queue_wait_p90_seconds", (("pool", "core"),))] == 660
    assert got[("goodput_queued_jobs", (("pool", "core"),))] == 1
    # the live runs' last 600 s ([loader].live_window_s): the stalled job's 4 windows, not the older one
    assert got[("goodput_live_until_timestamp_seconds", ())] == T0 + (WINDOWS + 2) * WINDOW_S
    live = {
        (dict(labels)["category"], dict(labels)["team"]): v
        for (n, labels), v in got.items()
        if n == "goodput_live_gpu_seconds"
    }
    assert live == {("data_stall", "llm-pretrain"): 1200, ("productive", "llm-pretrain"): 720}
    names = {n for n, _ in got}
    declared = {n.removesuffix("_total") for n in catalog.GOODPUT_METRICS}
    assert {n.removesuffix("_total") for n in names} <= declared


def test_job_series_are_capped(alert_store):
    """top_jobs=1: the most waste (the checkpointing job); then running jobs by waste up to max_jobs=2."""
    endpoint, text = serve(alert_store, top_jobs=1, max_jobs=2)
    endpoint.close()
    got = samples(text)
    jobs = {dict(labels)["job_id"] for n, labels in got if n == "goodput_job_gpu_seconds"}
    assert jobs == {CHECKPOINTING, STALLED}
    assert got[("goodput_exporter_jobs", (("exported", "false"),))] == 6
    assert HEALTHY not in {dict(labels).get("job_id") for n, labels in got}


class FailingStore:
    """A store that is down: every read fails as the real ones report it."""

    def query_arrow(self, sql, params=None):
        raise StoreError("SELECT ...: Connection refused")


def test_a_failed_refresh_keeps_the_previous_values_and_counts(alert_store):
    exp = GoodputExporter(config_mod.load())
    assert exp.refresh(alert_store)
    assert not exp.refresh(FailingStore())
    registry = CollectorRegistry()
    registry.register(exp)
    got = samples(generate_latest(registry).decode())
    assert got[("goodput_exporter_refresh_errors_total", ())] == 1
    assert got[("goodput_analysed_until_timestamp_seconds", ())] == T0 + WINDOWS * WINDOW_S


def test_select_jobs_fills_with_running_jobs_by_waste():
    jobs = [
        dict(job_id="a", waste=10.0, last_start=0),
        dict(job_id="b", waste=5.0, last_start=60),
        dict(job_id="c", waste=7.0, last_start=60),
        dict(job_id="d", waste=1.0, last_start=60),
    ]
    assert select_jobs(jobs, 60, top=1, most=3) == ["a", "c", "b"]
    assert select_jobs(jobs, 60, top=0, most=1) == ["c"]


def test_promtool_accepts_a_real_scrape(alert_store):
    endpoint, text = serve(alert_store)
    endpoint.close()
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "" and p.stderr.strip() == ""


FILL = """
import sys
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from tests.alerts.conftest import fill
with ChdbStore(sys.argv[1]) as s:
    ddl.migrate(s)
    fill(s)
"""


def test_goodput_exporter_command_serves_the_store(tmp_path):
    """`goodput exporter --store DIR` in its own process (chDB: one process per directory)."""
    env = dict(os.environ, GOODPUT_EXPORTER_METRICS_ADDRESS="127.0.0.1:0", PYTHONPATH=os.getcwd())
    subprocess.run([sys.executable, "-c", FILL, str(tmp_path / "s")], check=True, env=env, timeout=300)
    proc = subprocess.Popen(
        [sys.executable, "-m", "goodput.cli", "exporter", "--store", str(tmp_path / "s")],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "goodput exporter: metrics on http://127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        got = samples(scrape(port))
        assert got[("goodput_analysed_until_timestamp_seconds", ())] == T0 + WINDOWS * WINDOW_S
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_goodput_exporter_refuses_an_empty_address(tmp_path):
    (tmp_path / "c.toml").write_text('schema_version = 1\n[exporter]\nmetrics_address = ""\n')
    p = subprocess.run(
        [sys.executable, "-m", "goodput.cli", "exporter", "--config", str(tmp_path / "c.toml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "[exporter] metrics_address is empty" in p.stderr
