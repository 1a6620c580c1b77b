#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=<dir>/prolog.sh, PrologFlags=Alloc): fast GPU checks before
# every job, NCCL all-reduce only when no pass is fresher than health.nccl_fresh_hours.
# Exit 0: the node takes the job. Non-zero: it must not; slurmadm has drained it with reason
# `slurmadm: <check-id>: <detail> [prolog]` and Slurm requeues the batch job (keep
# SchedulerParameters=nohold_on_prolog_fail so it runs elsewhere instead of being held).
. "${0%/*}/hook-env.sh"
exec "${SLURMADM_PYTHON:-python3}" -I -m slurmadm.health prolog
