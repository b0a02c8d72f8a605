"""Writes goodput's Prometheus rules, their promtool unit tests, the Alertmanager config and an example
scrape config as YAML (`goodput alerts build --out DIR`, or `python -m alerts.build --out DIR`).

The files in alerts/generated/ are this module's output for the shipped example config and the default
links; tests/alerts/test_build.py checks they are in sync, so edit alerts/rules.py and rebuild, never
the YAML. Deployments pass their own Grafana URL, runbook base, receiver URLs and config (docs/alerts.md).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path

from alerts import alertmanager
from alerts.rules import ALERTS, JOBS, RECORDING, Alert
from contracts import config as config_mod

GENERATED = Path(__file__).parent / "generated"
GRAFANA_URL = "http://grafana.example:3000"
RUNBOOK_BASE = "https://github.com/goodput/goodput/blob/main/docs/alerts.md"
RECEIVER_URL = "http://alert-receiver.example:8080/{receiver}"
RULES_FILE, TESTS_FILE, AM_FILE, SCRAPE_FILE = (
    "goodput-rules.yml",
    "goodput-rules.test.yml",
    "alertmanager.yml",
    "prometheus-scrape.yml",
)


EVAL_PAD_MIN = 45
"""Unit tests evaluate each alert this long after its `for:`: its fire series hold the condition from
minute 40 at the latest (the XID, link and increase cases place their event there)."""


def annotations_of(a: Alert, grafana_url: str, runbook_base: str) -> dict[str, str]:
    return {
        "summary": a.summary,
        "description": a.runbook,
        "runbook_url": f"{runbook_base}#{a.name.lower()}",
        "dashboard": grafana_url + a.dashboard,
    }


def rules(
    grafana_url: str = GRAFANA_URL, runbook_base: str = RUNBOOK_BASE, for_override: str | None = None
) -> dict:
    """The rule file; `for_override` replaces every `for:` (the end-to-end test's short timings)."""
    return {
        "groups": [
            {
                "name": "goodput-recording",
                "rules": [{"record": r.record, "expr": r.expr} for r in RECORDING],
            },
            {
                "name": "goodput-alerts",
                "rules": [
                    {
                        "alert": a.name,
                        "expr": a.expr,
                        "for": for_override or a.for_,
                        "labels": a.rule_labels(),
                        "annotations": annotations_of(a, grafana_url, runbook_base),
                    }
                    for a in ALERTS
                ],
            },
        ]
    }


def render(template: str, labels: Mapping[str, str]) -> str:
    """What Prometheus makes of the `{{ $labels.x }}` in an annotation (the only template used)."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda mt: labels.get(mt.group(1), ""), template)


def _minutes(duration: str) -> int:
    n, unit = int(duration[:-1]), duration[-1]
    return n * {"m": 1, "h": 60}[unit]


def unit_tests(grafana_url: str = GRAFANA_URL, runbook_base: str = RUNBOOK_BASE) -> dict:
    """promtool's test file: for every alert, one group where it fires and one where it does not."""
    tests = []
    for a in ALERTS:
        at = f"{_minutes(a.for_) + EVAL_PAD_MIN}m"
        cases = [(a.fire, True)] + ([(a.quiet, False)] if a.quiet is not None else [])
        for series, fires in cases:
            expected = []
            if fires:
                labels = {**a.labels, **a.rule_labels()}
                expected = [
                    {
                        "exp_labels": labels,
                        "exp_annotations": {
                            k: render(v, labels)
                            for k, v in annotations_of(a, grafana_url, runbook_base).items()
                        },
                    }
                ]
            tests.append(
                {
                    "name": f"{a.name} {'fires' if fires else 'stays quiet'}",
                    "interval": "1m",
                    "input_series": [{"series": s, "values": v} for s, v in series],
                    "alert_rule_test": [{"eval_time": at, "alertname": a.name, "exp_alerts": expected}],
                }
            )
    return {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": tests}


OWN_NODE_LABEL = ("loader", "exporter")
"""Jobs serving series that carry a `node` label of their own: the loader's clock offset per sending node,
and the goodput series' straggler windows per node (the exporter's, and the loader's with
--analyze-every). Scraped with `honor_labels`, that label stays the GPU node's; without it Prometheus
would rename it `exported_node` and put the scraped host in `node`."""


def scrape_config() -> dict:
    """Example scrape jobs with the conventions the rules assume: the job names of rules.JOBS and a
    `node` label (the target's host, without port) on every target, unless the series has its own
    (OWN_NODE_LABEL); targets from file_sd, where an operator adds maintenance: "true" to a node's
    labels when draining it."""
    node_label = {
        "source_labels": ["__address__"],
        "regex": "([^:]+)(:[0-9]+)?",
        "target_label": "node",
        "replacement": "$1",
    }
    return {
        "rule_files": [RULES_FILE],
        "scrape_configs": [
            {
                "job_name": JOBS[key],
                **({"honor_labels": True} if key in OWN_NODE_LABEL else {}),
                "file_sd_configs": [{"files": [f"targets/{JOBS[key]}.yml"]}],
                "relabel_configs": [node_label],
            }
            for key in JOBS
        ],
    }


def _dump(data: dict) -> str:
    import yaml  # the pipeline extra's; `goodput agent` shares the command line without it

    return yaml.safe_dump(data, sort_keys=False, width=110, allow_unicode=True)


def files(
    cfg: config_mod.Config | None = None,
    grafana_url: str = GRAFANA_URL,
    runbook_base: str = RUNBOOK_BASE,
    receiver_url: str = RECEIVER_URL,
) -> dict[str, str]:
    """File name -> content of everything `build` writes."""
    cfg = cfg or config_mod.load()
    teams = tuple(sorted(cfg.teams.accounts))
    urls = {r: receiver_url.format(receiver=r) for r in alertmanager.receivers(teams)}
    return {
        RULES_FILE: _dump(rules(grafana_url, runbook_base)),
        TESTS_FILE: _dump(unit_tests(grafana_url, runbook_base)),
        AM_FILE: _dump(alertmanager.config(teams, urls)),
        SCRAPE_FILE: _dump(scrape_config()),
    }


def build(out: Path, **kwargs) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files(**kwargs).items():
        (out / name).write_text(text)
        written.append(out / name)
    return written


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alerts", help="Prometheus rules and Alertmanager config (docs/alerts.md)")
    alerts_sub = p.add_subparsers(dest="alerts_command", required=True)
    b = alerts_sub.add_parser("build", help="write the rules, their unit tests and the Alertmanager config")
    add_arguments(b)
    b.set_defaults(func=cmd_build)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=str(GENERATED), help="directory (default: alerts/generated)")
    p.add_argument("--config", help="goodput TOML config: its [teams] get receivers (default: the example)")
    p.add_argument("--grafana-url", default=GRAFANA_URL, help="base of the dashboard links")
    p.add_argument("--runbook-base", default=RUNBOOK_BASE, help="URL of docs/alerts.md (runbook_url)")
    p.add_argument(
        "--receiver-url", default=RECEIVER_URL, help="webhook URL per receiver; {receiver} is its name"
    )


def cmd_build(args) -> int:
    cfg = config_mod.load(args.config)
    for path in build(
        Path(args.out),
        cfg=cfg,
        grafana_url=args.grafana_url,
        runbook_base=args.runbook_base,
        receiver_url=args.receiver_url,
    ):
        print(path)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m alerts.build", description=__doc__)
    add_arguments(parser)
    raise SystemExit(cmd_build(parser.parse_args()))
