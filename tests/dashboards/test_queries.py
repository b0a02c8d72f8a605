"""Every ClickHouse query of every dashboard (panels, template variables, annotations), expanded as the
plugin and Grafana's frontend expand it, runs on a simulated store and returns what its panel reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from dashboards.build import models
from dashboards.clickhouse import FORMAT_TIME_SERIES, PLUGIN_TYPE
from tests.dashboards import grafana

MAY_BE_EMPTY = {
    "Reclaimable idle GPU-hours by team": "the simulator holds no GPU idle past idle_reclaim_after_s",
    "Repeat offenders (this node and its GPUs)": "one planned failure: nothing repeats",
    "Dead letters by reason": "the simulator sends only valid messages",
}
RANGES = {"1h": timedelta(hours=1, minutes=5), "30d": timedelta(days=30)}


def queries():
    """(dashboard, what, title, target, panel) for every ClickHouse query in the built JSON."""
    for name, model in models().items():
        for var in model["templating"]["list"]:
            if var.get("datasource", {}).get("type") == PLUGIN_TYPE:
                yield name, "variable", var["name"], {"rawSql": var["query"]["rawSql"]}, var
        for ann in model["annotations"]["list"]:
            yield name, "annotation", ann["name"], ann["target"], ann
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                if target["datasource"]["type"] == PLUGIN_TYPE:
                    yield name, "panel", panel["title"], target, panel


ALL = list(queries())


@pytest.fixture(scope="module")
def values(sim_store):
    store = sim_store["store"]
    fault = store.query_arrow("SELECT job_id, node FROM faults ORDER BY ts LIMIT 1").to_pylist()[0]
    cluster = sim_store["config"].cluster.name
    return {
        "all": {"cluster": cluster, "pool": grafana.ALL, "team": grafana.ALL, **fault_vars(fault)},
        "picked": {"cluster": cluster, "pool": ["core", "shared"], "team": ["research"], **fault_vars(fault)},
    }


def fault_vars(fault: dict) -> dict:
    return {"job": fault["job_id"], "node": fault["node"]}


def _run(store, target: dict, holder: dict, vals: dict, span: timedelta) -> tuple[pa.Table, dict, str]:
    """The rows, the ClickHouse type of each column (Arrow shows a DateTime as uint32), the SQL run."""
    end = datetime.now(UTC)
    start = end - span
    interval = grafana.interval_s(
        start, end, holder.get("maxDataPoints", 1000), grafana.parse_duration_s(holder.get("interval"))
    )
    sql = grafana.expand(target["rawSql"], vals, grafana.Query(start, end, interval))
    types = {r["name"]: r["type"] for r in store.query_arrow(f"DESCRIBE ({sql})").to_pylist()}
    return store.query_arrow(sql), types, sql


def _bare(ch_type: str) -> str:
    for wrapper in ("Nullable(", "LowCardinality("):
        if ch_type.startswith(wrapper):
            return _bare(ch_type[len(wrapper) : -1])
    return ch_type


def is_number(ch_type: str) -> bool:
    return _bare(ch_type).startswith(("Int", "UInt", "Float", "Decimal"))


@pytest.mark.parametrize("span", list(RANGES))
@pytest.mark.parametrize("selection", ["all", "picked"])
@pytest.mark.parametrize(
    "dashboard,what,title,target,holder", ALL, ids=[f"{d}:{w}:{t}" for d, w, t, _, _ in ALL]
)
def test_query_runs_and_returns_the_columns_its_panel_reads(
    sim_store, values, dashboard, what, title, target, holder, selection, span
):
    table, types, sql = _run(sim_store["store"], target, holder, values[selection], RANGES[span])
    names = list(types)
    if what == "variable":
        assert len(names) >= 1
    elif what == "annotation":
        assert names[:3] == ["time", "text", "tags"], sql
        assert is_number(types["time"]) and types["tags"] == "Array(String)", types
    elif target["format"] == FORMAT_TIME_SERIES:
        assert names[0] == "time" and _bare(types["time"]).startswith("DateTime"), f"{types}\n{sql}"
        values_ = [n for n in names[1:] if is_number(types[n])]
        assert values_, f"{title}: no value column: {types}"
        assert all(_bare(types[n]) == "String" for n in names[1:] if n not in values_), types
    else:
        wanted = {o["matcher"]["options"] for o in holder["fieldConfig"].get("overrides", [])}
        assert wanted <= set(names), f"{title}: missing {wanted - set(names)}"
        if holder["type"] == "stat":
            assert len(names) == 1 and is_number(types[names[0]]), types
    if selection == "all" and title not in MAY_BE_EMPTY:
        assert table.num_rows > 0, f"{dashboard}/{title} returned no rows:\n{sql}"


def test_every_query_is_covered():
    """The parametrisation sees every dashboard and every panel with a ClickHouse target."""
    seen = {(d, t) for d, w, t, _, _ in ALL if w == "panel"}
    for name, model in models().items():
        for panel in model["panels"]:
            if panel["datasource"]["type"] == PLUGIN_TYPE:
                assert (name, panel["title"]) in seen
    assert set(MAY_BE_EMPTY) <= {t for _, _, t, _, _ in ALL}


def test_picked_pools_and_teams_filter_what_all_shows(sim_store, values):
    """The variables reach the SQL: a picked subset narrows a panel that "All" shows whole."""
    target, holder = next((t, h) for d, w, title, t, h in ALL if title == "Top jobs by waste")
    rows = {
        sel: _run(sim_store["store"], target, holder, values[sel], RANGES["1h"])[0].to_pylist()
        for sel in ("all", "picked")
    }
    assert {(r["pool"], r["team"]) for r in rows["picked"]} <= {("core", "research"), ("shared", "research")}
    assert rows["picked"] and len(rows["picked"]) < len(rows["all"])
