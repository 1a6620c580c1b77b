"""`slurmadm store ...`: the central store every host ships its records to (slurmadm/store/)."""

from __future__ import annotations

import time

import click

from ..store import Store, central, grants, read, schema
from ..store.ship import host_name, ship, ships_as_node
from .common import (Group, console, dry_run_option, get_site, info, json_option, print_json, reason_option,
                     site_option, table, warn, when)


@click.group(cls=Group)
def store() -> None:
    """This host's store and the central store the fleet ships to.

    The store: this host's SQLite file and the central store (store.url) the fleet ships to."""


@store.command()
@site_option
@dry_run_option
@reason_option("central store schema migration")
@json_option
def migrate(site_file, dry_run, reason, as_json) -> None:
    """Bring the central store (and this host's local store) to this slurmadm's schema version.
    Shows the statements with --dry-run; safe to re-run; an older slurmadm refuses a newer schema."""
    site = get_site(site_file)
    with_grants = site.store.node_user is not None and site.store.central().dialect == "mysql"
    with central.connected(site.store) as c:
        found, steps = central.plan(c)
        if not dry_run and steps:
            found, steps = central.migrate(c)
        planned = grants.plan(site) if with_grants else []
        if planned and not dry_run:
            granted = grants.apply(site, c, planned)
    out = {"url": str(site.store.central()), "from_version": found, "to_version": schema.SCHEMA_VERSION,
           "statements": steps, "applied": bool(steps) and not dry_run,
           "grants": [g.shown(site.store) for g in planned]}
    if planned and not dry_run:
        with Store.for_site(site) as local:
            local.audit("store.grants", out["url"], reason, nodes=len(granted["nodes"]),
                        statements=granted["statements"], password_files_written=granted["password_files_written"])
    if not dry_run and steps:
        with Store.for_site(site) as local:  # the local store migrates on open
            local.audit("store.migrate", out["url"], reason, from_version=found, to_version=schema.SCHEMA_VERSION,
                        statements=len(steps))
    if as_json:
        print_json(out)
        return
    if planned:
        console.print(f"{'would grant' if dry_run else 'granted'} {len(site.node_names)} node account(s) "
                      f"their least privileges ({len(planned)} statements; `slurmadm store grants` shows them)")
    if not steps:
        console.print(f"central store {out['url']}: at schema version {found}, nothing to do")
        return
    for sql in steps:
        console.print(sql + ";", markup=False, highlight=False)
    verb = "would migrate" if dry_run else "migrated"
    console.print(f"{verb} central store {out['url']} from schema version {found} to {schema.SCHEMA_VERSION}"
                  + (" (dry run: nothing changed)" if dry_run else ""))


@store.command("grants")
@site_option
@click.option("--apply", "do_apply", is_flag=True, help="Apply the statements (as the url's account).")
@dry_run_option
@reason_option("central store least-privilege grants")
@json_option
def grants_cmd(site_file, do_apply, dry_run, reason, as_json) -> None:
    """The central store's accounts: one per compute node (store.node_user) that may only add
    its own rows, which MariaDB marks with its origin. Prints the exact statements (each
    password named by its file, never shown); --apply sends them, writing a root-only password
    file per node where there is none (copy each to its node). Safe to re-run."""
    site = get_site(site_file)
    planned = grants.plan(site)
    shown = [g.shown(site.store) for g in planned]
    url = str(site.store.central())
    if not do_apply or dry_run:
        if as_json:
            print_json({"url": url, "statements": shown, "applied": False})
            return
        for line in shown:
            console.print(line + ";", markup=False, highlight=False)
        console.print(f"{len(shown)} statement(s) for {len(site.node_names)} node account(s) on {url}"
                      + (" (dry run: nothing changed)" if dry_run else " (--apply to apply them)"))
        return
    with central.connected(site.store) as c:
        central.require_current(c)
        done = grants.apply(site, c, planned)
    with Store.for_site(site) as local:
        local.audit("store.grants", url, reason, nodes=len(done["nodes"]), statements=done["statements"],
                    password_files_written=done["password_files_written"])
    if as_json:
        print_json({"url": url, "statements": shown, "applied": True, **done})
        return
    console.print(f"granted {len(done['nodes'])} node account(s) on {url} ({done['statements']} statements)")
    for path in done["password_files_written"]:
        info(f"wrote {path} (mode 0600): copy it to its node, same path")


@store.command("prune")
@site_option
@click.option("--older-than-days", type=click.IntRange(1, 36500), required=True,
              help="Remove central records (audit events, check results) older than this.")
