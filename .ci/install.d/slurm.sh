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
"$(dirname "$0")/../apt-install" slurm slurm-wlm munge
echo "slurm: installed $(dpkg-query -W -f='${Version}' slurmctld)"
