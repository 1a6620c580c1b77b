"""The dev cluster: a real local Slurm of fake B200 nodes (see DESIGN.md)."""
