#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=<dir>/epilog.sh): fast GPU checks after every job, plus
# processes still holding GPUs and NCCL all-reduce when stale. Non-zero exit: the node was
# drained (reason `slurmadm: <check-id>: ... [epilog]`).
. "${0%/*}/hook-env.sh"
exec "${SLURMADM_PYTHON:-python3}" -I -m slurmadm.health epilog
