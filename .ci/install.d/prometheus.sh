#!/usr/bin/env bash
# Installs Debian's prometheus (prometheus, promtool) and prometheus-alertmanager (prometheus-alertmanager, amtool)
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
for cmd in prometheus promtool prometheus-alertmanager amtool; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ "${#need[@]}" -eq 0 ]; then
  echo "prometheus: already installed (prometheus $(dpkg-query -W -f='${Version}' prometheus 2>/dev/null || echo '?')," \
    "alertmanager $(dpkg-query -W -f='${Version}' prometheus-alertmanager 2>/dev/null || echo '?'))"
  exit 0
fi

"$(dirname "$0")/../apt-install" prometheus prometheus prometheus-alertmanager
echo "prometheus: installed prometheus $(dpkg-query -W -f='${Version}' prometheus)," \
  "alertmanager $(dpkg-query -W -f='${Version}' prometheus-alertmanager)"
