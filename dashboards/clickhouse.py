"""A grafanalib target for the Grafana ClickHouse plugin (grafanalib ships none).

It writes the plugin's SQL-editor query model as the pinned plugin version stores it
(`src/types/sql.ts` of grafana/clickhouse-datasource): `editorType` "sql", the SQL in `rawSql`, `format` a
number (sqlds' FormatQueryOption: 0 time series, 1 table), `queryType` (optional in SQL mode; set so the
Explore view picks the same visualisation) and `pluginVersion`, which the plugin's migrations read.
"""

from __future__ import annotations

import attr

PLUGIN_TYPE = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.20.0"
"""The plugin release these dashboards target: its query model and the macros of `pkg/macros/macros.go`."""

FORMAT_TIME_SERIES = 0
FORMAT_TABLE = 1
_QUERY_TYPES = {FORMAT_TIME_SERIES: "timeseries", FORMAT_TABLE: "table"}

DATASOURCE_VARIABLE = "ch"
DATASOURCE = {"type": PLUGIN_TYPE, "uid": "${%s}" % DATASOURCE_VARIABLE}
"""Every ClickHouse query names the datasource through the dashboard's `ch` variable."""


@attr.s(frozen=True, kw_only=True)
class ClickHouseTarget:
    """One SQL query of a panel, a template variable or an annotation."""

    rawSql: str = attr.ib()
    format: int = attr.ib(default=FORMAT_TABLE, validator=attr.validators.in_(_QUERY_TYPES))
    refId: str = attr.ib(default="A")

    def to_json_data(self) -> dict:
        return {
            "datasource": DATASOURCE,
            "editorType": "sql",
            "format": self.format,
            "pluginVersion": PLUGIN_VERSION,
            "queryType": _QUERY_TYPES[self.format],
            "rawSql": self.rawSql,
            "refId": self.refId,
        }
