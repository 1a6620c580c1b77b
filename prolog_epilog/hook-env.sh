# Sourced by prolog.sh, epilog.sh and healthcheck.sh (not run on its own).
#
# Slurm runs these hooks as root with no PATH and none of the admin's environment. So:
#  1. PATH is set to the usual system directories;
#  2. `${SLURM_CONF%/*}/slurmadm.env` (default /etc/slurm/slurmadm.env) is read when present.
#     Whoever installs slurmadm on the compute nodes writes it, for example:
#       SLURMADM_SITE=/etc/slurmadm/site.toml          # the site file
#       SLURMADM_PYTHON=/opt/slurmadm/venv/bin/python  # a python with slurmadm installed
#       SLURMADM_CACHE_DIR=/var/cache/slurmadm         # per-node settings cache (optional)
#     `slurmadm dev-cluster up` writes one for the dev cluster (it adds LD_LIBRARY_PATH and
#     SLURMADM_FAKE_NVML_DIR for the stand-in NVML).
#  3. The hook execs `$SLURMADM_PYTHON -m slurmadm.health <context>` (lean: no CLI framework).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
slurmadm_env="${SLURM_CONF:-/etc/slurm/slurm.conf}"
slurmadm_env="${slurmadm_env%/*}/slurmadm.env"
if [ -r "$slurmadm_env" ]; then
    set -a
    . "$slurmadm_env"
    set +a
fi
