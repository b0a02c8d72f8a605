"""Clients that share no code with kafka-python read what our producer wrote: kcat (librdkafka,
Debian's package) and Kafka's own Java console consumer from the broker's jars. If either decodes our
zstd batches, keys and envelopes, so will any loader or tool a site points at the topics."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from contracts.schema import topic_for
from tests.kafka.helpers import envelope
from transport.kafka import KafkaProducerTransport, ensure_topics

pytestmark = pytest.mark.kafka

NODES = ("node-a", "node-b", "node-c")
SEQS = range(5)


@pytest.fixture(scope="module")
def written(kafka_broker):
    """A goodput.gpu topic (own prefix) with 15 envelopes from three nodes, zstd-compressed."""
    prefix = f"ind-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_broker.bootstrap, ["gpu"], partitions=2, prefix=prefix)
    topic = topic_for("gpu", prefix)
    p = KafkaProducerTransport({"bootstrap": kafka_broker.bootstrap, "compression": "zstd"})
    for seq in SEQS:
        for node in NODES:
            p.send(topic, node.encode(), envelope(node, seq))
    p.flush(30)
    p.close()
    return topic, {(n, s) for n in NODES for s in SEQS}


def _parse(lines: list[str]) -> set[tuple[str, int]]:
    out = set()
    for line in lines:
        key, _, value = line.partition("\t")
        env = json.loads(value)
        assert env["node"] == key, "the message key must be the sending node"
        out.add((env["node"], env["seq"]))
    return out


def test_kcat_reads_the_topic(kafka_broker, written):
    topic, expected = written
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail(
            "kcat is not installed: run `bash .ci/install.d/kafka.sh` (apt-get install kcat)", pytrace=False
        )
    done = subprocess.run(
        [
            kcat,
            "-b",
            kafka_broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%k\t%s\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line]
    assert len(lines) == len(expected)
    assert _parse(lines) == expected


def test_kafka_console_consumer_reads_the_topic(kafka_broker, written):
    topic, expected = written
    cmd = kafka_broker.java_cmd(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        kafka_broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(len(expected)),
        "--timeout-ms",
        "30000",
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "key.separator=\t",
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("node-")]
    assert len(lines) == len(expected), done.stdout[-2000:] + done.stderr[-2000:]
    assert _parse(lines) == expected
