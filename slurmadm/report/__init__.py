"""Reports over time from Slurm's accounting and the store (issue 36): `slurmadm report`."""
