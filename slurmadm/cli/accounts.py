"""`slurmadm accounts ...` (see slurmadm/accounts/)."""

from __future__ import annotations

import click

from .common import Group


@click.group(cls=Group)
def accounts() -> None:
    """(not implemented yet)"""
