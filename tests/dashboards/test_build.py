"""The built dashboards: in sync with the committed copy, reproducible, valid against Grafana's schema, and
complete (variables, units, thresholds, freshness), with provisioning Grafana can read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from contracts import catalog
from dashboards import build
from dashboards.clickhouse import PLUGIN_TYPE, PLUGIN_VERSION
from dashboards.common import SCHEMA_VERSION
from tests.dashboards import schema

COMMITTED = Path(build.__file__).parent / "json"
MODELS = build.models()


def test_committed_json_is_what_the_code_builds():
    committed = {str(p.relative_to(COMMITTED)): p.read_text() for p in COMMITTED.rglob("*") if p.is_file()}
    assert committed == build.files(), "run: goodput dashboards build --out dashboards/json"


def test_cli_build_is_byte_for_byte_reproducible(tmp_path):
    runs = []
    for n in range(2):
        out = tmp_path / str(n)
        res = subprocess.run(
            [sys.executable, "-m", "goodput.cli", "dashboards", "build", "--out", str(out)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert len(res.stdout.splitlines()) == len(build.files())
        runs.append({str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert runs[0] == runs[1]
    assert {k: v.decode() for k, v in runs[0].items()} == build.files()


def test_cli_refuses_a_file_as_out_dir(tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    res = subprocess.run(
        [sys.executable, "-m", "goodput.cli", "dashboards", "build", "--out", str(f)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "directory" in res.stderr


@pytest.mark.parametrize("name", list(MODELS))
def test_validates_against_grafanas_dashboard_schema(name):
    jsonschema.Draft7Validator(schema.load()).validate(MODELS[name])


def test_schema_check_catches_a_bad_dashboard():
    bad = json.loads(json.dumps(MODELS["cluster"]))
    bad["panels"][0]["gridPos"]["w"] = 30  # wider than Grafana's 24 columns
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema.load()).validate(bad)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_dashboard_has_the_shared_variables_and_a_freshness_panel(name):
    model = MODELS[name]
    assert model["schemaVersion"] == SCHEMA_VERSION
    names = [v["name"] for v in model["templating"]["list"]]
    assert names[:5] == ["ch", "prom", "cluster", "pool", "team"]
    assert any(p["title"] == "Data analysed up to" for p in model["panels"])


@pytest.mark.parametrize("name", list(MODELS))
def test_every_panel_has_units_and_thresholds(name):
    for panel in MODELS[name]["panels"]:
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["thresholds"]["steps"], panel["title"]
        if panel["type"] == "table":
            overrides = [o for o in panel["fieldConfig"]["overrides"] if o["properties"][0]["id"] == "unit"]
            assert overrides, f"{panel['title']}: no column has a unit"
        else:
            assert defaults.get("unit"), f"{panel['title']}: no unit"


@pytest.mark.parametrize("name", list(MODELS))
def test_clickhouse_targets_use_the_pinned_v4_sql_query_model(name):
    for panel in MODELS[name]["panels"]:
        for t in panel.get("targets", []):
            if t["datasource"]["type"] != PLUGIN_TYPE:
                continue
            assert t["editorType"] == "sql" and t["pluginVersion"] == PLUGIN_VERSION
            assert (t["format"], t["queryType"]) in {(0, "timeseries"), (1, "table")}
            assert t["datasource"] == {"type": PLUGIN_TYPE, "uid": "${ch}"}


def test_prometheus_panels_use_only_catalogued_series():
    known = set(catalog.agent_metrics()) | set(catalog.AGENT_SELF_METRICS) | set(catalog.LOADER_METRICS)
    used = set()
    for model in MODELS.values():
        for panel in model["panels"]:
            for t in panel.get("targets", []):
                if t["datasource"]["type"] == "prometheus":
                    used |= set(re.findall(r"\bgoodput_\w+", t["expr"]))
    assert used and used <= known, used - known


def test_links_point_at_the_job_dashboard():
    job_uid = MODELS["job"]["uid"]
    links = [json.dumps(p) for m in MODELS.values() for p in m["panels"] if "/d/" in json.dumps(p)]
    assert links and all(f"/d/{job_uid}?var-job=" in s for s in links)


def test_provisioning_names_both_datasources_with_limits():
    files = build.files()
    ds = yaml.safe_load(files["provisioning/datasources/goodput.yaml"])
    by_type = {d["type"]: d for d in ds["datasources"]}
    ch = by_type[PLUGIN_TYPE]
    settings = {s["setting"]: s["value"] for s in ch["jsonData"]["customSettings"]}
    assert settings == {"max_execution_time": str(build.MAX_EXECUTION_TIME_S)}
    assert "password" in ch["secureJsonData"] and "prometheus" in by_type
    uids = {d["uid"] for d in ds["datasources"]}
    for model in MODELS.values():
        defaults = {v["current"]["value"] for v in model["templating"]["list"] if v["type"] == "datasource"}
        assert defaults == uids
    prov = yaml.safe_load(files["provisioning/dashboards/goodput.yaml"])
    assert prov["providers"][0]["folder"] == build.FOLDER
    assert prov["providers"][0]["options"]["path"] == build.DASHBOARDS_PATH


def test_cli_without_grafanalib_says_which_extra_in_one_line(tmp_path):
    """The agent-only install has no grafanalib: the command names the extra instead of a traceback."""
    code = (
        "import sys; sys.modules['grafanalib'] = None\n"
        "from goodput.cli import main\n"
        f"sys.exit(main(['dashboards', 'build', '--out', {str(tmp_path / 'out')!r}]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (
        "goodput dashboards build: needs grafanalib; pip install 'goodput[dashboards]'"
    )
    assert not (tmp_path / "out").exists()
