"""Every inhibition rule of the generated Alertmanager config, in a real Alertmanager: alerts posted to
its API as Prometheus would, then its own verdict (suppressed or active) read back. Each rule has a case
it silences and one it must not (another node, another job, a non-page)."""

from __future__ import annotations

import datetime
import json
import time
import urllib.request

import pytest
import yaml

from alerts import alertmanager
from tests.fixtures.ports import free_ports
from tests.fixtures.prometheus import AlertmanagerServer

# (case, source alert labels, target alert labels, suppressed?)
CASES = [
    (
        "node down: its GPU",
        dict(alertname="GoodputNodeDown", severity="page", subsystem="node", node="a1"),
        dict(alertname="GoodputGpuXidHardware", severity="page", subsystem="gpu", node="a1", gpu="0"),
        True,
    ),
    (
        "node down: another node's NIC",
        dict(alertname="GoodputNodeDown", severity="page", subsystem="node", node="a2"),
        dict(alertname="GoodputNicLinkDown", severity="page", subsystem="nic", node="b2"),
        False,
    ),
    (
        "maintenance: any alert of the node",
        dict(alertname="GoodputNodeInMaintenance", severity="none", subsystem="node", node="a3"),
        dict(alertname="GoodputStorageSaturated", severity="ticket", subsystem="storage", node="a3"),
        True,
    ),
    (
        "maintenance: not another node",
        dict(alertname="GoodputNodeInMaintenance", severity="none", subsystem="node", node="a4"),
        dict(alertname="GoodputGpuThermalThrottle", severity="ticket", subsystem="gpu", node="b4"),
        False,
    ),
    (
        "checkpoint: the job's page",
        dict(
            alertname="GoodputJobInStartupOrCheckpoint",
            severity="none",
            scope="job",
            job_id="j5",
            category="checkpoint",
        ),
        dict(alertname="GoodputJobCommStall", severity="page", scope="job", job_id="j5"),
        True,
    ),
    (
        "checkpoint: not its ticket",
        dict(
            alertname="GoodputJobInStartupOrCheckpoint",
            severity="none",
            scope="job",
            job_id="j6",
            category="startup",
        ),
        dict(alertname="GoodputJobLow", severity="ticket", scope="job", job_id="j6"),
        False,
    ),
]
STORAGE = (
    dict(alertname="GoodputClusterStorageSaturated", severity="page", subsystem="storage"),
    dict(alertname="GoodputJobDataStall", severity="page", scope="job", job_id="j7"),
    dict(alertname="GoodputJobCommStall", severity="page", scope="job", job_id="j8"),
)


@pytest.fixture(scope="module")
def am(tmp_path_factory):
    teams = ("t",)
    urls = {r: "http://127.0.0.1:9/unused" for r in alertmanager.receivers(teams)}
    cfg = alertmanager.config(teams, urls, group_wait="1h")  # nothing is sent; only the verdicts count
    (port,) = free_ports(1)
    server = AlertmanagerServer(workdir=tmp_path_factory.mktemp("am"), port=port, config=yaml.safe_dump(cfg))
    server.start()
    now = datetime.datetime.now(datetime.UTC).isoformat()
    alerts = [a for _, src, tgt, _ in CASES for a in (src, tgt)] + list(STORAGE)
    body = json.dumps([{"labels": a, "startsAt": now} for a in alerts]).encode()
    req = urllib.request.Request(f"{server.url}/api/v2/alerts", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10)
    yield server
    server.stop()


def state(server, labels: dict) -> str:
    """Alertmanager's verdict on the alert with exactly these labels, once it has decided."""
    deadline = time.monotonic() + 30
    while True:
        got = [
            a["status"]["state"]
            for a in json.loads(urllib.request.urlopen(f"{server.url}/api/v2/alerts", timeout=10).read())
            if a["labels"] == labels
        ]
        if got and got[0] != "unprocessed" or time.monotonic() > deadline:
            return got[0] if got else "missing"
        time.sleep(0.2)


@pytest.mark.parametrize("case,source,target,suppressed", CASES, ids=[c[0] for c in CASES])
def test_inhibition(am, case, source, target, suppressed):
    assert state(am, source) == "active"
    assert state(am, target) == ("suppressed" if suppressed else "active")


def test_cluster_storage_saturation_holds_data_stall_pages_only(am):
    source, data_stall, comm_stall = STORAGE
    assert state(am, source) == "active"
    assert state(am, data_stall) == "suppressed"
    assert state(am, comm_stall) == "active"


def test_every_inhibition_rule_is_exercised():
    sources = {c[1]["alertname"] for c in CASES} | {STORAGE[0]["alertname"]}
    rules = alertmanager.config((), {r: "" for r in alertmanager.CORE_RECEIVERS})["inhibit_rules"]
    assert {r["source_matchers"][0].split('"')[1] for r in rules} == sources
