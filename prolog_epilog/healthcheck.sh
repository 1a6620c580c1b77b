#!/bin/sh
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=<dir>/healthcheck.sh and
# HealthCheckInterval): every fast check; drains on faults and resumes slurmadm's own drains
# after health.resume_after_clean_runs consecutive clean runs. Finishes within
# health.periodic_timeout_s (keep it below Slurm's 60 s limit).
. "${0%/*}/hook-env.sh"
exec "${SLURMADM_PYTHON:-python3}" -I -m slurmadm.health periodic
