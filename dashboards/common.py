"""What every dashboard shares: its variables, SQL filters, panel builders and the JSON clean-up.

Every table and metric name comes from `contracts.catalog` (dashboards know the pipeline only by those
names). SQL filters use Grafana template variables the way the ClickHouse plugin's frontend expands them:
`${var:singlequote}` for values, `$__conditionalAll(<filter>, $var)` so "All" costs no `IN` list.
"""

from __future__ import annotations

import attr
from grafanalib import core as g

from contracts import catalog
from dashboards.clickhouse import (
    DATASOURCE,
    DATASOURCE_VARIABLE,
    FORMAT_TABLE,
    FORMAT_TIME_SERIES,
    PLUGIN_TYPE,
)
from dashboards.clickhouse import ClickHouseTarget as CH

SCHEMA_VERSION = 39
"""Grafana's dashboard schema version the JSON is written at (Grafana 10.4 / 11.x); grafanalib's
default (12) would make Grafana run every migration since 2016 on load."""

PROM_VARIABLE = "prom"
PROM = {"type": "prometheus", "uid": "${%s}" % PROM_VARIABLE}
UID_PREFIX = "goodput-"

CLUSTER = "cluster = ${cluster:singlequote}"
POOL = "$__conditionalAll(pool IN (${pool:singlequote}), $pool)"
TEAM = "$__conditionalAll(team IN (${team:singlequote}), $team)"
WASTE = "category IN (%s)" % ", ".join(f"'{c}'" for c in catalog.WASTE_CATEGORIES)
PRODUCTIVE = catalog.CATEGORIES[0]

GREEN, YELLOW, RED = "green", "yellow", "red"


def steps(*pairs: tuple[str, float | None]) -> list[dict]:
    """Threshold steps, lowest first; the first has no lower bound (Grafana stores null)."""
    return [{"color": c, "value": v} for c, v in pairs]


GOODPUT_STEPS = steps((RED, None), (YELLOW, 60), (GREEN, 80))
"""Goodput % is good high: below 60 % a cluster wastes more than a third of what it pays for."""
LOW_IS_GOOD = steps((GREEN, None), (RED, 1))
"""Counts of bad things (faults, dead letters, stranded GPUs): any is worth a look."""
NEUTRAL = steps((GREEN, None))


def uid(name: str) -> str:
    return UID_PREFIX + name


def variables(*extra: g.Template) -> g.Templating:
    """datasource (ClickHouse, Prometheus), cluster, pool and team, then the dashboard's own."""
    return g.Templating(
        [
            g.Template(name=DATASOURCE_VARIABLE, label="ClickHouse", query=PLUGIN_TYPE, type="datasource"),
            g.Template(name=PROM_VARIABLE, label="Prometheus", query="prometheus", type="datasource"),
            query_variable(
                "cluster",
                f"SELECT DISTINCT cluster FROM {catalog.JOB_SUMMARY} ORDER BY cluster",
                multi=False,
            ),
            query_variable("pool", f"SELECT pool FROM {catalog.DIM_POOLS} ORDER BY pool"),
            query_variable(
                "team", f"SELECT DISTINCT team FROM {catalog.JOB_SUMMARY} WHERE {CLUSTER} ORDER BY team"
            ),
            *extra,
        ]
    )


def query_variable(name: str, sql: str, *, multi: bool = True, label: str | None = None) -> g.Template:
    """A ClickHouse query variable; multi-valued ones offer "All" (expanded by `$__conditionalAll`)."""
    variable = g.Template(
        name=name,
        label=label or name,
        # the plugin's variable query model (src/data/CHVariableSupport.tsx): custom SQL
        query={"queryType": "sql", "rawSql": sql, "refId": name},
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=multi,
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=0,  # the SQL orders
    )
    # multi-valued: "All" until the user picks; single-valued: Grafana takes the first value
    variable._current = {"text": "All", "value": "$__all"} if multi else {}
    return variable


