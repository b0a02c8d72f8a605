"""The transport's SSL and SASL_SSL settings against the broker's real TLS and SASL listeners."""

from __future__ import annotations

import uuid

import pytest

from tests.fixtures.kafka import SASL_USERS
from tests.kafka.helpers import decoded, envelope, poll_until
from transport.base import TransportError
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport

pytestmark = pytest.mark.kafka

USER, PASSWORD = next(iter(SASL_USERS.items()))


@pytest.fixture
def topic(kafka_broker):
    name = f"sec-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(name, 1)
    return name


def _round_trip(settings: dict, env: dict, topic: str, node: str) -> None:
    p = KafkaProducerTransport(settings, env=env)
    try:
        assert p.idempotent
        for seq in range(3):
            p.send(topic, node.encode(), envelope(node, seq))
        p.flush(30)
    finally:
        p.close()
    c = KafkaConsumerTransport(settings, [topic], group_id=f"sec-{uuid.uuid4().hex[:6]}", env=env)
    try:
        got = [decoded(r.value) for r in poll_until(c, 3)]
    finally:
        c.close()
    assert got == [(node, s) for s in range(3)]


def test_ssl_with_the_brokers_ca(kafka_broker, topic):
    settings = {
        "bootstrap": kafka_broker.ssl_bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(kafka_broker.ca_file),
    }
    _round_trip(settings, {}, topic, "node-ssl")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_with_credentials_from_the_environment(kafka_broker, topic, mechanism):
    settings = {
        "bootstrap": kafka_broker.sasl_ssl_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_username_env": "GP_TEST_KAFKA_USER",
        "sasl_password_env": "GP_TEST_KAFKA_PASSWORD",
        "ssl_cafile": str(kafka_broker.ca_file),
    }
    _round_trip(
        settings,
        {"GP_TEST_KAFKA_USER": USER, "GP_TEST_KAFKA_PASSWORD": PASSWORD},
        topic,
        f"node-{mechanism.lower()}",
    )


def test_wrong_password_fails_naming_the_variables_not_the_secret(kafka_broker):
    settings = {
        "bootstrap": kafka_broker.sasl_ssl_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username_env": "GP_TEST_KAFKA_USER",
        "sasl_password_env": "GP_TEST_KAFKA_PASSWORD",
        "ssl_cafile": str(kafka_broker.ca_file),
        "bootstrap_timeout_ms": 5000,
    }
    with pytest.raises(TransportError) as err:
        KafkaProducerTransport(
            settings, env={"GP_TEST_KAFKA_USER": USER, "GP_TEST_KAFKA_PASSWORD": "wrong-secret-xyz"}
        ).close()
    msg = str(err.value)
    assert "$GP_TEST_KAFKA_PASSWORD" in msg and kafka_broker.sasl_ssl_bootstrap in msg
    assert "wrong-secret-xyz" not in msg


def test_ssl_refuses_a_broker_it_cannot_verify(kafka_broker):
    settings = {
        "bootstrap": kafka_broker.ssl_bootstrap,
        "security_protocol": "SSL",
        "bootstrap_timeout_ms": 3000,
    }  # no ssl_cafile: the self-signed broker is not trusted
    with pytest.raises(TransportError, match="expect SSL"):
        KafkaProducerTransport(settings).close()
