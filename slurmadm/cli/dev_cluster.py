"""`slurmadm dev-cluster ...` (see slurmadm/devcluster/)."""

from __future__ import annotations

import click

from .common import Group


@click.group("dev-cluster", cls=Group)
def dev_cluster() -> None:
    """(not implemented yet)"""
