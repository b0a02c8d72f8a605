#!/usr/bin/env bash
# Installs Debian's prometheus (prometheus, promtool) and prometheus-alertmanager (alertmanager, amtool)
# for the alert tests (tests/alerts/): promtool checks and unit-tests the rules, amtool checks the
# Alertmanager config and its routes, and the end-to-end test starts a private Prometheus and
# Alertmanager as the current user with their own config, ports and data directories in a temp dir.
#
# The tests never use the system services, so the packages' own start-up attempts are blocked while
# installing (a policy-rc.d that answers "not allowed", removed afterwards unless one was already
# there). Idempotent: does nothing when all four binaries are present. Runs as root (or with
# passwordless sudo) and no stdin.
set -euo pipefail

need=()
for cmd in prometheus promtool alertmanager amtool; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ "${#need[@]}" -eq 0 ]; then
  echo "prometheus: already installed (prometheus $(dpkg-query -W -f='${Version}' prometheus 2>/dev/null || echo '?')," \
    "alertmanager $(dpkg-query -W -f='${Version}' prometheus-alertmanager 2>/dev/null || echo '?'))"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    echo "prometheus: missing ${need[*]}; run this script as root (it apt-get installs prometheus and prometheus-alertmanager)" >&2
    exit 1
  fi
fi

policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  "${as_root[@]}" sh -c "printf '#!/bin/sh\n# installed by .ci/install.d/prometheus.sh while installing packages\nexit 101\n' >$policy && chmod 755 $policy"
  own_policy=1
fi
cleanup() { if [ "$own_policy" -eq 1 ]; then "${as_root[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

"${as_root[@]}" apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  prometheus prometheus-alertmanager </dev/null
echo "prometheus: installed prometheus $(dpkg-query -W -f='${Version}' prometheus)," \
  "alertmanager $(dpkg-query -W -f='${Version}' prometheus-alertmanager)"
