"""The click tree as data: every command, its help and its parameters, for the reference pages
and the man pages."""

from __future__ import annotations

import html
import inspect
from dataclasses import dataclass, field

import click


@dataclass
class Param:
    name: str  # as the help shows it: "--site FILE", "NODES"
    help: str
    kind: str  # option | argument
    required: bool = False


@dataclass
class Command:
    path: tuple[str, ...]  # ("slurmadm", "health", "run")
    help: str
    short: str
    params: list[Param] = field(default_factory=list)
    subcommands: list[str] = field(default_factory=list)
    usage: str = ""

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def is_group(self) -> bool:
        return bool(self.subcommands)

    @property
    def group(self) -> str:
        """The top-level group this command belongs to ('' for `slurmadm` itself)."""
        return self.path[1] if len(self.path) > 1 else ""


def root() -> click.Command:
    from ..cli import cli

    return cli


def _clean(text: str | None) -> str:
    text = inspect.cleandoc((text or "").split("\f", 1)[0])
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


def walk(cmd: click.Command | None = None, path: tuple[str, ...] = ("slurmadm",),
         parent: click.Context | None = None) -> list[Command]:
    """Every visible command under `cmd`, depth first, groups before their commands."""
    cmd = cmd or root()
    ctx = click.Context(cmd, info_name=path[-1], parent=parent)
    params = []
    for p in cmd.get_params(ctx):
        if getattr(p, "hidden", False):
            continue
        if isinstance(p, click.Option):
            rec = p.get_help_record(ctx)
            if rec is None:
                continue
            params.append(Param(rec[0], _clean(rec[1]), "option", p.required))
        else:
            meta = p.make_metavar(ctx) if _takes_ctx(p.make_metavar) else p.make_metavar()
            params.append(Param(meta, "", "argument", p.required))
    subs: list[str] = []
    if isinstance(cmd, click.Group):
        subs = [n for n in cmd.list_commands(ctx) if not getattr(cmd.get_command(ctx, n), "hidden", False)]
    pieces = cmd.collect_usage_pieces(ctx)
    out = [Command(path, _clean(cmd.help), _clean(cmd.get_short_help_str(limit=100)), params, subs,
                   " ".join([*path, *pieces]))]
    for n in subs:
        out += walk(cmd.get_command(ctx, n), (*path, n), ctx)
    return out


def _takes_ctx(fn) -> bool:
    return "ctx" in inspect.signature(fn).parameters


def groups(commands: list[Command]) -> dict[str, list[Command]]:
    """{group: its commands, the group first}; top-level commands without subcommands are
    groups of one ('completion', 'doctor', 'top')."""
    out: dict[str, list[Command]] = {}
    for c in commands:
        if c.group:
            out.setdefault(c.group, []).append(c)
    return out


# ---- Markdown ----

def md_text(text: str) -> str:
    """Help text as Markdown: HTML-escaped, `*` and `|` taken literally, backticks kept as code."""
    return html.escape(text, quote=False).replace("*", r"\*").replace("|", r"\|")


def anchor(c: Command) -> str:
    return "-".join(c.path[1:]) or "slurmadm"


def _options(c: Command) -> list[str]:
    opts = [p for p in c.params if p.name != "--help" and not p.name.startswith("-h, --help")]
    if not opts:
        return []
    lines = ["| option | meaning |", "| --- | --- |"]
    for p in opts:
        if p.kind == "argument":
            what = "argument" + (", required" if p.required else ", optional")
        else:
            what = md_text(p.help) + (" (required)" if p.required else "")
        lines.append(f"| `{p.name}` | {what} |")
    return [*lines, ""]


def markdown_group(group: str, commands: list[Command]) -> str:
    head = commands[0]
    lines = [f"# slurmadm {group}", "",
             "<!-- generated from the click tree by slurmadm/docgen (slurmadm/docgen/mkdocs_hook.py); do not edit -->", "",
             md_text(head.help), "",
             f"Man page: `man slurmadm-{group}` (installed by `slurmadm deploy apply --head`).", ""]
    if head.is_group:
        lines += ["| command | what it does |", "| --- | --- |"]
        lines += [f"| [`{c.name}`](#{anchor(c)}) | {md_text(c.short)} |" for c in commands[1:]]
        lines.append("")
    if not head.is_group or _options(head):  # a command, or a group with options of its own (exporter)
        lines += ["```", head.usage, "```", "", *_options(head)]
    for c in commands[1:]:
        lines += [f"## {c.name} {{#{anchor(c)}}}", "", "```", c.usage, "```", "", md_text(c.help), "", *_options(c)]
    return "\n".join(lines).rstrip() + "\n"


