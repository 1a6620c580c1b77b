"""Reading `site.toml`: the only place that parses it. Errors become one line per problem,
each naming the key path (`partitions[1].nodes: ...`)."""

from __future__ import annotations

import difflib
import hashlib
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import SiteError, UsageError
from ..sitefile import DEFAULT_SITE, ENV_SITE, site_path
from .model import Site
from .validate import check_site

__all__ = ["DEFAULT_SITE", "ENV_SITE", "load_site", "parse_site", "site_hash", "site_path"]


def load_site(explicit: str | os.PathLike | None = None) -> Site:
    path = site_path(explicit)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        hint = "" if explicit else f" (set --site or ${ENV_SITE})"
        raise UsageError(f"site file {path} does not exist{hint}") from None
    except IsADirectoryError:
        raise UsageError(f"site file {path} is a directory") from None
    except PermissionError:
        raise UsageError(f"site file {path} is not readable") from None
    return parse_site(raw, source=str(path))


def parse_site(raw: bytes | str, *, source: str = "site.toml") -> Site:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise SiteError(source, [f"not UTF-8: byte 0x{raw[exc.start]:02x} at line {line} "
                                     f"(byte offset {exc.start})"]) from None
    else:
        text = raw
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SiteError(source, [f"TOML syntax error: {exc}"]) from None
    try:
        site = Site.model_validate(data)
    except ValidationError as exc:
        raise SiteError(source, format_validation_error(exc, data)) from None
    except UsageError as exc:  # a hostlist inside a validator
        raise SiteError(source, [str(exc)]) from None
    problems = check_site(site)
    if problems:
        raise SiteError(source, problems)
    return site


def site_hash(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- error formatting

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _real_loc(loc: tuple, data: Any, missing: bool) -> tuple[list[Any], bool]:
    """Keep the loc parts that index the input (drop pydantic's union-branch tags).
    Returns (parts, complete) where complete means every part indexed real data."""
    parts: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            parts.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
        elif missing and i == len(loc) - 1 and isinstance(part, str):
            parts.append(part)
        else:
            return parts, False
    return parts, True


def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(tp) for t in _unwrap(a)]
    return [tp]


def _model_at(parts: list[Any]) -> type[BaseModel] | None:
    """The pydantic model class that the path leads to (for 'did you mean')."""
    current: Any = Site
    for part in parts:
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
            continue
        candidates = _unwrap(current)
        nxt = None
        for c in candidates:
            origin = typing.get_origin(c)
            if origin in (list, dict):
                nxt = typing.get_args(c)[-1]
                break
        if nxt is None:
            return None
        current = nxt
        candidates = _unwrap(current)
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), current)
    for c in _unwrap(current):
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(err: dict, parts: list[Any]) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        key = parts[-1] if parts else "?"
        model = _model_at(parts[:-1])
        hint = ""
        if model is not None:
            close = difflib.get_close_matches(str(key), list(model.model_fields), n=1)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
        return f"unknown key{hint}"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, got {_describe(value)}"
    if kind == "string_pattern_mismatch":
        return f"{_describe(value)} is not allowed here (must match {ctx.get('pattern')})"
    if kind in _BOUNDS:
        if isinstance(value, float) and value != value:  # TOML's nan: no bound holds for it
            return f"must be a number, got {_describe(value)}"
        bound = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {bound}, got {_describe(value)}"
    if kind in ("too_short", "too_long"):
        return err["msg"].replace("List", "list").replace("Value", "value")
    if kind == "literal_error":
        return f"got {_describe(value)}, expected {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']} (got {_describe(value)})"


def _expected(err: dict) -> str:
    """What a union branch wanted, as a noun phrase."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    if kind == "literal_error":
        return str(ctx.get("expected"))
    if kind in _BOUNDS:
        return f"a value {_BOUNDS[kind]} {next(iter(ctx.values()), '?')}"
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx.get('pattern')}"
    return err["msg"]


def format_validation_error(exc: ValidationError, data: Any) -> list[str]:
    messages: dict[str, list[str]] = {}
    union_wants: dict[str, tuple[Any, list[str]]] = {}
    for err in exc.errors(include_url=False):
        parts, complete = _real_loc(tuple(err["loc"]), data, err["type"] == "missing")
        path = _path(parts)
        if not complete and err["type"] not in ("missing", "extra_forbidden"):
            # one branch of a union did not match: gather what each branch wanted
            value, wants = union_wants.setdefault(path, (err.get("input"), []))
            want = _expected(err)
            if want not in wants:
                wants.append(want)
            messages.setdefault(path, [])
            continue
        msg = _message(err, parts)
        if msg not in messages.setdefault(path, []):
            messages[path].append(msg)
    lines = []
    for path, msgs in messages.items():
        if path in union_wants and not msgs:
            value, wants = union_wants[path]
            msgs = [f"got {_describe(value)}, expected {' or '.join(wants)}"]
        lines.append(f"{path}: " + "; ".join(msgs))
    return lines