@dry_run_option
@reason_option("central store retention")
@json_option
def prune_cmd(site_file, older_than_days, dry_run, reason, as_json) -> None:
    """The head's retention job: the only deletion in the central store (the nodes' accounts
    have none; audit events are otherwise append-only). Records where each audit chain was cut,
    so `audit verify` tells it from events removed by anyone else. Audited; safe to re-run."""
    from ..store import prune

    site = get_site(site_file)
    with central.connected(site.store) as c:
        central.require_current(c)
        p = prune.plan(c, older_than_days)
        if not dry_run:
            with Store.for_site(site) as local:  # the intent first: it ships with the head's next records
                local.audit("store.prune", str(site.store.central()), reason, older_than_days=older_than_days,
                            rows=p["rows"], chains=len(p["anchors"]))
            p = prune.apply(c, p)
    out = {"url": str(site.store.central()), "applied": not dry_run, "older_than_days": older_than_days,
           "cutoff": p["cutoff"], "rows": p["rows"], "chains_cut": len(p["anchors"])}
    if as_json:
        print_json(out)
        return
    per = ", ".join(f"{t} {n}" for t, n in sorted(p["rows"].items())) or "nothing"
    console.print(f"{'would remove' if dry_run else 'removed'} records older than {older_than_days} days "
                  f"({when(p['cutoff'])}) from {out['url']}: {per}; {len(p['anchors'])} audit chain(s) cut"
                  + (" (dry run: nothing changed)" if dry_run else ""))


@store.command("ship")
@site_option
@click.option("--node", help="Ship as this Slurm node (default: $SLURMD_NODENAME, then the host name).")
@dry_run_option
@json_option
def ship_cmd(site_file, node, dry_run, as_json) -> None:
    """Ship this host's queued records to the central store now (the periodic hook does it in
    the background; this is for cron on hosts without one, and by hand)."""
    import os

    site = get_site(site_file)
    if site.store.url is None:
        info("store.url is not set: records stay in this host's store")
        return
    node = node or os.environ.get("SLURMD_NODENAME")
    if dry_run:
        with Store(site.store.local_path(node), ship=True) as local:
            queued = {r["tbl"]: r["n"] for r in local.query("SELECT tbl, count(*) AS n FROM outbox GROUP BY tbl")}
        if as_json:
            print_json({"host": host_name(node), "queued": queued, "url": str(site.store.central())})
        else:
            console.print(f"would ship {sum(queued.values())} queued record(s) of {host_name(node)} to "
                          f"{site.store.central()}: " + (", ".join(f"{t} {n}" for t, n in sorted(queued.items()))
                                                         or "nothing queued") + " (dry run: nothing changed)")
        return
    out = ship(site.store, host=host_name(node), local_path=site.store.local_path(node),
               audit_log=site.store.audit_log, as_node=ships_as_node(site, host_name(node)))
    if as_json:
        print_json(out.to_dict())
        return
    if out.skipped:
        info(f"not now: {out.skipped}")
        return
    per = ", ".join(f"{t} {n}" for t, n in sorted(out.tables.items()) if n) or "nothing new"
    console.print(f"{out.host}: shipped {out.shipped} record(s) in {out.batches} batch(es) ({per}) in "
                  f"{out.seconds:.2f} s; {out.remaining} left, {out.pruned} pruned locally")


@store.command()
@site_option
@json_option
def status(site_file, as_json) -> None:
    """Schema versions, this host's queue, and every host's last arrival at the central store.
    Exit 1 when a site node's records have not arrived for longer than store.stale_after_minutes."""
    site = get_site(site_file)
    with Store.for_site(site) as local:
        (queued,) = local.db.execute("SELECT count(*) FROM outbox").fetchone()
        local_version = int(local.db.execute("PRAGMA user_version").fetchone()[0])
    out = {"schema_version": schema.SCHEMA_VERSION, "local": {"path": site.store.local_path(),
           "version": local_version, "queued": queued}, "central": None, "hosts": [], "silent": {}}
    if site.store.url is not None:
        with central.connected(site.store) as c:
            meta = central.info(c)
            out["central"] = {"url": str(site.store.central()), "version": int(meta.get("version", 0)),
                              "migrated_by": meta.get("slurmadm", ""), "migrated_at": meta.get("migrated_at", "")}
            if out["central"]["version"] == schema.SCHEMA_VERSION:
                r = read.Reader(c, central=True, host=host_name())
                out["hosts"] = read.hosts(r)
                out["silent"] = read.silent_nodes(r, site)
    if as_json:
        print_json(out)
    else:
        console.print(f"local store {out['local']['path']}: schema {local_version}, {queued} record(s) queued")
        cen = out["central"]
        if cen is None:
            console.print("no central store (store.url not set)")
        else:
            console.print(f"central store {cen['url']}: schema {cen['version']} (this slurmadm: "
                          f"{schema.SCHEMA_VERSION})")
            if cen["version"] != schema.SCHEMA_VERSION:
                warn("run `slurmadm store migrate`" if cen["version"] < schema.SCHEMA_VERSION
                     else "the central store is newer than this slurmadm: upgrade it")
            now = time.time()
            console.print(table(None, ["host", "last arrival", "ago", "newest record", "records"],
                                [(h["host"], when(h["last_arrival"]), f"{(now - h['last_arrival']) / 60:.0f} min",
                                  when(h["last_record"]) if h["last_record"] else "", h["records"])
                                 for h in out["hosts"]]))
            for line in read.silent_lines(out["silent"], site.store.stale_after_minutes, when):
                warn(line)
    if out["silent"] or (out["central"] and out["central"]["version"] != schema.SCHEMA_VERSION):
        raise SystemExit(1)
