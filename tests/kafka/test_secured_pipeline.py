"""End to end over SASL_SSL with ACLs: the real agent and the real loader service, started from one
config file as a user would, each with its own credentials from the environment, against a broker
that authenticates every connection and authorizes every request (tests/fixtures/kafka_secured.py).

What is proved: the data arrives; each principal can do only what docs/kafka.md's ACLs grant (an
agent writes the goodput topics and reads nothing); and no password, right or wrong, appears in a
log, on /metrics, in a dead letter or in an error message.
"""

from __future__ import annotations

import signal
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from contracts.schema import topic_for
from pipeline.stores import open_store
from tests.agents.harness import NODE, NODE_KINDS, FixtureNode
from tests.fixtures.kafka_secured import USERS, SecuredKafkaBroker
from tests.fixtures.ports import free_port
from tests.loader.helpers import LoaderProcess, metric_sum, scrape
from transport.base import TransportError
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport, KafkaSettings, ensure_topics

pytestmark = pytest.mark.kafka

WRONG_PASSWORD = "wrong-pw-7d0b"
SECRETS = (*USERS.values(), WRONG_PASSWORD)


class Deployment:
    """One config file for an agent and a loader on the secured broker: topics made and ACLs granted by
    the admin, `<prefix>.*` topics, loader group `group`, chDB store and /metrics ports of both."""

    def __init__(self, root: Path, broker: SecuredKafkaBroker, *, agent_password: str | None = None) -> None:
        self.broker = broker
        self.group = f"loader-{uuid.uuid4().hex[:8]}"
        self.store = root / "store"
        self.loader_port = free_port()
        self.node = FixtureNode(
            root,
            broker.sasl_ssl_bootstrap,
            kafka=broker.settings(group_id=self.group, bootstrap_timeout_ms=5000),
            env=broker.env("agent", agent_password),
            extra_agent="message_version = 2",  # the columnar envelope, end to end through the loader
            extra_tables=(
                f'[loader]\nmetrics_address = "127.0.0.1:{self.loader_port}"\n'
                f'flush_interval_s = 0.3\nretry_backoff_max_s = 1.0\n[store]\npath = "{self.store}"\n'
            ),
            create_topics=False,
        )
        self.prefix = self.node.prefix
        ensure_topics(broker.settings(), partitions=1, prefix=self.prefix, env=broker.env("admin"))
        broker.grant_goodput_acls(self.prefix, self.group)
        self.loader: LoaderProcess | None = None

    def start_loader(self, password: str | None = None) -> LoaderProcess:
        self.loader = LoaderProcess(
            self.node.config, env=self.broker.env("loader", password), log=self.node.root / "loader.log"
        )
        return self.loader

    def loader_metrics(self) -> str:
        url = f"http://127.0.0.1:{self.loader_port}/metrics"
        return urllib.request.urlopen(url, timeout=10).read().decode()

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except OSError:  # an endpoint not up yet
                pass
            time.sleep(0.25)
        loader_log = self.loader.log()[-3000:] if self.loader else ""
        raise AssertionError(
            f"timed out after {timeout_s} s waiting for {what}:\n{self.node.log_tail()}\n{loader_log}"
        )

    def stop(self) -> None:
        if self.node.proc is not None:
            self.node.stop(signal.SIGKILL)
        if self.loader is not None and self.loader.proc.poll() is None:
            self.loader.kill()


@pytest.fixture
def deployment(tmp_path, secured_kafka_broker):
    made: list[Deployment] = []

    def make(**kw) -> Deployment:
        made.append(Deployment(tmp_path / f"d{len(made)}", secured_kafka_broker, **kw))
        return made[-1]

    yield make
    for d in made:
        d.stop()


def assert_no_secret(where: str, text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} contains a password ({len(leaked)} of them)"


def test_agent_and_loader_stream_over_sasl_ssl_from_one_config(deployment):
    d = deployment()
    d.node.start()
    loader = d.start_loader()
    d.wait_for(lambda: all(d.node.next_seqs()[k] >= 6 for k in NODE_KINDS), 60, "six batches of each kind")
    d.wait_for(
        lambda: metric_sum(scrape(d.loader_port), "goodput_loader_batches_loaded_total") >= 6,
        90,
        "the loader to store batches",
    )
    # a malformed record on a goodput topic, with the agent's credentials (it may write there)
    bad = KafkaProducerTransport(d.broker.settings(), env=d.broker.env("agent"))
    bad.send(topic_for("gpu", d.prefix), NODE.encode(), b'{"not": "an envelope"}')
    bad.flush(30)
    bad.close()
    d.wait_for(
        lambda: metric_sum(scrape(d.loader_port), "goodput_loader_dead_letters_total") >= 1,
        60,
        "the malformed record to be dead-lettered",
    )
    metrics_text = {"agent /metrics": d.node.scrape(), "loader /metrics": d.loader_metrics()}
    assert d.node.stop() == 0
    sent = d.node.next_seqs()
    d.wait_for(
        lambda: (
            metric_sum(scrape(d.loader_port), "goodput_loader_batches_loaded_total")
            >= sum(sent[k] for k in NODE_KINDS)
        ),
        90,
        "the loader to store every batch the agent sent",
    )
    assert loader.terminate() == 0

    with open_store("chdb", str(d.store)) as store:
        ledger = store.query_arrow(f"SELECT kind, seq FROM ingested_batches WHERE node = '{NODE}'")
        dead = store.query_arrow("SELECT * FROM dead_letters").to_pylist()
    stored: dict[str, list[int]] = {}
    for kind, seq in zip(ledger.column("kind").to_pylist(), ledger.column("seq").to_pylist(), strict=True):
        stored.setdefault(kind, []).append(seq)
    for kind in NODE_KINDS:
        assert sorted(stored[kind]) == list(range(sent[kind])), kind
    assert len(dead) == 1 and dead[0]["source"] == topic_for("gpu", d.prefix)

    texts = {
        **metrics_text,
        "agent log": d.node.log_path.read_text(errors="replace"),
        "loader log": loader.log(),
        "dead letters": repr(dead),
        "config file": d.node.config.read_text(),
    }
    for where, text in texts.items():
        assert_no_secret(where, text)
    assert "GOODPUT_KAFKA_PASSWORD" in texts["config file"]  # the file names the variable, nothing more


