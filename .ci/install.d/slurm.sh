#!/usr/bin/env bash
# Installs Debian's Slurm (slurmctld, slurmd, client commands) and MUNGE for the live Slurm tests.
#
# The tests never use the system services: tests/fixtures/slurm.py starts private munged, slurmctld
# and slurmd with their own config, key, sockets and pid files in a temp dir. So the packages' own
# start-up attempts are blocked while installing (a policy-rc.d that answers "not allowed", removed
# afterwards unless one was already there) and any daemon they did start is not needed by anything.
# Idempotent: does nothing when the commands are already present. Runs as root with no stdin.
set -euo pipefail

need=()
for cmd in slurmctld slurmd squeue sbatch scontrol munged; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ "${#need[@]}" -eq 0 ]; then
  echo "slurm: already installed ($(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null || echo 'not from a package'))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm: missing ${need[*]}; run this script as root (it apt-get installs slurm-wlm and munge)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# installed by .ci/install.d/slurm.sh while installing packages\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  own_policy=1
fi
cleanup() { if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get update -q
apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  slurm-wlm munge </dev/null
echo "slurm: installed $(dpkg-query -W -f='${Version}' slurmctld)"
