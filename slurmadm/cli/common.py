"""Shared CLI pieces: options every command group uses, output helpers, error translation."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import config  # noqa: F401  (adds the config rules to every site check, `site validate` too)
from ..errors import EXIT_USAGE, SiteError, SlurmadmError
from ..health import sitecheck  # noqa: F401  (adds the health check-id rules likewise)
from ..site import Site, load_site
from ..store import store_error

# Human output goes to stdout through rich; errors and progress to stderr. markup=False: text
# from data (drain reasons with `[prolog]`, site keys like `[health.models.b200]`, paths) is
# printed as it is; colour comes from `styled()`/`say()` (rich Text), never from markup in strings.
console = Console(highlight=False, soft_wrap=True, markup=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
# For modules written with rich markup that escape every value themselves (rich.markup.escape):
# their strings are markup, read as such. New code uses `console` with styled()/say().
markup_console = Console(highlight=False, soft_wrap=True, markup=True)


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


# Columns that carry free text: they wrap in a terminal; every other column stays on one line.
WRAP_COLUMNS = frozenset({"detail", "why", "what", "change", "note", "reason", "partitions", "fix", "value",
                          "title", "contexts"})


def styled(text: Any, style: str) -> Text:
    """A table cell or message part in a style, its text taken literally (never as markup)."""
    return Text(str(text), style=style)


class PlainWhenPiped(Table):
    """A rich table in a terminal; plain aligned text, one row per line and nothing wrapped, when
    the output is a pipe or a file (`slurmadm health checks | grep nvlink`, `... > file`). In a
    terminal too narrow for every column (80 columns), the table's optional columns are left out
    first, in their order, with a note saying which."""

    optional: tuple[str, ...] = ()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not options.is_terminal:
            yield Text(plain_table(self), no_wrap=True, overflow="ignore", end="")
            return
        dropped: list[str] = []
        t: Table = self
        while self.optional[len(dropped):] and _natural_width(t) > options.max_width:
            dropped.append(self.optional[len(dropped)])
            t = _without(self, dropped)
        if t is self:
            yield from super().__rich_console__(console, options)
            return
        yield t
        yield Text(f"(not shown at this width: {', '.join(dropped)}; see --json)",
                   style="dim")

    def plain_rows(self) -> list[list[str]]:
        cells = [[_plain(c) for c in col.cells] for col in self.columns]
        return [list(row) for row in zip(*cells)] if cells else []


WRAP_MIN = 16  # a wrapping column narrower than this reads badly: leave optional columns out first


def _natural_width(t: Table) -> int:
    """Width the table needs: one-line columns whole, wrapping ones at least WRAP_MIN, plus
    padding and a border per column."""
    width = 1
    for col in t.columns:
        texts = [_plain(col.header), *(_plain(c) for c in col.cells)]
        need = max(len(x) for x in texts)
        width += (need if col.no_wrap else min(need, WRAP_MIN)) + 3
    return width


def _without(t: PlainWhenPiped, dropped: list[str]) -> Table:
    keep = [i for i, col in enumerate(t.columns) if _plain(col.header) not in dropped]
    out = Table(title=t.title, title_justify=t.title_justify, header_style=t.header_style, show_header=t.show_header)
    for i in keep:
        col = t.columns[i]
        out.add_column(col.header, no_wrap=col.no_wrap, overflow=col.overflow, ratio=col.ratio,
                       min_width=col.min_width)
    for row in zip(*[t.columns[i].cells for i in keep]):
        out.add_row(*row)
    return out


def _plain(cell: Any) -> str:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return " ".join(text.split())  # one line per row


def plain_table(t: PlainWhenPiped) -> str:
    headers = [_plain(c.header) for c in t.columns] if t.show_header else []
    rows = t.plain_rows()
    widths = [max([len(_plain(c.header)) if t.show_header else 0] + [len(r[i]) for r in rows])
              for i, c in enumerate(t.columns)]
    lines = [f"{t.title}" if t.title else None]
    if any(headers):
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(line for line in lines if line is not None) + "\n"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          wrap: Iterable[str] | None = None, optional: Sequence[str] = (), markup: bool = False) -> Table:
    """A table of literal text: cells that are `str` are never read as rich markup (a reason
    like `... [prolog]` keeps its tag); pass `styled(text, style)` for colour. Columns named in
    `wrap` (default: those in WRAP_COLUMNS, else the last column) wrap in a terminal, the others
    stay whole on one line so ids and names stay readable; `optional` columns are left out, in
    that order, where the terminal is too narrow for all of them. `markup=True`: `str` cells are
    rich markup whose values the caller escaped (markup_table)."""
    wrapping = set(wrap) if wrap is not None else {c for c in columns if c in WRAP_COLUMNS}
    if not wrapping and columns:
        wrapping = {columns[-1]}
    t = PlainWhenPiped(title=escape(title) if title else None, title_justify="left", header_style="bold")
    t.optional = tuple(optional)
    for col in columns:
        if col in wrapping:
            t.add_column(col, overflow="fold", ratio=1, min_width=10)
        else:
            t.add_column(col, no_wrap=True)
    for row in rows:
        t.add_row(*(Text("") if v is None else v if isinstance(v, Text) else
                    Text.from_markup(v) if markup and isinstance(v, str) else Text(str(v)) for v in row))
    return t


def markup_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], **kw: Any) -> Table:
    """table() whose `str` cells are rich markup with escaped values."""
    return table(title, columns, rows, markup=True, **kw)


def warn(message: str) -> None:
    """A warning on stderr; `message` is literal text (never markup)."""
    err_console.print(Text.assemble(("warning:", "yellow"), " ", message))


def info(message: str | Text) -> None:
    """A line on stderr; a `str` is literal text (never markup)."""
    err_console.print(message if isinstance(message, Text) else Text(message))


def say(*parts: str | tuple[str, str]) -> None:
    """A line on stdout from literal parts: `say(("ok", "green"), " ", path)`; no part is markup."""
    console.print(Text.assemble(*parts))


def paragraph(message: str) -> None:
    """Prose on stdout: wrapped at word boundaries in a terminal, one line when piped."""
    console.print(Text(message), soft_wrap=not console.is_terminal)


def progress(message: str) -> None:
    """One step of a long command (bring-up, a sweep), on stderr."""
    err_console.print(Text.assemble(("·", "dim"), " ", message))


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


# ---------------------------------------------------------------------- installed unit files
def install_files(site: Site, files: Sequence[Any], *, action: str, reason: str, dry_run: bool, as_json: bool,
                  then: str | None = None, **detail: Any) -> None:
    """The body of every `install-*` command (slurmadm.units): --dry-run shows each planned file
    with its status (new/changed/unchanged) and text and writes nothing; otherwise writes what
    changed with one audit event (`action`) per file and prints `then` when anything did."""
    from ..store import Store
    from ..units import install

    if dry_run:
        if as_json:
            print_json([{"path": str(f.path), "status": f.status(), "text": f.text} for f in files])
            return
        for f in files:
            say((str(f.path), "bold"), f" ({f.status()}):")
            console.print(f.text)
        console.print("dry run: nothing written")
        return
    with Store.for_site(site) as store:
        done = install(list(files), store, action=action, reason=reason, **detail)
    if as_json:
        print_json([{"path": str(p), "status": st} for p, st in done])
        return
    for path, st in done:
        console.print(f"{path}: {st}")
    if then and any(st != "unchanged" for _, st in done):
        console.print(f"then: {then}")


# ---------------------------------------------------------------------- progress bars
class ProgressBar:
    """A rich progress bar on stderr for a long run over many nodes, shown only to people: when
    stderr is a terminal and the command was not asked for --json. Otherwise every call is a
    no-op, so scripts and pipes get clean output. The bar is transient: it disappears when the
    command prints its table."""

    def __init__(self, what: str, *, enabled: bool = True):
        self.what = what
        self._progress = None
        self._task = None
        if enabled and err_console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=err_console, transient=True)

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.stop()

    def begin(self, total: int, what: str | None = None) -> None:
        """A new pass over `total` nodes (a plan read, then the change itself; a firmware wave).
        The bar appears with the first pass: a command that makes none shows none."""
        if self._progress is None:
            return
        desc = what or self.what
        if self._task is None:
            self._progress.start()
            self._task = self._progress.add_task(desc, total=total)
        else:
            self._progress.reset(self._task, total=total, description=desc)

    def advance(self, *_: Any) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)
