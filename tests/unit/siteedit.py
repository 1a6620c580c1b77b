"""The example site as TOML data, edited by key path: what the site, accounts and config unit
tests build their variants from (import: from tests.unit.siteedit import ...)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

EXAMPLE = Path(__file__).resolve().parents[2] / "site.example.toml"
DELETE = object()  # put(path, DELETE) removes the key

Edit = Callable[[dict], Any]


def example_data() -> dict:
    return tomllib.loads(EXAMPLE.read_text())


def edited(*edits: Edit) -> str:
    """The example site's TOML text after each edit(data)."""
    data = example_data()
    for edit in edits:
        edit(data)
    return tomli_w.dumps(data)


def put(path: str, value) -> Edit:
    """An edit setting (or with DELETE removing) the value at a dotted path; list indexes are
    numbers: put("projects.1.members", ["zoe"])."""

    def edit(data: dict) -> None:
        node: Any = data
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        last = keys[-1]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return edit
