#!/usr/bin/env bash
# Installs what the agent's deployment tests need: systemd-analyze (Debian's systemd package), which
# verifies agents/deploy/goodput-agent.service. Nothing is started. Idempotent; runs as root.
set -euo pipefail

if command -v systemd-analyze >/dev/null 2>&1; then
  echo "agent: systemd-analyze present ($(systemd-analyze --version | head -1))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "agent: systemd-analyze missing; run this script as root (it apt-get installs systemd)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends systemd </dev/null
echo "agent: installed systemd $(dpkg-query -W -f='${Version}' systemd)"
