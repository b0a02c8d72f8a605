"""KafkaSettings: the config table is validated, secrets come only from the environment, and a
client that cannot reach its brokers says which ones."""

import logging

import pytest

from transport.base import TransportError
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport, KafkaSettings


def test_bare_bootstrap_string_gives_plaintext_defaults():
    s = KafkaSettings.from_config("k1:9092, k2:9092")
    kw = s.client_kwargs(env={})
    assert kw["bootstrap_servers"] == ["k1:9092", "k2:9092"]
    assert kw["security_protocol"] == "PLAINTEXT"
    assert "sasl_plain_password" not in kw and "ssl_password" not in kw


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_reads_credentials_from_named_environment_variables(mechanism):
    s = KafkaSettings.from_config(
        {
            "bootstrap": "k1:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_username_env": "KU",
            "sasl_password_env": "KP",
            "ssl_cafile": "/etc/ca.pem",
        }
    )
    kw = s.client_kwargs(env={"KU": "agent", "KP": "s3cret-value"})
    assert kw["sasl_mechanism"] == mechanism
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("agent", "s3cret-value")
    assert kw["ssl_cafile"] == "/etc/ca.pem" and kw["ssl_check_hostname"] is True


def test_ssl_key_password_from_environment():
    s = KafkaSettings.from_config(
        {
            "bootstrap": "k1:9093",
            "security_protocol": "SSL",
            "ssl_certfile": "/c.pem",
            "ssl_keyfile": "/k.pem",
            "ssl_password_env": "KEYPW",
        }
    )
    kw = s.client_kwargs(env={"KEYPW": "pw"})
    assert kw["ssl_password"] == "pw" and kw["ssl_certfile"] == "/c.pem"
    assert "sasl_mechanism" not in kw


def test_secrets_never_appear_in_repr_or_logs(caplog):
    s = KafkaSettings.from_config(
        {
            "bootstrap": "k1:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username_env": "KU",
            "sasl_password_env": "KP",
        }
    )
    with caplog.at_level(logging.DEBUG):
        s.client_kwargs(env={"KU": "agent", "KP": "s3cret-value"})
        logging.getLogger("test").info("settings: %r; hint: %s", s, s.what_to_check())
    assert "s3cret-value" not in repr(s) and "s3cret-value" not in caplog.text
    assert "$KP" in s.what_to_check()


@pytest.mark.parametrize("key", ["sasl_password", "password", "ssl_password", "sasl_plain_password"])
def test_password_in_the_file_is_refused(key):
    with pytest.raises(ValueError, match="environment variable"):
        KafkaSettings.from_config({"bootstrap": "k:1", key: "oops"})


def test_missing_environment_variable_names_it():
    s = KafkaSettings.from_config(
        {
            "bootstrap": "k1:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username_env": "NO_SUCH_USER_VAR",
            "sasl_password_env": "NO_SUCH_PW_VAR",
        }
    )
    with pytest.raises(TransportError, match="NO_SUCH_USER_VAR"):
        s.client_kwargs(env={})


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"bootstrap": "k:1", "compresion": "zstd"}, "unknown key"),
        ({}, "bootstrap is required"),
        ({"bootstrap": "k:1", "security_protocol": "SASL_PLAINTEXT"}, "security_protocol"),
        (
            {
                "bootstrap": "k:1",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "GSSAPI",
                "sasl_username_env": "U",
                "sasl_password_env": "P",
            },
            "sasl_mechanism",
        ),
        (
            {"bootstrap": "k:1", "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
            "sasl_username_env",
        ),
        ({"bootstrap": "k:1", "sasl_mechanism": "PLAIN"}, "use SASL_SSL"),
        ({"bootstrap": "k:1", "compression": "gzip"}, "compression"),
        ({"bootstrap": "k:1", "max_in_flight": 6}, "idempotent"),
        ({"bootstrap": "k:1", "delivery_timeout_ms": 1000}, "delivery_timeout_ms"),
    ],
)
def test_bad_config_is_rejected_with_the_key_named(cfg, match):
    with pytest.raises(ValueError, match=match):
        KafkaSettings.from_config(cfg)


def test_unreachable_bootstrap_names_the_servers():
    with pytest.raises(TransportError, match="127.0.0.1:1 are up"):
        KafkaProducerTransport({"bootstrap": "127.0.0.1:1", "bootstrap_timeout_ms": 1000}).close()


def test_unreachable_bootstrap_fails_the_consumer_too():
    with pytest.raises(TransportError, match="group goodput-loader.*127.0.0.1:1 are up"):
        KafkaConsumerTransport(
            {"bootstrap": "127.0.0.1:1", "bootstrap_timeout_ms": 1000}, ["goodput.gpu"]
        ).close()
