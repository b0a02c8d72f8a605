"""[loader] keys: defaults that hold together, refusals that name the key."""

from __future__ import annotations

import re

import pytest

from contracts import config
from pipeline import ddl


def test_max_past_days_bound_is_the_raw_tables_ttl():
    assert config.LoaderConfig.MAX_PAST_DAYS == ddl.RAW_TTL_DAYS


@pytest.mark.parametrize(
    "table, words",
    [
        ({"flush_interval_s": 0}, "flush_interval_s"),
        ({"flush_records": 0}, "flush_records"),
        ({"max_past_days": 365}, "max_past_days"),
        ({"retry_backoff_s": 5.0, "retry_backoff_max_s": 1.0}, "retry_backoff_max_s"),
        ({"metrics_address": "9479"}, "metrics_address"),
        ({"analyze_every_s": -1.0}, "analyze_every_s"),
        ({"flush_recods": 10}, "[loader].flush_recods: unknown key; did you mean 'flush_records'?"),
        ({"flush_records": "many"}, "[loader].flush_records: expected int, got str"),
    ],
)
def test_bad_loader_values_are_refused_naming_the_key(table, words):
    with pytest.raises(config.ConfigError, match=re.escape(words)):
        config.parse({"loader": table})


def test_defaults_and_metrics_endpoint():
    lc = config.parse({}).loader
    assert lc.metrics_endpoint == ("127.0.0.1", 9479)
    assert lc.flush_records >= lc.max_poll_records, "a flush holds at least one full poll"
    assert config.parse({"loader": {"metrics_address": ""}}).loader.metrics_endpoint is None
    assert config.parse({"loader": {"metrics_address": "[::1]:0"}}).loader.metrics_endpoint == ("::1", 0)
