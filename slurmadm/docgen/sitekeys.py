"""Every site.toml key, walked from the pydantic models: its path, type, default and description.

The description is the field's `description=` when it has one, else the comment block right above
the field in its model's source, else the comment beside it. Key paths read as in TOML:
`health.resume_after_clean_runs`; an array of tables is `partitions[].name` (`[[partitions]]`); a
table of tables keyed by a name the site picks is `profiles.<name>.gpus.count`.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import tokenize
import types
import typing
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass
class Key:
    path: str
    type: str
    default: str  # "required", "unset", or the TOML value
    description: str
    section: str  # the top-level key: cluster, health, ...
    table: bool = False  # a table (or array of tables) with keys of its own


@cache
def _comments(cls: type) -> dict[str, str]:
    """{field: its comment} from the class body's source (comment lines above, else the trailing one)."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: list[str] = []
    body_indent = None
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError):
        return {}
    lines = src.splitlines()
    trailing: dict[int, str] = {}
    for tok in toks:
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1].strip() != tok.string:
            trailing[tok.start[0]] = tok.string.lstrip("#").strip()
    first = False
    group: list[str] = []  # a comment block applies to the fields right below it, up to a blank line
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if body_indent is None and i > 1 and stripped and not stripped.startswith(("#", "@", '"""', "'")):
            body_indent = indent
        if stripped.startswith("#"):
            if body_indent is None or indent == body_indent:
                if group and not pending:
                    group = []
                pending.append(stripped.lstrip("#").strip())
            continue
        if pending:
            group, pending, first = pending, [], True
        if not stripped:
            group = []
            continue
        if body_indent is not None and indent == body_indent and ":" in stripped and not stripped.startswith(
                ("def ", "class ", "@", "model_config", "return")):
            name = stripped.split(":", 1)[0].strip()
            if name.isidentifier():
                # a comment block is the first field's; a later field of the same block shares it
                # only when the comment names it ("... at host_port ...")
                shared = " ".join(group) if group and (first or name in " ".join(group)) else ""
                text = trailing.get(i, "") or shared
                if text:
                    out[name] = text
                first = False
        elif indent <= (body_indent or 0):
            group = []
    return out


def _description(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    if info.description:
        return " ".join(info.description.split())
    for cls in model.__mro__:
        if isinstance(cls, type) and issubclass(cls, BaseModel) and name in cls.__dict__.get("__annotations__", {}):
            text = _comments(cls).get(name, "")
            if text:
                return text
    return ""


_HEADER = re.compile(r"^#?\s*(\[\[?)\s*([A-Za-z0-9_.\-\"]+)\s*\]\]?\s*(?:#\s*(.*))?$")
_KEY = re.compile(r"^(#\s*)?([A-Za-z0-9_\-]+|\"[^\"]+\")\s*=\s*(.*)$")


@cache
def example_comments() -> dict[str, str]:
    """{key path: comment} from the commented example site file (site.example.toml): the comment
    block above a key, else the comment beside it; commented-out keys count too."""
    from ..resources import example_site

    try:
        text = example_site().read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    table, block = "", []
    for raw in text.splitlines():
        line = raw.strip()
        m = _HEADER.match(line)
        if m and not line.startswith("# -") and (line.startswith("[") or not _KEY.match(line)):
            table = m.group(2).replace('"', "") + ("[]" if m.group(1) == "[[" else "")
            if m.group(3) or block:
                out.setdefault(table, m.group(3) or " ".join(block))
            block = []
            continue
        k = _KEY.match(line)
        if k:
            value = k.group(3)
            trail = value.split("  #", 1)[1].strip() if "  #" in value else ""
            text_ = " ".join(block) if block else trail
            path = f"{table}.{k.group(2).strip(chr(34))}" if table else k.group(2)
            if text_:
                out.setdefault(path, text_)
            block = []
            continue
        if line.startswith("# -"):  # a section divider: "# ------- the cluster"
            block = [line.lstrip("# -").strip()] if line.lstrip("# -").strip() else []
            continue
        if line.startswith("#"):
            block.append(line.lstrip("#").strip())
        else:
            block = []
    return out


def _from_example(path: str) -> str:
    pattern = re.compile("^" + re.escape(path).replace(re.escape(".<name>"), r"\.[^.\[\]]+") + "$")
    for p, text in example_comments().items():
        if pattern.match(p):
            return text
    return ""


def _model_of(ann) -> tuple[str, type[BaseModel] | None]:
    """('', M) for a model, ('list', M) for a list of models, ('dict', M) for a table of models."""
    ann = _strip(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "", ann
    origin = typing.get_origin(ann)
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _model_of(args[0])
    if origin is list and args:
        kind, m = _model_of(args[0])
        if m is not None and not kind:
            return "list", m
    if origin is dict and len(args) == 2:
        kind, m = _model_of(args[1])
        if m is not None and not kind:
            return "dict", m
    return "", None


def _strip(ann):
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def _constraints(ann) -> str:
    bits = []
    for meta in getattr(ann, "__metadata__", ()):
        for m in getattr(meta, "metadata", [meta]):
            for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "min length "),
                              ("max_length", "max length ")):
                v = getattr(m, attr, None)
                if v is not None:
                    bits.append(f"{sym}{v}")
    return f" ({', '.join(bits)})" if bits else ""


