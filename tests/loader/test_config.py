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
        ({"live_every_s": 60.0}, "live_every_s (60.0) needs analyze_every_s > 0"),
        ({"flush_recods": 10}, "[loader].flush_recods: unknown key; did you mean 'flush_records'?"),
        ({"flush_records": "many"}, "[loader].flush_records: expected int, got str"),
    ],
)
def test_bad_loader_values_are_refused_naming_the_key(table, words):
    with pytest.raises(config.ConfigError, match=re.escape(words)):
        config.parse({"loader": table})


def test_defaults_and_metrics_endpoint():
    lc = config.parse({}).loader
    assert lc.metrics_endpoint == ("0.0.0.0", 9479)
    assert lc.flush_records >= lc.max_poll_records, "a flush holds at least one full poll"
    assert config.parse({"loader": {"metrics_address": ""}}).loader.metrics_endpoint is None
    assert config.parse({"loader": {"metrics_address": "[::1]:0"}}).loader.metrics_endpoint == ("::1", 0)


def _outward_ipv4() -> str:
    """This host's address on the interface a remote Prometheus would reach (not loopback): the source
    address the kernel picks for a route off the host (a UDP connect sends nothing)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        return s.getsockname()[0]


@pytest.mark.parametrize("table", ["agent", "loader", "exporter"])
def test_default_metrics_endpoints_answer_a_remote_scraper_not_only_loopback(table):
    """Every /metrics a remote Prometheus scrapes binds every interface by default: served at the
    default host, it answers on the host's outward address."""
    import urllib.request

    from contracts.config import parse_address
    from pipeline.loader_service import LoaderMetrics

    host, port = parse_address(getattr(config.parse({}), table).metrics_address, table)
    assert port in (9477, 9479, 9480)
    outward = _outward_ipv4()
    assert not outward.startswith("127."), f"the test needs a non-loopback address, got {outward}"
    metrics = LoaderMetrics()
    try:
        bound_host, bound_port = metrics.serve(host, 0)  # the default host; any free port
        assert bound_host == "0.0.0.0"
        with urllib.request.urlopen(f"http://{outward}:{bound_port}/metrics", timeout=5) as r:
            assert b"goodput_loader_" in r.read()
    finally:
        metrics.close()
