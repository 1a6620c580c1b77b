"""Where slurmadm's shipped files live: the source tree in a checkout, `_data/` in a wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG.parent / name, _PKG / "_data" / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"slurmadm resource {name!r} is missing from this installation")


def templates_dir() -> Path:
    return _find("templates")


def prolog_epilog_dir() -> Path:
    return _find("prolog_epilog")


def example_site() -> Path:
    return _find("site.example.toml")