def pos(x: int, y: int, w: int, h: int = 8) -> g.GridPos:
    return g.GridPos(x=x, y=y, w=w, h=h)


def freshness(y: int = 0) -> g.Stat:
    """ "Data analysed up to": the end of the last classified window, shown as time ago."""
    sql = (
        f"SELECT toUnixTimestamp(max(addSeconds(window_start, window_s))) * 1000 AS analysed_up_to\n"
        f"FROM {catalog.GOODPUT_WINDOWS} WHERE {CLUSTER}"
    )
    return g.Stat(
        title="Data analysed up to",
        description="End of the last window the analyzers classified. Later data is stored but not yet "
        "analysed: goodput panels stop here.",
        dataSource=DATASOURCE,
        targets=[CH(rawSql=sql)],
        format="dateTimeFromNow",
        reduceCalc="lastNotNull",
        graphMode="none",
        colorMode="background",
        thresholds=NEUTRAL,
        gridPos=pos(0, y, 4, 4),
    )


def timeseries(
    title: str,
    sql: str,
    *,
    unit: str,
    thresholds: list[dict],
    gridPos: g.GridPos,
    description: str = "",
    stacked: bool = False,
    bars: bool = False,
    min_interval: str = "1m",
) -> g.TimeSeries:
    """A time series panel; `min_interval` keeps a bucket at least a few analyzer windows (10 s) wide."""
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CH(rawSql=sql, format=FORMAT_TIME_SERIES)],
        unit=unit,
        thresholds=thresholds,
        thresholdsStyleMode="dashed" if len(thresholds) > 1 else "off",
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none"},
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if stacked else 10,
        interval=min_interval,
        gridPos=gridPos,
        maxDataPoints=1000,
    )


def prom_timeseries(
    title: str, exprs: list[tuple[str, str]], *, unit: str, thresholds: list[dict], gridPos: g.GridPos
) -> g.TimeSeries:
    """A panel on the live Prometheus series: (PromQL, legend) pairs."""
    return g.TimeSeries(
        title=title,
        dataSource=PROM,
        targets=[
            g.Target(expr=e, legendFormat=legend, refId=chr(ord("A") + i), datasource=PROM)
            for i, (e, legend) in enumerate(exprs)
        ],
        unit=unit,
        thresholds=thresholds,
        thresholdsStyleMode="dashed" if len(thresholds) > 1 else "off",
        gridPos=gridPos,
        maxDataPoints=1000,
    )


def table(
    title: str,
    sql: str,
    *,
    gridPos: g.GridPos,
    units: dict[str, str],
    thresholds: list[dict] = NEUTRAL,
    description: str = "",
    links: dict[str, str] | None = None,
) -> g.Table:
    """A table; `units` per column (each column's unit is set, so none reads as a bare number) and
    `links`: column -> URL of a data link on its cells."""
    overrides = [
        {"matcher": {"id": "byName", "options": col}, "properties": [{"id": "unit", "value": unit}]}
        for col, unit in units.items()
    ]
    for col, url in (links or {}).items():
        overrides.append(
            {
                "matcher": {"id": "byName", "options": col},
                "properties": [{"id": "links", "value": [{"title": "open", "url": url}]}],
            }
        )
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[CH(rawSql=sql, format=FORMAT_TABLE)],
        thresholds=thresholds,
        overrides=overrides,
        unit="none",
        gridPos=gridPos,
    )


@attr.s(kw_only=True)
class Heatmap(g.Panel):
    """The heatmap panel as Grafana 9+ stores it (grafanalib's Heatmap writes the pre-9 one): rows are
    the frame's fields as they come (one per GPU), not buckets Grafana calculates."""

    unit: str = attr.ib()

    def to_json_data(self) -> dict:
        return self.panel_json(
            {
                "type": "heatmap",
                "fieldConfig": {"defaults": {"unit": self.unit}, "overrides": []},
                "options": {
                    "calculate": False,
                    "color": {"mode": "scheme", "scheme": "RdYlGn", "min": 0, "max": 100},
                    "yAxis": {"axisPlacement": "left"},
                    "rowsFrame": {"layout": "auto"},
                    "cellGap": 1,
                },
            }
        )