def type_name(ann) -> str:
    if typing.get_origin(ann) is typing.Annotated:
        return type_name(typing.get_args(ann)[0]) + _constraints(ann)
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" (optional)" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is tuple:
        return "list of " + ", ".join(type_name(a) for a in args if a is not Ellipsis)
    if origin is dict:
        return f"table of {type_name(args[1])}" if args else "table"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "table"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if ann in names:
        return names[ann]
    return getattr(ann, "__name__", str(ann))


def _toml(value) -> str:
    """A default as it would be written in site.toml (inline tables for tables)."""
    if isinstance(value, BaseModel):
        return ""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, BaseModel):
        return ""
    return str(value)


def walk(model: type[BaseModel] | None = None, prefix: str = "") -> list[Key]:
    if model is None:
        from ..site.model import Site

        model = Site
    out: list[Key] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else (info.alias or name)
        section = key.split(".", 1)[0].split("[", 1)[0]
        desc = _description(model, name, info) or _from_example(key)
        kind, sub = _model_of(info.annotation)
        if info.is_required():
            default = "required"
        elif info.default_factory is not None:
            default = _toml(info.default_factory())
        else:
            default = _toml(info.default)
        if sub is not None:
            sub_desc = desc or " ".join(inspect.cleandoc(sub.__doc__ or "").split("\n\n")[0].split())
            if sub.__doc__ and sub.__doc__.startswith("Base for every site model"):
                sub_desc = desc
            shown = {"": "table", "list": "array of tables", "dict": "table of tables"}[kind]
            out.append(Key(key, shown, default if kind else "", sub_desc, section, table=True))
            child = {"": key, "list": f"{key}[]", "dict": f"{key}.<name>"}[kind]
            out += walk(sub, child)
        else:
            out.append(Key(key, type_name(info.annotation), default, desc, section))
    return out


def markdown(keys: list[Key] | None = None) -> str:
    from .cli import md_text

    keys = keys if keys is not None else walk()
    lines = ["# site.toml keys", "",
             "<!-- generated from the pydantic models by slurmadm/docgen/sitekeys.py; do not edit -->", "",
             "Every key slurmadm reads from `site.toml`, from the models in `slurmadm/site/` (strict: an "
             "unknown key is an error naming its path, and no value is coerced to another type). "
             "`partitions[].name` is the key `name` in each `[[partitions]]` table; `profiles.<name>.gpus` "
             "is `[profiles.<name>.gpus]` for a name you choose. `slurmadm site validate` checks a file; "
             "[site.example.toml](https://github.com/) is a commented example.".replace(
                 "[site.example.toml](https://github.com/)", "`site.example.toml`"), ""]
    sections: dict[str, list[Key]] = {}
    for k in keys:
        sections.setdefault(k.section, []).append(k)
    lines += ["Sections: " + ", ".join(f"[`{s}`](#{s})" for s in sections), ""]
    for s, ks in sections.items():
        lines += [f"## {s} {{#{s}}}", "", "| key | type | default | description |", "| --- | --- | --- | --- |"]
        for k in ks:
            default = "" if k.table and not k.default else (f"`{k.default}`" if k.default not in ("required", "unset", "") else k.default)
            lines.append(f"| `{k.path}` | {k.type.replace('|', chr(92) + '|') if chr(92) not in k.type else k.type} | "
                         f"{default.replace('|', chr(92) + '|')} | {md_text(k.description)} |")
        lines.append("")
    return "\n".join(lines)
