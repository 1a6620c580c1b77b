"""Shared CLI pieces: options every command group uses, output helpers, error translation."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import config  # noqa: F401  (adds the config rules to every site check, `site validate` too)
from ..errors import EXIT_USAGE, SiteError, SlurmadmError
from ..health import sitecheck  # noqa: F401  (adds the health check-id rules likewise)
from ..site import Site, load_site
from ..store import store_error

# Human output goes to stdout through rich; errors and progress to stderr.
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def site_option(fn: Callable) -> Callable:
    return click.option(
        "--site",
        "site_file",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        default=None,
        help="Site file (default: $SLURMADM_SITE, then /etc/slurmadm/site.toml).",
    )(fn)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")(fn)


def dry_run_option(fn: Callable) -> Callable:
    return click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")(fn)


def reason_option(default: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        return click.option(
            "--reason", default=default, show_default=True, help="Why: recorded in the audit event."
        )(fn)

    return deco


def get_site(site_file: str | None) -> Site:
    return load_site(site_file)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {message}")


def info(message: str) -> None:
    err_console.print(message)


def progress(message: str) -> None:
    """One step of a long command (bring-up, a sweep), on stderr."""
    err_console.print(f"[dim]·[/dim] {message}")


def when(ts: float) -> str:
    """A store timestamp for people: local time to the second."""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def report_error(exc: BaseException) -> int:
    """Print one line per problem on stderr; return the exit code."""
    if isinstance(exc, SiteError):
        for line in exc.lines():
            click.echo(f"slurmadm: error: {line}", err=True)
        return exc.exit_code
    if isinstance(exc, SlurmadmError):
        click.echo(f"slurmadm: error: {exc}", err=True)
        return exc.exit_code
    if isinstance(exc, click.ClickException):
        msg = exc.format_message()
        ctx = getattr(exc, "ctx", None)
        prefix = f"{ctx.command_path}: " if ctx is not None else ""
        click.echo(f"slurmadm: error: {prefix}{' '.join(msg.split())}", err=True)
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    raise exc


class Group(click.Group):
    """A click group whose invocation turns slurmadm errors into one line and an exit code,
    so the same behaviour holds under CliRunner and from the console script."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (SlurmadmError, click.ClickException) as exc:
            if ctx.parent is not None:  # let the top-level group report it once
                raise
            code = report_error(exc)
            ctx.exit(code)
        except sqlite3.DatabaseError as exc:  # a corrupt store page met by a read: one line, exit 3
            if ctx.parent is not None:
                raise
            ctx.exit(report_error(store_error(exc)))
        except KeyboardInterrupt:
            click.echo("slurmadm: interrupted", err=True)
            ctx.exit(130)

    def main(self, *args: Any, **kwargs: Any) -> Any:  # usage errors before invoke
        kwargs.setdefault("prog_name", "slurmadm")
        standalone = kwargs.pop("standalone_mode", True)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.Abort:
            click.echo("slurmadm: aborted", err=True)
            if standalone:
                sys.exit(130)
            raise
        except (click.ClickException, SlurmadmError) as exc:
            code = report_error(exc)
            if standalone:
                sys.exit(code)
            return code
        if standalone:
            sys.exit(rv if isinstance(rv, int) else 0)
        return rv
