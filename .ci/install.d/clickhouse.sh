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

"$(dirname "$0")/../apt-install" clickhouse clickhouse-server openssl
echo "clickhouse: installed $(dpkg-query -W -f='${Version}' clickhouse-server)"
