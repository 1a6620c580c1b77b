# Sourced by prolog.sh, epilog.sh and healthcheck.sh (not run on its own).
#
# The rule: these hooks never fail a job for the admin's mistake or a broken install, only for a
# node fault. Exit 1 (Slurm requeues the job and keeps it off the node) only when the health run
# itself says "refuse" (its exit code $SLURMADM_REFUSE_EXIT); anything else that goes wrong (no
# slurmadm.env, a broken one, a wrong SLURMADM_PYTHON, a virtualenv without slurmadm, a crash)
# is logged loudly (syslog daemon.alert, tag slurmadm-health, and stderr) and the job runs.
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
#  3. slurmadm_hook runs `$SLURMADM_PYTHON -I -m slurmadm.health <context>` (isolated: the current
#     directory and PYTHON* variables cannot change what runs as root; lean: no CLI framework)
#     and turns its exit code into the hook's.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
slurmadm_alert() {
    # loud, and never fatal itself
    logger -p daemon.alert -t slurmadm-health -- "$1" 2>/dev/null
    echo "slurmadm: error: $1" >&2
}

slurmadm_env_found=
for slurmadm_env in "${0%/*}/slurmadm.env" "$(dirname "${SLURM_CONF:-/etc/slurm/slurm.conf}")/slurmadm.env"; do
    if [ -r "$slurmadm_env" ]; then
        slurmadm_env_found=$slurmadm_env
        # a syntax error in a sourced file would end this shell (and fail the job): check first
        if sh -n "$slurmadm_env" 2>/dev/null; then
            set -a
            . "$slurmadm_env"
            set +a
        else
            slurmadm_alert "slurmadm hook: $slurmadm_env is not valid sh; ignoring it"
        fi
        break
    fi
done
if [ -z "$slurmadm_env_found" ]; then
    slurmadm_alert "slurmadm hook: no slurmadm.env next to ${0%/*}/ or slurm.conf; trying python3 from PATH"
fi

# set after slurmadm.env, which cannot change it: the health run's "node fault: refuse the job";
# nothing else exits 86 (a traceback exits 1, a missing interpreter 127, a signal 128+n)
SLURMADM_REFUSE_EXIT=86
export SLURMADM_REFUSE_EXIT

slurmadm_hook() {
    slurmadm_python=${SLURMADM_PYTHON:-python3}
    "$slurmadm_python" -I -m slurmadm.health "$1"
    slurmadm_rc=$?
    case $slurmadm_rc in
        0) exit 0 ;;
        "$SLURMADM_REFUSE_EXIT") exit 1 ;;
    esac
    if [ "$1" = periodic ]; then
        slurmadm_then="health enforcement is off on this node"  # no job here: say what is lost
    else
        slurmadm_then="the job runs"
    fi
    slurmadm_alert "slurmadm hook $1: $slurmadm_python -I -m slurmadm.health $1 exited $slurmadm_rc (a broken install or site, not a node fault); $slurmadm_then"
    exit 0
}
