"""`promtool check metrics` on real scrapes: the agent process on fixture trees with the fake NVML, and
the loader service (`goodput ingest`) storing what that agent sent, through the real broker.

The one finding allowed is promtool's camelCase complaint about the dcgm-exporter label names the agent
keeps so that existing dcgm dashboards work on its GPU series (`modelName`); a counter without
`_total`, a non-base unit, a missing HELP or any other camelCase label fails the test.
"""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts.schema import KINDS
from tests.agents.harness import FixtureNode
from tests.fixtures.ports import free_port
from tests.loader.helpers import LoaderProcess, metric_sum, scrape

pytestmark = pytest.mark.kafka

PROMTOOL = "/usr/bin/promtool"
CAMEL_CASE = "label names should be written in 'snake_case' not 'camelCase'"
_CAMEL = re.compile(r"[a-z][A-Z]")  # promlint's test for a camelCase name
DCGM_LABELS = frozenset({"modelName"})
"""dcgm-exporter's label names that promlint calls camelCase (`UUID` and `Hostname` it does not)."""


def promtool_findings(exposition: str) -> list[tuple[str, str]]:
    """(metric family, problem) for every finding of `promtool check metrics` on one scrape."""
    run = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode in (0, 3), f"promtool could not read the scrape (rc {run.returncode}): {lines}"
    assert (run.returncode == 3) == bool(lines), (run.returncode, lines)
    return [tuple(line.split(" ", 1)) for line in lines]  # type: ignore[misc]


def unexpected(exposition: str) -> list[tuple[str, str]]:
    """The findings that are not the dcgm camelCase labels: a family flagged camelCase must carry a
    camelCase label, and every one it carries must be a dcgm-exporter name."""
    camel: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            camel.setdefault(s.name, set()).update(k for k in s.labels if _CAMEL.search(k))
    return [
        (name, problem)
        for name, problem in promtool_findings(exposition)
        if not (problem == CAMEL_CASE and camel.get(name) and camel[name] <= DCGM_LABELS)
    ]


def test_the_allowed_labels_are_exactly_the_declared_camel_case_labels():
    declared = {f.label for k in KINDS.values() for f in k.fields if f.label and _CAMEL.search(f.label)}
    assert declared == DCGM_LABELS


def test_the_filter_lets_nothing_else_through():
    """The check itself: a camelCase label that is not dcgm's, and a counter without `_total`, are
    reported; the dcgm label alone is not."""
    text = (
        "# HELP a_ratio x\n# TYPE a_ratio gauge\n"
        'a_ratio{modelName="H100"} 1\n'
        "# HELP b_ratio x\n# TYPE b_ratio gauge\n"
        'b_ratio{modelName="H100",jobName="j"} 1\n'
        "# HELP c_bytes x\n# TYPE c_bytes counter\nc_bytes 1\n"
    )
    assert {name for name, _ in unexpected(text)} == {"b_ratio", "c_bytes"}


def test_agent_and_loader_scrapes_pass_promtool_but_for_dcgm_labels(tmp_path, kafka_broker):
    loader_port = free_port()
    node = FixtureNode(
        tmp_path,
        kafka_broker.bootstrap,
        extra_tables=(
            f'[loader]\nmetrics_address = "127.0.0.1:{loader_port}"\nflush_interval_s = 0.3\n'
            f'retry_backoff_max_s = 1.0\n[store]\npath = "{tmp_path / "store"}"\n'
        ),
    )
    loader = None
    try:
        node.start()
        node.wait_for(
            lambda: all(
                node.metric(name) is not None
                for name in (
                    "goodput_nic_transmit_bytes_total",  # counters: from the second tick on
                    "goodput_storage_io_time_seconds_total",
                    "goodput_gpu_clock_event_active",
                    "goodput_gpu_utilization_ratio",
                )
            ),
            30,
            "the agent's counters and derived series",
        )
        loader = LoaderProcess(node.config, log=tmp_path / "loader.log")

        def loaded() -> float:
            try:
                return metric_sum(scrape(loader_port), "goodput_loader_batches_loaded_total")
            except OSError:  # not listening yet
                return 0.0

        node.wait_for(lambda: loaded() >= 3, 90, "the loader to store the agent's batches")
        agent_text = node.scrape()
        with urllib.request.urlopen(f"http://127.0.0.1:{loader_port}/metrics", timeout=10) as r:
            loader_text = r.read().decode()
    finally:
        if node.proc is not None:
            node.stop(signal.SIGKILL)
        if loader is not None:
            loader.kill()

    assert unexpected(agent_text) == []
    flagged = {name for name, _ in promtool_findings(agent_text)}
    families = text_string_to_metric_families(agent_text)
    with_model = {s.name for f in families for s in f.samples if "modelName" in s.labels}
    assert flagged == with_model and "goodput_gpu_utilization_ratio" in flagged, "the GPU series were checked"
    assert "goodput_loader_load_duration_seconds_bucket" in loader_text
    assert promtool_findings(loader_text) == []
