"""`slurmadm health ...` (see slurmadm/health/)."""

from __future__ import annotations

import click

from .common import Group


@click.group(cls=Group)
def health() -> None:
    """(not implemented yet)"""
