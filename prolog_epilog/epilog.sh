#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=<dir>/epilog.sh): fast GPU checks after every job, plus
# processes still holding GPUs and NCCL all-reduce when stale. Non-zero exit: the node was
# drained (reason `slurmadm: <check-id>: ... [epilog]`).
if [ -r "${0%/*}/hook-env.sh" ]; then
    . "${0%/*}/hook-env.sh"
    slurmadm_hook epilog
fi
# a broken install (hook-env.sh missing) is no node fault: say so and let the job run
logger -p daemon.alert -t slurmadm-health -- "slurmadm hook epilog: ${0%/*}/hook-env.sh is missing; the job runs" 2>/dev/null
echo "slurmadm: error: ${0%/*}/hook-env.sh is missing; the job runs" >&2
exit 0
