#!/usr/bin/env bash
# Kafka for the test suite: the broker's jars from Maven Central into
# ${GOODPUT_CACHE:-$HOME/.cache/goodput}/kafka-<version>/libs (layout and version defined once, in
# tests/fixtures/kafka_dist.py), plus kcat from Debian as an independent client. Safe to rerun: each
# step skips what is present. The tests start the broker themselves (tests/fixtures/kafka.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  echo "kafka: installing a Java 17 runtime and Maven from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven
fi
python3 tests/fixtures/kafka_dist.py install
if ! command -v kcat >/dev/null; then
  echo "kafka: installing kcat from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat
fi
echo "kafka: ready ($(kcat -V 2>/dev/null | head -1 || echo 'kcat missing'))"
