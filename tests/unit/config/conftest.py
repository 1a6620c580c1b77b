"""Sites for the config tests: the reference site.example.toml, changed key by key."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w

import slurmadm.config  # noqa: F401  (registers the config rules with site validation)
from slurmadm.site import Site, parse_site

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
EXAMPLE_DATA = tomllib.loads(EXAMPLE.read_text())


def site_data(change: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE_DATA)
    if change is not None:
        change(data)
    return data


def make_site(change: Callable[[dict[str, Any]], Any] | None = None) -> Site:
    return parse_site(tomli_w.dumps(site_data(change)))


@pytest.fixture(scope="session")
def example() -> Site:
    return make_site()
