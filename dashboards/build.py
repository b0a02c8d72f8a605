"""`goodput dashboards build`: the dashboards' JSON, and Grafana provisioning for them and their datasources.

The output is a pure function of the code (sorted keys, fixed indentation, no timestamps), so the copy
committed in `dashboards/json/` can be checked byte for byte against a fresh build.
"""

from __future__ import annotations

import json
from pathlib import Path

from grafanalib._gen import DashboardEncoder

from dashboards import cluster, common, infra, job, node, teams
from dashboards.clickhouse import PLUGIN_TYPE

BUILDERS = {
    "cluster": cluster.build,
    "job": job.build,
    "teams": teams.build,
    "node": node.build,
    "infra": infra.build,
}
FOLDER = "goodput"
CLICKHOUSE_UID = "goodput-clickhouse"
PROMETHEUS_UID = "goodput-prometheus"
MAX_EXECUTION_TIME_S = 30
"""Every dashboard query is stopped by ClickHouse after this long (the user's own setting wins if lower)."""
DASHBOARDS_PATH = "/var/lib/grafana/dashboards/goodput"


def models() -> dict[str, dict]:
    """Dashboard name -> the JSON model Grafana reads."""
    out = {}
    for name, build in BUILDERS.items():
        raw = json.loads(json.dumps(build().to_json_data(), cls=DashboardEncoder))
        model = common.clean(raw)
        for var in model["templating"]["list"]:  # datasource variables default to the provisioned ones
            if var["type"] == "datasource":
                uid = CLICKHOUSE_UID if var["query"] == PLUGIN_TYPE else PROMETHEUS_UID
                var["current"] = {"text": uid, "value": uid}
        out[name] = model
    return out


def render(model: dict) -> str:
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


DATASOURCES_YAML = f"""\
# Grafana datasource provisioning for the goodput dashboards (docs/dashboards.md).
# Written by `goodput dashboards build`; Grafana expands $VARIABLES from its environment.
apiVersion: 1
datasources:
  - name: goodput ClickHouse
    uid: {CLICKHOUSE_UID}
    type: {PLUGIN_TYPE}
    jsonData:
      host: $GOODPUT_CLICKHOUSE_HOST
      port: 9440
      protocol: native
      secure: true
      # A read-only user (docs/dashboards.md: its profile sets readonly = 2, which still lets the
      # plugin send max_execution_time with every query, and caps that at the same value).
      username: $GOODPUT_CLICKHOUSE_USER
      defaultDatabase: $GOODPUT_CLICKHOUSE_DATABASE
      queryTimeout: "{MAX_EXECUTION_TIME_S + 5}"
      customSettings:
        - setting: max_execution_time
          value: "{MAX_EXECUTION_TIME_S}"
    secureJsonData:
      password: $GOODPUT_CLICKHOUSE_PASSWORD
  - name: goodput Prometheus
    uid: {PROMETHEUS_UID}
    type: prometheus
    access: proxy
    url: $GOODPUT_PROMETHEUS_URL
"""

DASHBOARDS_YAML = f"""\
# Grafana dashboard provisioning: the goodput folder, read from {DASHBOARDS_PATH}.
apiVersion: 1
providers:
  - name: goodput
    folder: {FOLDER}
    type: file
    disableDeletion: true
    allowUiUpdates: false
    options:
      path: {DASHBOARDS_PATH}
"""


def files() -> dict[str, str]:
    """Relative path -> content of everything `build` writes."""
    out = {f"dashboards/{name}.json": render(m) for name, m in models().items()}
    out["provisioning/datasources/goodput.yaml"] = DATASOURCES_YAML
    out["provisioning/dashboards/goodput.yaml"] = DASHBOARDS_YAML
    return out


def build(out_dir: Path) -> list[Path]:
    written = []
    for rel, text in files().items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
