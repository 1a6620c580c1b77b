#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=<dir>/prolog.sh, PrologFlags=Alloc,DeferBatch): fast GPU checks before
# every job, NCCL all-reduce only when no pass is fresher than health.nccl_fresh_hours.
# Exit 0: the node takes the job. Non-zero: it must not; slurmadm has drained it with reason
# `slurmadm: <check-id>: <detail> [prolog]` and Slurm requeues the batch job (keep
# SchedulerParameters=nohold_on_prolog_fail so it runs elsewhere instead of being held).
if [ -r "${0%/*}/hook-env.sh" ]; then
    . "${0%/*}/hook-env.sh"
    slurmadm_hook prolog
fi
# a broken install (hook-env.sh missing) is no node fault: say so and let the job run
logger -p daemon.alert -t slurmadm-health -- "slurmadm hook prolog: ${0%/*}/hook-env.sh is missing; the job runs" 2>/dev/null
echo "slurmadm: error: ${0%/*}/hook-env.sh is missing; the job runs" >&2
exit 0
