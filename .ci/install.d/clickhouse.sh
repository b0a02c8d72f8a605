#!/usr/bin/env bash
# Installs Debian's clickhouse-server (18.16 on bookworm) for the ClickHouse-server store tests.
#
# The tests never use the system service: tests/fixtures/clickhouse.py starts a private server as the
# current user, with its own config.xml, users.xml, ports and data directory in a temp dir. So the
# package's own start-up attempt is blocked while installing (a policy-rc.d that answers "not
# allowed", removed afterwards unless one was already there). Idempotent: does nothing when the
# binary is present. Runs as root (or with passwordless sudo) and no stdin.
set -euo pipefail

binary=""
for candidate in clickhouse-server /usr/sbin/clickhouse-server; do
  if command -v "$candidate" >/dev/null 2>&1; then binary="$(command -v "$candidate")"; break; fi
done
if [ -n "$binary" ]; then
  echo "clickhouse: already installed ($binary, $(dpkg-query -W -f='${Version}' clickhouse-server 2>/dev/null || echo 'not from a package'))"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    echo "clickhouse: clickhouse-server is missing; run this script as root (it apt-get installs clickhouse-server)" >&2
    exit 1
  fi
fi

policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  "${as_root[@]}" sh -c "printf '#!/bin/sh\n# installed by .ci/install.d/clickhouse.sh while installing packages\nexit 101\n' >$policy && chmod 755 $policy"
  own_policy=1
fi
cleanup() { if [ "$own_policy" -eq 1 ]; then "${as_root[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

"${as_root[@]}" apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  clickhouse-server openssl </dev/null
echo "clickhouse: installed $(dpkg-query -W -f='${Version}' clickhouse-server)"
