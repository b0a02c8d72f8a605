"""End to end through the real parts: the goodput exporter serves a store where one job's data stall
dominates and another job, stalled as much, is in its checkpoint; a real Prometheus scrapes it on
loopback and evaluates the generated rules (every `for:` shortened); a real Alertmanager with the
generated routing delivers to a webhook receiver in this test. Asserted: the stalled job's page reaches
its team with runbook and dashboard links, and the checkpointing job's page is inhibited, not sent."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from alerts import alertmanager, build
from alerts.rules import JOBS
from contracts import config as config_mod
from pipeline.goodput_exporter import ExporterEndpoint, GoodputExporter
from tests.alerts.conftest import CHECKPOINTING, STALLED
from tests.fixtures.ports import free_ports
from tests.fixtures.prometheus import AlertmanagerServer, PrometheusServer

DEADLINE_S = 90.0


class Receiver:
    """A webhook receiver: every POST body (Alertmanager's JSON), by path (= the receiver's name)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict]] = []
        received = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path.strip("/"), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, receiver: str, alertname: str) -> list[dict]:
        return [
            a
            for r, body in list(self.got)
            if r == receiver
            for a in body["alerts"]
            if a["labels"]["alertname"] == alertname and a["status"] == "firing"
        ]


def get(url: str):
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


@pytest.fixture
def pipeline(alert_store, tmp_path):
    exporter = GoodputExporter(config_mod.load())
    assert exporter.refresh(alert_store)
    endpoint = ExporterEndpoint(exporter)
    exporter_port = endpoint.serve("127.0.0.1", 0)[1]
    receiver = Receiver()
    teams = tuple(sorted(config_mod.load().teams.accounts))
    urls = {r: f"http://127.0.0.1:{receiver.port}/{r}" for r in alertmanager.receivers(teams)}
    prom_port, am_port = free_ports(2)
    am_config = alertmanager.config(teams, urls, group_wait="1s", group_interval="1s", repeat_interval="1h")
    am = AlertmanagerServer(workdir=tmp_path / "am", port=am_port, config=yaml.safe_dump(am_config))
    (tmp_path / "prom").mkdir()
    (tmp_path / "prom" / "rules.yml").write_text(yaml.safe_dump(build.rules(for_override="2s")))
    (shipped,) = (j for j in build.scrape_config()["scrape_configs"] if j["job_name"] == JOBS["exporter"])
    prom_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "prom" / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [
            {  # the shipped exporter job (honor_labels, the node relabelling), on a static target
                **{k: v for k, v in shipped.items() if k != "file_sd_configs"},
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
            }
        ],
    }
    prom = PrometheusServer(workdir=tmp_path / "prom", port=prom_port, config=yaml.safe_dump(prom_config))
    am.start()
    prom.start()
    try:
        yield receiver, prom, am
    finally:
        prom.stop()
        am.stop()
        receiver.server.shutdown()
        endpoint.close()


def test_data_stall_pages_the_team_and_checkpoint_inhibits(pipeline):
    receiver, prom, am = pipeline
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not receiver.alerts("team-llm-pretrain", "GoodputJobDataStall"):
        time.sleep(0.5)
    pages = receiver.alerts("team-llm-pretrain", "GoodputJobDataStall")
    assert pages, f"no page delivered; got {receiver.got!r}\n{prom.log_tail()}\n{am.log_tail()}"
    page = pages[0]
    assert page["labels"]["job_id"] == STALLED
    assert page["labels"]["severity"] == "page" and page["labels"]["team"] == "llm-pretrain"
    assert page["labels"]["category"] == "data_stall"
    ann = page["annotations"]
    assert ann["runbook_url"] == build.RUNBOOK_BASE + "#goodputjobdatastall"
    assert ann["dashboard"] == f"{build.GRAFANA_URL}/d/goodput-job/job-drill-down?var-job={STALLED}"
    assert STALLED in ann["summary"] and f"goodput explain {STALLED}" in ann["description"]

    # the checkpointing job's stall alert fires in Prometheus, and Alertmanager holds it back
    firing = get(f"{prom.url}/api/v1/alerts")["data"]["alerts"]
    assert any(
        a["labels"]["alertname"] == "GoodputJobDataStall"
        and a["labels"]["job_id"] == CHECKPOINTING
        and a["state"] == "firing"
        for a in firing
    ), firing
    while time.monotonic() < deadline:
        held = [
            a
            for a in get(f"{am.url}/api/v2/alerts")
            if a["labels"]["alertname"] == "GoodputJobDataStall" and a["labels"]["job_id"] == CHECKPOINTING
        ]
        if held and held[0]["status"]["state"] == "suppressed":
            break
        time.sleep(0.5)
    assert held and held[0]["status"]["state"] == "suppressed", held
    assert held[0]["status"]["inhibitedBy"], held
    time.sleep(2)  # a group_interval more: nothing about the checkpointing job may have been sent
    sent = [
        a for _, body in receiver.got for a in body["alerts"] if a["labels"].get("job_id") == CHECKPOINTING
    ]
    assert all(a["labels"]["alertname"] != "GoodputJobDataStall" for a in sent), sent
    # and the inhibition source itself went to the receiver that sends nothing
    assert not receiver.alerts("team-vision", "GoodputJobInStartupOrCheckpoint")
