"""`[store.server]` parsing: defaults, validation by key name, and secrets kept out of the file.

These need no server and so carry no clickhouse_server marker."""

from __future__ import annotations

import pytest

from contracts.config import ConfigError, parse
from pipeline.server_store import ServerStore


def server(table: dict):
    return parse({"store": {"server": table}}).store.server


def test_defaults_and_the_port_follows_secure():
    cfg = server({})
    assert (cfg.host, cfg.effective_port, cfg.database, cfg.user, cfg.compression, cfg.retries) == (
        "localhost",
        9000,
        "default",
        "default",
        "lz4",
        5,
    )
    assert server({"secure": True}).effective_port == 9440
    assert server({"secure": True, "port": 19440}).address == "localhost:19440"


def test_the_http_port_for_inserts_follows_secure_too():
    assert server({}).effective_http_port == 8123
    assert server({"secure": True}).effective_http_port == 8443
    assert server({"secure": True, "http_port": 18443}).effective_http_port == 18443


def test_a_literal_password_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="password_env") as e:
        server({"host": "ch1", "password": "hunter2-secret"})
    assert "hunter2-secret" not in str(e.value)


def test_unknown_key_is_named_with_the_nearest_known_one():
    with pytest.raises(ConfigError, match=r"\[store.server\].hots: unknown key; did you mean 'host'\?"):
        server({"hots": "ch1"})


@pytest.mark.parametrize(
    "table, match",
    [
        ({"port": "9000"}, r"\[store.server\].port: expected int, got str"),
        ({"port": 70000}, r"port: expected int <= 65535, got 70000"),
        ({"http_port": -1}, r"\[store.server\].http_port: expected int >= 0, got -1"),
        ({"secure": "yes"}, r"secure: expected bool"),
        ({"retries": True}, r"retries: expected int, got bool"),
        ({"retries": -1}, r"retries: expected int >= 0, got -1"),
        ({"compression": "zstd"}, r"compression: invalid enum value 'zstd'; expected one of 'lz4', 'lz4hc'"),
        ({"cluster": "prod-east"}, r"cluster: expected str matching regex .*, got 'prod-east'"),
        ({"database": "a;DROP"}, r"database: expected str matching regex .*, got 'a;DROP'"),
        ({"connect_timeout_s": 0}, r"connect_timeout_s: expected float > 0.0, got 0"),
        ({"password_env": "NOT A VARIABLE"}, r"password_env: expected str matching regex"),
    ],
)
def test_bad_values_are_named(table, match):
    with pytest.raises(ConfigError, match=match):
        server(table)


def test_integer_timeouts_are_accepted_as_seconds():
    assert server({"connect_timeout_s": 3}).connect_timeout_s == 3.0


def test_a_missing_ca_file_is_named_before_connecting():
    with pytest.raises(ConfigError, match=r"ca_certs: /nonexistent/ca.pem is not a readable file"):
        ServerStore(server({"ca_certs": "/nonexistent/ca.pem"}))


def test_password_comes_from_the_named_variable(monkeypatch):
    cfg = server({"password_env": "GOODPUT_TEST_CH_PW"})
    monkeypatch.setenv("GOODPUT_TEST_CH_PW", "from-env")
    assert cfg.password() == "from-env"
    assert "from-env" not in repr(cfg)
    monkeypatch.delenv("GOODPUT_TEST_CH_PW")
    with pytest.raises(ConfigError, match="GOODPUT_TEST_CH_PW .* is not set"):
        cfg.password()
    assert server({}).password() == ""
