"""`slurmadm config ...` (see slurmadm/config/)."""

from __future__ import annotations

import click

from .common import Group


@click.group(cls=Group)
def config() -> None:
    """(not implemented yet)"""
