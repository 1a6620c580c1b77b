#!/usr/bin/env bash
# Install the Debian packages slurmadm and its dev cluster need, when they are missing.
# Debian 12 (Slurm 22.05) and Debian 13 (Slurm 24.11). Run as root. Safe to re-run.
set -euo pipefail

PACKAGES=(
  slurm-wlm slurm-client slurmdbd munge            # Slurm with accounting
  mariadb-server mariadb-client                    # slurmdbd's database
  gcc libc6-dev                                    # the stand-in NVML library is compiled from C
  python3 python3-venv python3-dev                 # slurmadm itself
  git ca-certificates procps time                  # time: bench/reference_site.py (peak RSS of each command)
  chromium fonts-dejavu-core                       # tests: the burn-in report in a headless browser
  ipmitool curl                                    # slurmadm bmc: the emulators' cross-check clients
  openipmi                                         # ipmi_sim + sdrcomp: an IPMI BMC we did not write (test bed)
  openssh-server openssh-client util-linux clustershell   # fleet: an sshd per fake node in unshare
                                                          # namespaces; clush for bench/fleet_facts.py
  prometheus prometheus-alertmanager prometheus-node-exporter tmux  # monitoring: rules (promtool), tests, bench, `top`
)
PACKAGES+=("$@")   # callers may add more (e.g. openssh-server ipmitool prometheus)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "error: missing packages (${missing[*]}); run this script as root" >&2
  exit 2
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Don't let the packages start the system's own munge/slurm/mariadb services: the dev cluster
# runs its own daemons under its own state directory.
cleanup_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  cleanup_policy=1
fi
trap '[ $cleanup_policy = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
