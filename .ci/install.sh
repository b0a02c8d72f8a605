#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: the Python environment in .venv and,
# through .ci/install.d/*.sh (one script per real component: Kafka, Slurm, ClickHouse server, ...),
# the Debian packages and jars the tests start. Safe to run again: each step skips what is present.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOODPUT_CACHE="${GOODPUT_CACHE:-$HOME/.cache/goodput}"
mkdir -p "$GOODPUT_CACHE"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
for step in .ci/install.d/*.sh; do
  [ -e "$step" ] || continue
  echo "== install: $step"
  bash "$step"
done
