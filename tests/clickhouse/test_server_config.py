"""`[store.server]` parsing: defaults, validation by key name, and secrets kept out of the file.

These need no server and so carry no clickhouse_server marker."""

from __future__ import annotations

import pytest

from contracts.config import ConfigError
from pipeline.server_store import ServerConfig
from pipeline.store import StoreError


def test_defaults_and_the_port_follows_secure():
    cfg = ServerConfig.parse({})
    assert (cfg.host, cfg.effective_port, cfg.database, cfg.user, cfg.compression, cfg.retries) == (
        "localhost",
        9000,
        "default",
        "default",
        "lz4",
        5,
    )
    assert ServerConfig.parse({"secure": True}).effective_port == 9440
    assert ServerConfig.parse({"secure": True, "port": 19440}).address == "localhost:19440"


def test_a_literal_password_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="password_env") as e:
        ServerConfig.parse({"host": "ch1", "password": "hunter2-secret"})
    assert "hunter2-secret" not in str(e.value)


def test_unknown_key_is_named_with_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) hots; known: host, port"):
        ServerConfig.parse({"hots": "ch1"})


@pytest.mark.parametrize(
    "table, match",
    [
        ({"port": "9000"}, r"\[store.server\].port: expected int, got str"),
        ({"port": 70000}, r"port: 70000 is not a TCP port"),
        ({"secure": "yes"}, r"secure: expected bool"),
        ({"retries": True}, r"retries: expected int, got bool"),
        ({"retries": -1}, r"retries: must be 0 or more"),
        ({"compression": "zstd"}, r"compression: 'zstd' is not one of lz4, lz4hc, none"),
        ({"cluster": "prod-east"}, r"cluster: 'prod-east' must be a plain identifier"),
        ({"database": "a;DROP"}, r"database: 'a;DROP' must be a plain identifier"),
        ({"connect_timeout_s": 0}, r"connect_timeout_s and send_receive_timeout_s must be > 0"),
        ({"ca_certs": "/nonexistent/ca.pem"}, r"ca_certs: /nonexistent/ca.pem is not a readable file"),
    ],
)
def test_bad_values_are_named(table, match):
    with pytest.raises(ConfigError, match=match):
        ServerConfig.parse(table)


def test_integer_timeouts_are_accepted_as_seconds():
    assert ServerConfig.parse({"connect_timeout_s": 3}).connect_timeout_s == 3.0


def test_password_comes_from_the_named_variable(monkeypatch):
    cfg = ServerConfig.parse({"password_env": "GOODPUT_TEST_CH_PW"})
    monkeypatch.setenv("GOODPUT_TEST_CH_PW", "from-env")
    assert cfg.password() == "from-env"
    monkeypatch.delenv("GOODPUT_TEST_CH_PW")
    with pytest.raises(StoreError, match="GOODPUT_TEST_CH_PW .* is not set"):
        cfg.password()
    assert ServerConfig.parse({}).password() == ""
