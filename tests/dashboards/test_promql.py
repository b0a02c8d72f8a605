"""Every PromQL expression of the built dashboards parses (`promtool check rules`, the expressions as
recording rules) and returns series from a real Prometheus that scraped the real exporters: the agent
process on fixture trees with the fake NVML, the loader service (`goodput ingest`) storing what that
agent sent through the real broker, and the goodput exporter on a filled store. Prometheus scrapes them
with the example scrape config (alerts/build.py: its job names and relabelling), so a panel is checked
against the labels a deployment really has.

Variables are expanded as Grafana's Prometheus datasource does for a concrete selection. The fixture
produces the conditions the panels exist for, rather than exempting them: a failing collector (its
source file removed) and a dead letter (a malformed message on the agent's topic). Each label a legend
names must be on every series; `node` must name the GPU node, not the host of a scrape target.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from alerts import build as alerts_build
from alerts.rules import JOBS
from contracts import config as config_mod
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.goodput_exporter import ExporterEndpoint, GoodputExporter
from tests.agents.harness import NODE, FixtureNode
from tests.alerts.conftest import STRAGGLER_NODE, fill
from tests.dashboards.grafana import replace_variables
from tests.fixtures.ports import free_ports
from tests.fixtures.prometheus import PrometheusServer
from tests.loader.corpus import message
from tests.loader.helpers import LoaderProcess, Producer, metric_sum, scrape

pytestmark = pytest.mark.kafka

PROMTOOL = "/usr/bin/promtool"
BUILT = Path(__file__).resolve().parents[2] / "dashboards" / "json" / "dashboards"
SCRAPE_INTERVAL_S = 1
DEADLINE_S = 60.0
BAD_MESSAGE = "not-json"
"""A bad-input corpus case (tests/loader/bad_input/) sent on the agent's gpu topic: one dead letter."""
FAILING_COLLECTOR = "diskstats"
"""Its source file is removed once the agent runs: `goodput_collector_success` 0."""
SELECTION: dict[str, str | list[str]] = {"node": NODE}
"""The variables' values: the fixture agent's node (in the config's pool, so the node variable lists it)."""
LABEL_VALUES = {"node": {NODE}}
"""A legend's `node` is the GPU node a series is about, never the host a scrape target runs on."""


@dataclass(frozen=True)
class PromTarget:
    dashboard: str
    panel: str
    expr: str
    legend: str

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel}: {self.expr}"


def _panels(panels: list[dict]):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def _is_prometheus(datasource: object) -> bool:
    return isinstance(datasource, dict) and datasource.get("type") == "prometheus"


def prometheus_targets() -> list[PromTarget]:
    """Every target of a panel on the Prometheus datasource, in the committed build (test_build checks
    it is the code's)."""
    out = []
    for path in sorted(BUILT.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in _panels(board["panels"]):
            for t in panel.get("targets", []):
                if _is_prometheus(t.get("datasource") or panel.get("datasource")):
                    out.append(PromTarget(path.stem, panel["title"], t["expr"], t.get("legendFormat", "")))
    return out


def prometheus_variables() -> list[tuple[str, str]]:
    """(dashboard, variable) for every query variable on the Prometheus datasource."""
    return [
        (path.stem, v["name"])
        for path in sorted(BUILT.glob("*.json"))
        for v in json.loads(path.read_text())["templating"]["list"]
        if v["type"] == "query" and _is_prometheus(v.get("datasource"))
    ]


def _regex_escape(value: str) -> str:
    """prometheusSpecialRegexEscape (public/app/plugins/datasource/prometheus/datasource.ts)."""
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m[0], value.replace("\\", "\\\\\\\\"))


