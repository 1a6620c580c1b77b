# Sourced by prolog.sh, epilog.sh and healthcheck.sh (not run on its own).
#
# Slurm runs these hooks as root with no PATH and none of the admin's environment (and gives
# HealthCheckProgram not even SLURM_CONF). So:
#  1. PATH is set to the usual system directories;
#  2. the first slurmadm.env found is read: next to these scripts, else next to slurm.conf
#     (${SLURM_CONF%/*}, default /etc/slurm). Whoever installs slurmadm on the compute nodes
#     writes it, for example:
#       SLURMADM_SITE=/etc/slurmadm/site.toml          # the site file
#       SLURMADM_PYTHON=/opt/slurmadm/venv/bin/python  # a python with slurmadm installed
#       SLURMADM_CACHE_DIR=/var/cache/slurmadm         # per-node settings cache (optional)
#     `slurmadm dev-cluster up` links these scripts into <state>/prolog_epilog/ and writes one
#     there (adding LD_LIBRARY_PATH and SLURMADM_FAKE_NVML_DIR for the stand-in NVML);
#  3. the hook execs `$SLURMADM_PYTHON -I -m slurmadm.health <context>` (isolated: the current
#     directory and PYTHON* variables cannot change what runs as root; lean: no CLI framework).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
for slurmadm_env in "${0%/*}/slurmadm.env" "$(dirname "${SLURM_CONF:-/etc/slurm/slurm.conf}")/slurmadm.env"; do
    if [ -r "$slurmadm_env" ]; then
        set -a
        . "$slurmadm_env"
        set +a
        break
    fi
done