def heatmap(title: str, sql: str, *, unit: str, thresholds: list[dict], gridPos: g.GridPos) -> Heatmap:
    return Heatmap(  # type: ignore[call-arg]  # the fields of grafanalib's untyped Panel
        title=title,
        dataSource=DATASOURCE,
        targets=[CH(rawSql=sql, format=FORMAT_TIME_SERIES)],
        unit=unit,
        thresholds=thresholds,
        gridPos=gridPos,
        maxDataPoints=200,
    )


def annotation(name: str, sql: str, color: str) -> dict:
    """An annotation query on ClickHouse: rows with `time` (ms), `text` and `tags`."""
    return {
        "name": name,
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": color,
        "target": CH(rawSql=sql).to_json_data(),
    }


def dashboard(
    name: str, title: str, panels: list, *, extra_vars=(), annotations=(), description: str = ""
) -> g.Dashboard:
    return g.Dashboard(
        title=title,
        uid=uid(name),
        description=description,
        tags=["goodput"],
        panels=panels,
        templating=variables(*extra_vars),
        annotations=g.Annotations(list(annotations)),
        schemaVersion=SCHEMA_VERSION,
        refresh="5m",
        time=g.Time("now-24h", "now"),
        timezone="utc",
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        links=[
            g.DashboardLink(
                title="goodput dashboards",
                type="dashboards",
                tags=["goodput"],
                asDropdown=True,
                includeVars=True,
                keepTime=True,
            )
        ],
    ).auto_panel_ids()


# Keys grafanalib still writes that Grafana's current dashboard schema dropped (pre-schemaVersion-16 rows,
# Graph-era panel sizing, tag-based variables). Grafana's own migration deletes them on load; we drop them
# before writing so the JSON is what Grafana would store.
_LEGACY = {
    "dashboard": {"__inputs", "hideControls", "rows", "sharedCrosshair", "style"},
    "panel": {"editable", "error", "height", "minSpan", "span", "columns", "fontSize", "mappings", "color"},
    "variable": {"useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_count", "auto_min"},
    "timepicker": {"time_options"},
}


def clean(model: dict) -> dict:
    """The dashboard JSON without legacy keys and without nulls (Grafana reads an absent key as its
    default); threshold steps keep their null lower bound."""
    out = {k: v for k, v in model.items() if k not in _LEGACY["dashboard"]}
    out["panels"] = [{k: v for k, v in p.items() if k not in _LEGACY["panel"]} for p in model["panels"]]
    out["templating"] = {
        "list": [
            {k: v for k, v in t.items() if k not in _LEGACY["variable"] and v != {}}
            for t in model["templating"]["list"]
        ]
    }
    out["timepicker"] = {k: v for k, v in model["timepicker"].items() if k not in _LEGACY["timepicker"]}
    return _drop_nulls(out)


def _drop_nulls(value, key: str = ""):
    if isinstance(value, dict):
        return {k: _drop_nulls(v, k) for k, v in value.items() if v is not None or k == "value"}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def event(name: str) -> str:
    """A job event name (`raw_job.event`), checked against the message schema's list."""
    from contracts.schema import JOB_EVENTS

    if name not in JOB_EVENTS:
        raise KeyError(f"{name!r} is not a job event in contracts/schema.py JOB_EVENTS")
    return name


def metric(kind: str, field: str) -> str:
    """The Prometheus series the agent exports for a sample field (docs/metrics.md)."""
    from contracts.schema import KINDS

    for f in KINDS[kind].fields:
        if f.name == field and f.metric:
            return f.metric
    raise KeyError(f"no Prometheus series for {kind}.{field} in contracts/schema.py")