def prometheus_value(value: str | list[str], multi: bool) -> str:
    """interpolateQueryExpr: a single-valued variable is only escaped for the string literal; a
    multi-valued one (used in `=~`) becomes an alternation of regex-escaped values."""
    if not multi:
        assert isinstance(value, str)
        return value.replace("\\", "\\\\").replace("'", "\\\\'")
    values = [value] if isinstance(value, str) else value
    escaped = [_regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _multi(dashboard: str) -> dict[str, bool]:
    board = json.loads((BUILT / f"{dashboard}.json").read_text())
    return {v["name"]: bool(v.get("multi") or v.get("includeAll")) for v in board["templating"]["list"]}


BUILTINS = {"__interval": "15s", "__rate_interval": "1m", "__range": "3600s", "__range_s": "3600"}
"""Grafana's built-in variables for a 1 h range at 1000 points on a 15 s scrape ($__rate_interval is
max($__interval + scrape interval, 4 x scrape interval))."""


def expand(target: PromTarget) -> str:
    multi = _multi(target.dashboard)
    values = {n: prometheus_value(v, multi[n]) for n, v in SELECTION.items() if n in multi}
    expr = replace_variables(target.expr, {**values, **BUILTINS})
    assert "$" not in expr and "[[" not in expr, f"a variable left unexpanded in {target.where} -> {expr}"
    return expr


def test_the_dashboards_have_prometheus_panels_and_no_prometheus_variables():
    """The panels are what this module checks; a Prometheus query variable (`label_values(...)`)
    would need its own emulation here."""
    with_expr = [
        t["expr"]
        for path in sorted(BUILT.glob("*.json"))
        for panel in _panels(json.loads(path.read_text())["panels"])
        for t in panel.get("targets", [])
        if "expr" in t
    ]
    assert len(prometheus_targets()) == len(with_expr) >= 6, "a PromQL target the collector missed"
    assert prometheus_variables() == []


def test_variables_expand_as_grafana_does():
    assert prometheus_value("gpu-t-001", multi=False) == "gpu-t-001"
    assert prometheus_value(["gpu-1.a", "gpu-2"], multi=True) == "(gpu-1\\\\.a|gpu-2)"
    t = PromTarget("node", "p", 'x{Hostname="$node"}[$__rate_interval]', "")
    assert expand(t) == 'x{Hostname="gpu-t-001"}[1m]'


def check_rules(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [{"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_promtool_parses_every_expression(tmp_path):
    targets = prometheus_targets()
    run = check_rules([expand(t) for t in targets], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(targets)} rules found" in run.stdout


def test_promtool_rejects_a_broken_expression(tmp_path):
    run = check_rules(["sum by (topic) (rate(goodput_loader_dead_letters_total[5m])"], tmp_path)
    assert run.returncode != 0 and "parse error" in run.stdout + run.stderr


@pytest.fixture(scope="module")
def prometheus(kafka_broker, tmp_path_factory):
    """The agent, the loader and the exporter running, scraped every second by a real Prometheus."""
    tmp = tmp_path_factory.mktemp("promql")
    loader_port, prom_port = free_ports(2)
    node = FixtureNode(
        tmp,
        kafka_broker.bootstrap,
        extra_tables=(
            f'[loader]\nmetrics_address = "127.0.0.1:{loader_port}"\nflush_interval_s = 0.3\n'
            f'retry_backoff_max_s = 1.0\n[store]\npath = "{tmp / "store"}"\n'
        ),
    )
    producer = Producer(kafka_broker.bootstrap, node.prefix)
    producer.send_all([("gpu", "gpu-006", message(BAD_MESSAGE, int(time.time() * 1000)))])
    producer.close()
    exporter_store = ChdbStore(tmp / "exporter-store")
    ddl.migrate(exporter_store)
    fill(exporter_store)
    exporter = GoodputExporter(config_mod.load())
    assert exporter.refresh(exporter_store)
    endpoint = ExporterEndpoint(exporter)
    targets = {
        JOBS["agent"]: node.metrics_port,
        JOBS["loader"]: loader_port,
        JOBS["exporter"]: endpoint.serve("127.0.0.1", 0)[1],
    }
    example = alerts_build.scrape_config()["scrape_configs"]
    jobs = []
    for job in example:
        if job["job_name"] in targets:  # the node exporter is not one of ours
            job = {k: v for k, v in job.items() if k != "file_sd_configs"}
            job["static_configs"] = [{"targets": [f"127.0.0.1:{targets[job['job_name']]}"]}]
            jobs.append(job)
    config = {"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s"}, "scrape_configs": jobs}
    prom = PrometheusServer(workdir=tmp / "prom", port=prom_port, config=yaml.safe_dump(config))
    loader = None
    try:
        node.start()
        (node.root / "node" / "proc" / FAILING_COLLECTOR).unlink()
        loader = LoaderProcess(node.config, log=tmp / "loader.log")
        prom.start()

        def dead_letters() -> float:
            try:
                return metric_sum(scrape(loader_port), "goodput_loader_dead_letters_total")
            except OSError:  # not listening yet
                return 0.0

        node.wait_for(lambda: dead_letters() >= 1, DEADLINE_S, "the loader to dead-letter the bad message")
        yield prom, node
    finally:
        prom.stop()
        if node.proc is not None:
            node.stop(signal.SIGKILL)
        if loader is not None:
            loader.kill()
        endpoint.close()
        exporter_store.close()


def query(prom: PrometheusServer, expr: str) -> list[dict]:
    """The instant vector; a parse or evaluation error fails with Prometheus' message."""
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{expr}: {e.read().decode()}") from e
    assert body["status"] == "success" and body["data"]["resultType"] == "vector", body
    return body["data"]["result"]


def test_every_scrape_target_is_up(prometheus):
    prom, _node = prometheus
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and len(query(prom, "up == 1")) < 3:
        time.sleep(0.5)
    assert sorted(s["metric"]["job"] for s in query(prom, "up == 1")) == sorted(
        [JOBS["agent"], JOBS["exporter"], JOBS["loader"]]
    )


def test_every_expression_returns_series(prometheus):
    prom, node = prometheus
    pending = {t: expand(t) for t in prometheus_targets()}
    results: dict[PromTarget, list[dict]] = {}
    deadline = time.monotonic() + DEADLINE_S
    while pending and time.monotonic() < deadline:
        for t, expr in list(pending.items()):
            if series := query(prom, expr):
                results[t] = series
                del pending[t]
        time.sleep(0.5)
    assert not pending, "no series for:\n" + "\n".join(t.where for t in pending) + "\n" + node.log_tail()
    wrong = []
    for t, series in results.items():
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.legend):
            values = {s["metric"].get(label) for s in series}
            if None in values or not values <= LABEL_VALUES.get(label, values):
                wrong.append(f"{t.where}: legend {{{{{label}}}}} = {sorted(map(str, values))}")
    assert not wrong, "\n".join(wrong)


def test_the_exporters_per_node_series_keep_the_gpu_node(prometheus):
    """The goodput series' straggler windows (served by the exporter, no dashboard panel reads them
    live) keep their own `node` under the example scrape config too."""
    prom, _node = prometheus
    series = query(prom, "goodput_straggler_windows")
    assert {s["metric"]["node"] for s in series} == {STRAGGLER_NODE}, series
