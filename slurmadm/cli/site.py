"""`slurmadm site ...`: check and inspect the site file."""

from __future__ import annotations

import click

from ..site import site_hash, site_path
from .common import Group, console, get_site, json_option, print_json, say, site_option, table


@click.group(cls=Group)
def site() -> None:
    """Check and inspect site.toml."""


@site.command()
@site_option
@json_option
def validate(site_file: str | None, as_json: bool) -> None:
    """Check the site file: syntax, types, unknown keys and cross-references. Exit 2 if bad."""
    s = get_site(site_file)
    path = site_path(site_file)
    summary = {
        "site": str(path),
        "sha256": site_hash(path),
        "cluster": s.cluster.name,
        "nodes": len(s.node_names),
        "node_list": s.all_nodes,
        "gpus": s.total_gpus,
        "scalable_units": [name for name, _ in s.scalable_units],
        "partitions": [p.name for p in s.partitions],
        "qos": [q.name for q in s.qos],
        "organizations": len(s.organizations),
        "projects": len(s.projects),
        "users": len(s.memberships),
        "valid": True,
    }
    if as_json:
        print_json(summary)
        return
    say(("ok", "green"), f" {path}: cluster {s.cluster.name}, {summary['nodes']} nodes "
        f"({s.all_nodes}), {s.total_gpus} GPUs")
    rows = [
        ("scalable units", ", ".join(summary["scalable_units"])),
        ("partitions", ", ".join(summary["partitions"])),
        ("qos", ", ".join(summary["qos"])),
        ("accounts", f"{summary['organizations']} organizations, {summary['projects']} projects, "
                     f"{summary['users']} users"),
    ]
    t = table(None, ["", ""], rows)
    t.show_header = False
    console.print(t)


@site.command()
@site_option
@json_option
def nodes(site_file: str | None, as_json: bool) -> None:
    """List the site's nodes with profile, scalable unit and partitions."""
    s = get_site(site_file)
    unit_of = {n: name for name, members in s.scalable_units for n in members}
    parts_of: dict[str, list[str]] = {}
    for p in s.partitions:
        for n in s.partition_nodes(p):
            parts_of.setdefault(n, []).append(p.name)
    rows = []
    for n in s.node_names:
        prof = s.node_profile(n)
        rows.append({
            "node": n,
            "profile": s.node_group_of[n].profile,
            "cpus": prof.cpus,
            "gpus": f"{prof.gpus.count}x{prof.gpus.model}",
            "unit": unit_of.get(n, ""),
            "partitions": parts_of.get(n, []),
        })
    if as_json:
        print_json(rows)
        return
    console.print(table(None, ["node", "profile", "cpus", "gpus", "unit", "partitions"],
                        [[r["node"], r["profile"], r["cpus"], r["gpus"], r["unit"], ",".join(r["partitions"])]
                         for r in rows]))