def markdown_index(commands: list[Command]) -> str:
    top = commands[0]
    lines = ["# Commands", "", "<!-- generated from the click tree by slurmadm/docgen; do not edit -->", "",
             md_text(top.help), "", "```", top.usage, "```", "",
             "Every command takes `-h`/`--help`. Shell completion: `slurmadm completion bash|zsh|fish` prints the "
             "script (`slurmadm deploy apply --head` installs it for bash and zsh).", "",
             "| command group | what it does |", "| --- | --- |"]
    for g, cs in groups(commands).items():
        lines.append(f"| [`slurmadm {g}`]({g}.md) | {md_text(cs[0].short)} |")
    return "\n".join(lines) + "\n"


# ---- man pages (roff) ----

def _roff(text: str) -> str:
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\e").replace("`", "").replace("-", "\\-")  # \- : a real minus
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _paragraphs(text: str) -> str:
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    return "\n.PP\n".join(_roff(p) for p in paras)


def man_page(name: str, commands: list[Command], version: str, date: str, see: str = "") -> str:
    """One man page (section 1) for a command group: every command with its options."""
    head = commands[0]
    title = name.upper()
    lines = [f'.TH "{title}" "1" "{date}" "slurmadm {version}" "slurmadm manual"', ".nh", ".ad l",
             ".SH NAME", f"{_roff(name)} \\- {_roff(head.short)}",
             ".SH SYNOPSIS"]
    for c in commands:
        if not c.is_group:
            lines += [".nf", _roff(c.usage), ".fi"]
    lines += [".SH DESCRIPTION", _paragraphs(head.help)]
    lines += [".SH COMMANDS" if head.is_group and len(commands) > 1 else ".SH OPTIONS"]
    for c in commands:
        if c is head and head.is_group:
            continue
        if c is not head:
            lines += [".SS " + _roff(c.name), _paragraphs(c.help)]
        for p in c.params:
            lines += [".TP", f"\\fB{_roff(p.name)}\\fR", _roff(p.help) or ("required" if p.required else "")]
    lines += [".SH EXIT STATUS",
              "0 all good; 1 the command worked and found problems; 2 bad usage or a bad site file; "
              "3 an outside system (Slurm, NVML, a BMC, SSH) was unreachable or timed out.",
              ".SH ENVIRONMENT",
              ".TP", "\\fBSLURMADM_SITE\\fR", "the site file when --site is not given (then /etc/slurmadm/site.toml)",
              ".SH SEE ALSO",
              _roff(f"slurmadm(1){', ' + see if see else ''}; the documentation site (docs/ in the source, "
                    "built with mkdocs).")]
    return "\n".join(lines) + "\n"


def man_pages(version: str | None = None, date: str = "") -> dict[str, str]:
    """{file name: roff}: slurmadm.1 and slurmadm-<group>.1 for every command group."""
    from .. import __version__

    version = version or __version__
    commands = walk()
    gs = groups(commands)
    out = {}
    top = commands[0]
    see = ", ".join(f"slurmadm-{g}(1)" for g in gs)
    page = [f'.TH "SLURMADM" "1" "{date}" "slurmadm {version}" "slurmadm manual"', ".nh", ".ad l", ".SH NAME",
            f"slurmadm \\- {_roff(top.short)}", ".SH SYNOPSIS", ".nf", _roff(top.usage), ".fi",
            ".SH DESCRIPTION", _paragraphs(top.help), ".SH COMMANDS"]
    for g, cs in gs.items():
        page += [".TP", f"\\fBslurmadm {_roff(g)}\\fR", _roff(cs[0].short + f" See slurmadm-{g}(1).")]
    page += [".SH SEE ALSO", _roff(see)]
    out["slurmadm.1"] = "\n".join(page) + "\n"
    for g, cs in gs.items():
        others = ", ".join(f"slurmadm-{o}(1)" for o in gs if o != g)
        out[f"slurmadm-{g}.1"] = man_page(f"slurmadm-{g}", cs, version, date, others)
    return out
