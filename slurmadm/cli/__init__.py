"""The `slurmadm` command: a thin shell over the capabilities. One module per command group;
the CLI noun is the package name (`slurmadm health ...` lives in slurmadm/health/)."""

from __future__ import annotations

import importlib
from typing import Any

import click

from .. import __version__
from .common import Group

# CLI name -> the module under slurmadm.cli that defines the group (an attribute of the same name).
GROUPS = {
    "site": "site",
    "dev-cluster": "dev_cluster",
    "config": "config",
    "accounts": "accounts",
    "health": "health",
    "burnin": "burnin",
    "audit": "audit",
    "store": "store",
    "doctor": "doctor",
    "bmc": "bmc",
    "fleet": "fleet",
    # monitoring (issue 13)
    "exporter": "exporter",
    "monitor": "monitor",
    "jobs": "jobs",
    "top": "top",
    "deploy": "deploy",
    # repair (issue 34)
    "repair": "repair",
    # what faults cost (issue 36)
    "report": "report",
}


class LazyGroup(Group):
    """Imports a command group's module only when the group is used (or listed by --help and
    completion), so `slurmadm site validate` does not pay for burn-in, accounts or dev-cluster."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *GROUPS])

    def get_command(self, ctx: click.Context, name: str) -> Any:
        module = GROUPS.get(name)
        if module is None:
            return super().get_command(ctx, name)
        return getattr(importlib.import_module(f"{__name__}.{module}"), module)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="slurmadm")
def cli() -> None:
    """A Slurm-integrated admin toolkit for large GPU clusters.

    Every command that reads the site takes --site FILE (default $SLURMADM_SITE, then
    /etc/slurmadm/site.toml); read commands take --json; changes take --dry-run and --reason.
    Exit codes: 0 all good, 1 problems found, 2 bad usage or site file, 3 an outside system was
    unreachable. `slurmadm COMMAND --help` or `man slurmadm-COMMAND` for each command group.
    """


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    eval "$(slurmadm completion bash)" in a shell, or let `slurmadm deploy apply --head` install
    it for bash and zsh on the head node, with the man pages.
    """
    from click.shell_completion import get_completion_class

    comp_cls = get_completion_class(shell)
    comp = comp_cls(cli, {}, "slurmadm", "_SLURMADM_COMPLETE")
    click.echo(comp.source())


def main() -> None:
    cli.main()
