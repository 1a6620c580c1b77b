"""The `slurmadm` command: a thin shell over the capabilities. One module per command group;
the CLI noun is the package name (`slurmadm health ...` lives in slurmadm/health/)."""

from __future__ import annotations

import importlib

import click

from .. import __version__
from .common import Group

# (module under slurmadm.cli, attribute) for each command group, in help order.
GROUPS = [
    ("site", "site"),
    ("dev_cluster", "dev_cluster"),
    ("config", "config"),
    ("accounts", "accounts"),
    ("health", "health"),
    ("burnin", "burnin"),
    ("audit", "audit"),
]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="slurmadm")
def cli() -> None:
    """Slurm-integrated admin toolkit for large GPU clusters.

    Every command that reads the site takes --site FILE (default $SLURMADM_SITE, then
    /etc/slurmadm/site.toml). Exit codes: 0 all good, 1 problems found, 2 bad usage or site
    file, 3 an outside system was unreachable.
    """


for _module, _attr in GROUPS:
    cli.add_command(getattr(importlib.import_module(f"{__name__}.{_module}"), _attr))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script (eval "$(slurmadm completion bash)")."""
    from click.shell_completion import get_completion_class

    comp_cls = get_completion_class(shell)
    comp = comp_cls(cli, {}, "slurmadm", "_SLURMADM_COMPLETE")
    click.echo(comp.source())


def main() -> None:
    cli.main()
