"""The rules and the Alertmanager config: in sync with alerts/, accepted by promtool and amtool, every
alert fires and stays quiet in its own `promtool test rules` case, and every receiver is reached by a
route."""

from __future__ import annotations

import re
import subprocess

import pytest

from alerts import alertmanager, build
from alerts.rules import ALERTS, DECLARED, RECORDING, SEVERITIES
from contracts import config as config_mod

GEN = build.GENERATED


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=GEN, timeout=120)


def test_committed_files_match_the_code():
    """Edit alerts/rules.py and run `python -m alerts.build`; never the YAML."""
    for name, text in build.files().items():
        assert (GEN / name).read_text() == text, f"{name} is stale: run python -m alerts.build"


def test_promtool_checks_the_rules():
    p = run("promtool", "check", "rules", build.RULES_FILE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(ALERTS) + len(RECORDING)} rules found" in p.stdout


def test_every_alert_fires_and_stays_quiet_in_promtool():
    p = run("promtool", "test", "rules", build.TESTS_FILE)
    assert p.returncode == 0, p.stdout + p.stderr
    names = [t["name"] for t in build.unit_tests()["tests"]]
    for a in ALERTS:
        assert f"{a.name} fires" in names
        assert (f"{a.name} stays quiet" in names) == (a.name != "Watchdog")  # the dead-man never stops


def test_promtool_test_catches_a_broken_threshold(tmp_path):
    """The unit tests have teeth: a data-stall threshold of 0.9 makes its `fires` case fail."""
    rules = build.rules()
    for r in rules["groups"][1]["rules"]:
        if r["alert"] == "GoodputJobDataStall":
            r["expr"] = r["expr"].replace("> 0.3", "> 0.9")
    (tmp_path / build.RULES_FILE).write_text(build._dump(rules))
    (tmp_path / build.TESTS_FILE).write_text((GEN / build.TESTS_FILE).read_text())
    p = subprocess.run(
        ["promtool", "test", "rules", build.TESTS_FILE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 1 and "name: GoodputJobDataStall fires" in p.stdout + p.stderr


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_alert_is_complete(alert):
    ann = build.annotations_of(alert, build.GRAFANA_URL, build.RUNBOOK_BASE)
    assert alert.severity in SEVERITIES
    assert ann["runbook_url"].startswith(build.RUNBOOK_BASE + "#")
    assert ann["dashboard"].startswith(build.GRAFANA_URL + "/d/goodput-")
    assert "First:" in alert.runbook or alert.severity == "none"
    assert re.fullmatch(r"\d+[mh]", alert.for_)
    doc = (build.GENERATED.parents[1] / "docs" / "alerts.md").read_text()
    assert f"### {alert.name}\n" in doc, f"docs/alerts.md has no section for {alert.name}"


def test_rules_read_only_declared_series():
    recorded = {r.record for r in RECORDING}
    for expr in [a.expr for a in ALERTS] + [r.expr for r in RECORDING]:
        for name in re.findall(
            r"(?<![\w:])(goodput_\w+|kafka_\w+|ClickHouse\w+|prometheus_\w+|alertmanager_\w+)", expr
        ):
            assert name in DECLARED or name in recorded, f"{name} in {expr!r} is not declared"


def test_amtool_checks_the_config():
    p = run("amtool", "check-config", build.AM_FILE)
    assert p.returncode == 0, p.stdout + p.stderr
    teams = sorted(config_mod.load().teams.accounts)
    assert f"{len(alertmanager.receivers(tuple(teams)))} receivers" in p.stdout


ROUTES = {
    "oncall": ["alertname=GoodputNodeDown", "severity=page", "node=n1"],
    "ticket": ["alertname=GoodputStorageSaturated", "severity=ticket", "node=n1"],
    "deadman": ["alertname=Watchdog", "severity=none"],
    "blackhole": ["alertname=GoodputJobInStartupOrCheckpoint", "severity=none", "scope=job", "team=vision"],
}


def _route_cases() -> list[tuple[str, list[str]]]:
    cases = list(ROUTES.items())
    for team in sorted(config_mod.load().teams.accounts):
        cases.append(
            (
                f"team-{team}",
                ["alertname=GoodputJobDataStall", "severity=page", "scope=job", f"team={team}", "job_id=j1"],
            )
        )
    # a job of a team without a receiver (the default team) is a ticket, not infrastructure on-call
    cases.append(
        ("ticket", ["alertname=GoodputJobDataStall", "severity=page", "scope=job", "team=unassigned"])
    )
    return cases


@pytest.mark.parametrize("receiver,labels", _route_cases(), ids=lambda c: str(c))
def test_route_reaches_its_receiver(receiver, labels):
    p = run(
        "amtool",
        "config",
        "routes",
        "test",
        f"--config.file={build.AM_FILE}",
        f"--verify.receivers={receiver}",
        *labels,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == receiver


def test_every_receiver_has_a_route_test():
    teams = tuple(sorted(config_mod.load().teams.accounts))
    assert {r for r, _ in _route_cases()} == set(alertmanager.receivers(teams))
