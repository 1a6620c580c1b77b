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


def standin_node_data(tmp: Path, **health: Any) -> dict:
    """The example site for a stand-in node under `tmp` (store, results log, kernel log and
    InfiniBand sysfs in tmp/gpus, no Fabric Manager, no site mounts, this machine's memory as the
    profile's), with `health` settings on top: what the hook and stand-in check tests run with."""
    import os

    data = example_data()
    data["store"] = {"path": str(tmp / "slurmadm.db")}
    data["health"].update(results_log=str(tmp / "health.jsonl"), xid_source=str(tmp / "gpus/{node}.kmsg"),
                          sysfs_root=str(tmp / "gpus/{node}.sysfs"), fabric_manager_process="", mounts=[],
                          **health)
    # this machine's memory stands in for the node's 2 TB (host-memory reads the real /proc/meminfo)
    data["profiles"]["hgx-b200"]["memory_gib"] = max(1, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 30)
    return data


def site_file(tmp: Path, monkeypatch, *edits: Edit, slurm_conf: bool = False) -> Path:
    """The example site with its store in `tmp` (then `edits`), written to tmp/site.toml and named
    by $SLURMADM_SITE; `slurm_conf`: $SLURM_CONF names a slurm.conf with no slurmctld behind it."""
    data = example_data()
    data["store"] = {"path": str(tmp / "slurmadm.db")}
    for edit in edits:
        edit(data)
    path = tmp / "site.toml"
    path.write_text(tomli_w.dumps(data))
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    if slurm_conf:
        monkeypatch.setenv("SLURM_CONF", str(tmp / "etc" / "slurm.conf"))
    return path
