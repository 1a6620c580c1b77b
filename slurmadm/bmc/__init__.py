"""`slurmadm bmc`: out-of-band management through the nodes' BMCs (see cli/bmc.py)."""
