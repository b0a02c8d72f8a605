"""What a Grafana would do with a ClickHouse panel's query, in the order it does it, so a test can run it.

1. The plugin's frontend (grafana/clickhouse-datasource v4.20.0, src/data/CHDatasource.ts
   `applyTemplateVariables`): `applyConditionalAll`, then Grafana's `templateSrv.replace` with the plugin's
   format function (a multi-value becomes `'a','b'`, a single value is inserted as is).
2. The plugin's backend (pkg/macros/macros.go): the `$__` macros, with the query's time range and the
   interval Grafana computed from the range and the panel's max data points.
No Grafana server can run here (AGPL, not packaged); this is what the dashboards' tests check instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

ALL = "$__all"


def _macro_args(sql: str, open_paren: int) -> tuple[list[str], int]:
    """Arguments of the call whose `(` is at `open_paren`, split at top-level commas; the index after `)`."""
    depth, args, start = 0, [], open_paren + 1
    for i in range(open_paren, len(sql)):
        ch = sql[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[start:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(sql[start:i])
            start = i + 1
    raise ValueError(f"unbalanced parentheses after {sql[open_paren : open_paren + 40]!r}")


def conditional_all(sql: str, values: dict[str, str | list[str]]) -> str:
    """CHDatasource.applyConditionalAll: from the last `$__conditionalAll(` back; `1=1` when the
    variable's value is empty or All, else the phrase."""
    macro = "$__conditionalAll("
    idx = sql.rfind(macro)
    while idx != -1:
        params, end = _macro_args(sql, idx + len(macro) - 1)
        if len(params) != 2:
            return sql
        phrase = params[0]
        m = re.search(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+", params[1].strip())
        if m:
            value = values.get(m.group(0))
            text = ",".join(value) if isinstance(value, list) else (value or "")
            if text in ("", ALL):
                phrase = "1=1"
        sql = sql[:idx] + phrase + sql[end:]
        idx = sql.rfind(macro)
    return sql


_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")
"""templateSrv's variable regex (public/app/features/templating/template_srv.ts)."""


def replace_variables(sql: str, values: dict[str, str | list[str]]) -> str:
    """templateSrv.replace with the plugin's format function; unknown names (`$__timeFilter`) stay."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in values:
            return m.group(0)
        value = values[name]
        if fmt == "singlequote":
            items = value if isinstance(value, list) else [value]
            return ",".join("'" + v.replace("'", "\\'") + "'" for v in items)
        if fmt not in (None, "raw"):
            raise ValueError(f"format {fmt!r} not emulated")
        return "'" + "','".join(value) + "'" if isinstance(value, list) else value

    return _VARIABLE.sub(sub, sql)


@dataclass(frozen=True)
class Query:
    start: datetime
    end: datetime
    interval_s: float

    def dt(self, t: datetime) -> str:
        return f"toDateTime({int(t.timestamp())})"

    def ms(self, t: datetime) -> str:
        return f"fromUnixTimestamp64Milli({int(t.timestamp() * 1000)})"

    def date(self, t: datetime) -> str:
        return f"toDate('{t.strftime('%Y-%m-%d')}')"


def _macros(q: Query) -> dict:
    """macros.go's ClickHouseMacros, those the dashboards may use."""
    one = _one_arg
    return {
        "timeFilter": one(lambda c: f"{c} >= {q.dt(q.start)} AND {c} <= {q.dt(q.end)}"),
        "timeFilter_ms": one(lambda c: f"{c} >= {q.ms(q.start)} AND {c} <= {q.ms(q.end)}"),
        "dateFilter": one(lambda c: f"{c} >= {q.date(q.start)} AND {c} <= {q.date(q.end)}"),
        "timeInterval": one(
            lambda c: f"toStartOfInterval(toDateTime({c}), INTERVAL {int(max(q.interval_s, 1))} second)"
        ),
        "fromTime": lambda args: q.dt(q.start),
        "toTime": lambda args: q.dt(q.end),
        "fromTime_ms": lambda args: q.ms(q.start),
        "toTime_ms": lambda args: q.ms(q.end),
        "interval_s": lambda args: str(int(max(q.interval_s, 1))),
    }


def _one_arg(f):
    def call(args: list[str]) -> str:
        if len(args) != 1:
            raise ValueError(f"expected 1 argument, got {len(args)}")
        return f(args[0].strip())

    return call


_MACRO = re.compile(r"\$__(\w+)")


def interpolate(sql: str, q: Query) -> str:
    """macropro.Interpolate: `$__name` or `$__name(args)`; an unknown macro is an error here (the plugin
    would leave it, and ClickHouse would then refuse the `$`)."""
    table = _macros(q)
    out, pos = [], 0
    for m in _MACRO.finditer(sql):
        if m.start() < pos:
            continue
        name = m.group(1)
        if name not in table:
            raise ValueError(f"macro $__{name} is not one macros.go expands")
        end, args = m.end(), []
        if end < len(sql) and sql[end] == "(":
            args, end = _macro_args(sql, end)
        out.append(sql[pos : m.start()] + table[name](args))
        pos = end
    return "".join(out) + sql[pos:]


_NICE_S = [
    1,
    2,
    5,
    10,
    15,
    20,
    30,
    60,
    120,
    300,
    600,
    900,
    1200,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    604800,
    2592000,
]


def interval_s(start: datetime, end: datetime, max_data_points: int, min_interval_s: float = 0) -> float:
    """Grafana's calculateInterval: range / max data points, rounded to a round interval (kbn's
    roundInterval steps), never below the panel's min interval."""
    raw = (end - start).total_seconds() / max_data_points
    nice = next((s for s in _NICE_S if s >= raw), _NICE_S[-1])
    return max(nice, min_interval_s)


def parse_duration_s(text: str | None) -> float:
    if not text:
        return 0
    m = re.fullmatch(r"(\d+)([smhd])", text)
    if not m:
        raise ValueError(f"interval {text!r}")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def expand(sql: str, values: dict[str, str | list[str]], q: Query) -> str:
    """Frontend first (conditionalAll, then variables), backend macros last: the plugin's order."""
    return interpolate(replace_variables(conditional_all(sql, values), values), q)