def test_an_agents_credentials_write_only_goodput_topics_and_read_nothing(deployment, secured_kafka_broker):
    b = secured_kafka_broker
    d = deployment()
    gpu_topic = topic_for("gpu", d.prefix)
    other = f"other-{uuid.uuid4().hex[:6]}"
    ensure_topics(b.settings(), kinds=("gpu",), partitions=1, prefix=other, env=b.env("admin"))

    # reading as the agent, through a consumer group as the loader would: refused at the group
    consumer = KafkaConsumerTransport(b.settings(), [gpu_topic], group_id=d.group, env=b.env("agent"))
    try:
        with pytest.raises(TransportError, match="GroupAuthorizationFailed") as err:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                consumer.poll(10, 0.5)
    finally:
        consumer.close()
    assert_no_secret("the refused read's error", str(err.value))

    # reading as the agent without a group (a bare fetch): refused at the topic
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    raw = KafkaConsumer(
        **KafkaSettings.from_config(b.settings()).client_kwargs(b.env("agent")), group_id=None
    )
    try:
        raw.assign([TopicPartition(gpu_topic, 0)])
        raw.seek_to_beginning()
        with pytest.raises(TopicAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                raw.poll(timeout_ms=500)
    finally:
        raw.close()

    # writing as the agent: its own topics yes, any other topic no
    settings = b.settings(max_block_ms=3000, delivery_timeout_ms=5000, request_timeout_ms=3000, linger_ms=0)
    producer = KafkaProducerTransport(settings, env=b.env("agent"))
    try:
        producer.send(gpu_topic, b"n", b"{}")
        producer.flush(30)
        with pytest.raises(TransportError, match="TopicAuthorizationFailed"):
            producer.send(topic_for("gpu", other), b"n", b"{}")
            producer.flush(30)
    finally:
        producer.close(5)

    # the loader's credentials read the topics but cannot write them
    loader_producer = KafkaProducerTransport(settings, env=b.env("loader"))
    try:
        with pytest.raises(TransportError, match="TopicAuthorizationFailed|ClusterAuthorizationFailed"):
            loader_producer.send(gpu_topic, b"n", b"{}")
            loader_producer.flush(30)
    finally:
        loader_producer.close(5)
    reader = KafkaConsumerTransport(b.settings(), [gpu_topic], group_id=d.group, env=b.env("loader"))
    try:
        got: list = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = reader.poll(10, 0.5)
    finally:
        reader.close()
    assert [r.value for r in got] == [b"{}"]


def test_a_wrong_password_is_refused_and_shown_nowhere(deployment):
    d = deployment(agent_password=WRONG_PASSWORD)
    d.node.start()
    loader = d.start_loader(WRONG_PASSWORD)

    def agent_refused() -> bool:
        return any(
            "$GOODPUT_KAFKA_PASSWORD" in r.get("msg", "") and r.get("level") == "warning"
            for r in d.node.log_records()
        )

    d.wait_for(agent_refused, 60, "the agent to report that Kafka refused it")
    d.wait_for(
        lambda: (
            metric_sum(scrape(d.loader_port), "goodput_loader_transport_errors_total", operation="connect")
            >= 1
        ),
        60,
        "the loader to count a refused connection",
    )
    metrics_text = {"agent /metrics": d.node.scrape(), "loader /metrics": d.loader_metrics()}
    assert d.node.metric("goodput_agent_spool_batches") > 0  # collecting goes on, into the spool
    assert d.node.stop() == 0
    assert loader.terminate() == 0
    agent_log = d.node.log_path.read_text(errors="replace")
    loader_log = loader.log()
    assert "$GOODPUT_KAFKA_PASSWORD" in loader_log  # the errors name the variable to check...
    for where, text in {**metrics_text, "agent log": agent_log, "loader log": loader_log}.items():
        assert_no_secret(where, text)  # ...never its value
