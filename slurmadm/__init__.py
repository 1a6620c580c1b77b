"""slurmadm: a Slurm-integrated admin toolkit for large GPU clusters."""

__version__ = "0.1.0"
