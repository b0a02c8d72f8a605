"""The test's Grafana emulation against the plugin's own documented behaviour (macros.go comments,
CHDatasource.ts): a wrong emulation would make the query tests pass on SQL Grafana would not send."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.dashboards import grafana

Q = grafana.Query(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), 60)


def test_conditional_all_is_one_equals_one_for_all_and_the_phrase_otherwise():
    sql = "WHERE $__conditionalAll(pool IN (${pool:singlequote}), $pool) AND x"
    assert grafana.expand(sql, {"pool": grafana.ALL}, Q) == "WHERE 1=1 AND x"
    assert grafana.expand(sql, {"pool": ["a", "b"]}, Q) == "WHERE pool IN ('a','b') AND x"
    assert grafana.expand(sql, {"pool": "a"}, Q) == "WHERE pool IN ('a') AND x"


def test_plugin_format_quotes_lists_and_inserts_scalars_as_they_are():
    assert grafana.replace_variables("$team ${team}", {"team": ["x", "y"]}) == "'x','y' 'x','y'"
    assert grafana.replace_variables("$team", {"team": "x"}) == "x"
    assert grafana.replace_variables("${job:singlequote}", {"job": "it's"}) == "'it\\'s'"


def test_macros_expand_as_macros_go():
    f, t = int(Q.start.timestamp()), int(Q.end.timestamp())
    assert grafana.interpolate("$__timeFilter(ts)", Q) == f"ts >= toDateTime({f}) AND ts <= toDateTime({t})"
    assert grafana.interpolate("$__timeInterval(ts)", Q) == (
        "toStartOfInterval(toDateTime(ts), INTERVAL 60 second)"
    )
    assert grafana.interpolate("$__dateFilter(day)", Q) == (
        "day >= toDate('2026-01-01') AND day <= toDate('2026-01-02')"
    )
    assert grafana.interpolate("$__fromTime $__toTime $__interval_s", Q) == (
        f"toDateTime({f}) toDateTime({t}) 60"
    )


def test_an_unknown_macro_or_a_stray_all_is_an_error():
    with pytest.raises(ValueError, match="interval_x"):
        grafana.interpolate("$__interval_x", Q)
    with pytest.raises(ValueError, match="all"):  # "All" outside $__conditionalAll reaches the backend
        grafana.expand("pool IN ($pool)", {"pool": grafana.ALL}, Q)


def test_interval_is_range_over_data_points_rounded_never_below_the_minimum():
    day = (Q.start, Q.end)
    assert grafana.interval_s(*day, 1000) == 120  # 86.4 s -> 2 min
    assert grafana.interval_s(*day, 1000, min_interval_s=300) == 300
