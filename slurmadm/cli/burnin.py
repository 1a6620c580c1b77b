"""`slurmadm burnin ...` (see slurmadm/burnin/)."""

from __future__ import annotations

import click

from .common import Group


@click.group(cls=Group)
def burnin() -> None:
    """(not implemented yet)"""
