"""`slurmadm repair parts` and `slurmadm repair rma ...`: the parts inventory and vendor RMA cases.

cli/repair.py (the `repair` group) adds them with `repair.add_command(parts)` and
`repair.add_command(rma)`. Only parsing and printing here: slurmadm/repair/parts.py, rma.py,
bundle.py do the work.
"""

from __future__ import annotations

from contextlib import contextmanager

import click

from ..errors import UsageError
from .common import (
    Group,
    console,
    dry_run_option,
    get_site,
    json_option,
    print_json,
    site_option,
    table,
    when,
)


@contextmanager
def _stores(site):
    """(the local store the parts and cases live in, the records' source: the central store's
    Reader when the site has one, else None = the local store)."""
    from ..store import Store, read

    with Store.for_site(site) as store, read.reader(site) as r:
        yield store, (r if r.central else None)


def _backend():
    from ..slurm import get_backend

    return get_backend()


def _attrs(a: dict) -> str:
    keys = ("uuid", "bus_id", "board_part", "vbios", "firmware", "psid", "model", "part", "health")
    return " ".join(f"{k}={a[k]}" for k in keys if a.get(k))


@click.command("parts")
@click.argument("node", required=False)
@click.option("--history", is_flag=True, help="Every stay, the parts removed too.")
@site_option
@json_option
def parts(node, history, site_file, as_json) -> None:
    """Which GPU, HCA, board, PSU and fan sits in which slot (from health runs, fleet facts and
    `bmc inventory`); swaps found since the last look are recorded (audited) first."""
    from ..repair import parts as partsmod

    site = get_site(site_file)
    if node and node not in site.node_names:
        raise UsageError(f"{node}: not a node of this site")
    with _stores(site) as (store, source):
        changes = partsmod.refresh(store, source)
        rows = partsmod.inventory(store, node, history=history)
    if as_json:
        print_json({"parts": rows, "changes": [c.to_json() for c in changes]})
        return
    for c in changes:
        console.print(f"{c.what}: {c.node} {c.kind} {c.slot}: {c.old} -> {c.new}")
    if not rows:
        console.print("no parts recorded" + (f" for {node}" if node else "") +
                      " (health runs, `fleet facts` and `bmc inventory` record them)")
        return
    head = ["node", "kind", "slot", "part", "installed", "detail"] + (["removed"] if history else [])
    out = [(r["node"], r["kind"], r["slot"], r["part_key"], when(r["installed"]), _attrs(r["attrs"]),
            *([when(r["removed"]) if r["removed"] else ""] if history else [])) for r in rows]
    console.print(table(None, head, out, wrap=["detail"], optional=["installed"]))


@click.group(cls=Group)
def rma() -> None:
    """Vendor RMA cases: open (with the evidence bundle) -> shipped -> replaced -> qualifying -> closed."""


@rma.command("open")
@click.argument("node")
@click.option("--gpu", type=click.IntRange(0, 63), help="The GPU's index on NODE.")
@click.option("--part", "part", metavar="SERIAL", help="The part's serial (or UUID / GUID) on NODE.")
@click.option("--ticket", required=True, help="The vendor's case id.")
@click.option("--no-bug-report", is_flag=True, help="Do not run nvidia-bug-report.sh on the node.")
@click.option("--reason", default="", help="Why: recorded in the audit event.")
@dry_run_option
@site_option
@json_option
def rma_open(node, gpu, part, ticket, no_bug_report, reason, dry_run, site_file, as_json) -> None:
    """Open a case for a part of NODE: write its evidence bundle, drain the node until the
    replacement qualifies."""
    from ..repair import bundle
    from ..repair import rma as rmamod

    if gpu is not None and part:
        raise UsageError("--gpu and --part: give one")
    site = get_site(site_file)
    if node not in site.node_names:
        raise UsageError(f"{node}: not a node of this site")
    backend = _backend()
    with _stores(site) as (store, source):
        remote, why = (None, "not asked for (--no-bug-report)") if (no_bug_report or dry_run) else bundle.remote_of(site)
        try:
            out = rmamod.open_rma(site, store, node, ticket=ticket, gpu=gpu, part=part, dry_run=dry_run,
                                  backend=backend, remote=remote, bug_report=not no_bug_report,
                                  sel_reader=None if dry_run else bundle.sel_reader(site), note=reason,
                                  source=source, no_remote_why=why)
        finally:
            if remote is not None:
                remote.close()
    if as_json:
        print_json(out)
        return
    if dry_run:
        console.print(f"would open RMA {ticket}: {node} {out['kind']} {out['slot']} {out['part_key']} "
                      f"({out['incidents']} incident(s)); bundle in {out['bundle_dir']}; "
                      f"drain: {out['drain']}{' (' + out['drain_why'] + ')' if out['drain_why'] else ''}")
        return
    console.print(f"opened RMA {ticket}: {node} {out['kind']} {out['slot']} {out['part_key']}")
    console.print(f"bundle: {out['bundle']} ({len(out['manifest']['files'])} files)")
    for m in out["manifest"]["missing"]:
        console.print(f"  missing {m['name']}: {m['why']}")
    console.print(f"drain: {out['drain']}{' (' + out['drain_why'] + ')' if out['drain_why'] else ''}")


def _sync(store, source) -> list[dict]:
    from ..repair import rma as rmamod

    changes = rmamod.sync(store, source)
    if any(c.get("resume") for c in changes):
        rmamod.apply_sync_resumes(store, changes, _backend())
    return changes


@rma.command("list")
@click.option("--state", type=click.Choice(["open", "shipped", "replaced", "qualifying", "closed", "active"]),
              help="Only cases in this state (active: not closed).")
@click.option("--node", help="Only this node's cases.")
@site_option
@json_option
def rma_list(state, node, site_file, as_json) -> None:
    """The cases, with the figures: fault-to-RMA time, vendor turnaround, RMAs per GPU model and class."""
    from ..repair import rma as rmamod

    site = get_site(site_file)
    with _stores(site) as (store, source):
        _sync(store, source)
        states = None if state is None else (tuple(s for s in rmamod.STATES if s != "closed") if state == "active"
                                             else (state,))
        rows = rmamod.cases(store, node=node, states=states)
        figs = rmamod.figures(store)
    if as_json:
        print_json({"cases": [rmamod.to_json(c) for c in rows], "figures": figs})
        return
    if not rows:
        console.print("no RMA cases")
    else:
        console.print(table(None, ["ticket", "node", "part", "state", "since", "opened", "new part"],
                            [(c["ticket"], c["node"], f"{c['kind']} {c['slot']} {c['part_key']}", c["state"],
                              when(c["updated"]), when(c["opened"]), c["new_key"]) for c in rows],
                            optional=["opened"]))

    def hours(s: dict) -> str:
        return "-" if not s["n"] else f"median {s['median_s'] / 3600:.1f} h over {s['n']}"
    console.print(f"fault to RMA: {hours(figs['fault_to_rma'])}; vendor turnaround: {hours(figs['vendor_turnaround'])}")


@rma.command("show")
@click.argument("ticket")
@site_option
@json_option
def rma_show(ticket, site_file, as_json) -> None:
    """One case: its part's history (every slot it sat in, its incidents), states and bundle."""
    from ..repair import bundle
    from ..repair import parts as partsmod
    from ..repair import rma as rmamod

    site = get_site(site_file)
    with _stores(site) as (store, source):
        _sync(store, source)
        case = rmamod.get(store, ticket)
        stays = partsmod.stays(store, case["part_key"])
        incs = partsmod.incidents_of(store, case["part_key"])
    try:
        manifest = bundle.read_manifest(case["bundle"]) if case["bundle"] else None
    except (OSError, StopIteration, ValueError) as exc:
        manifest = {"error": f"{case['bundle']}: {exc}"}
    if as_json:
        print_json({"case": rmamod.to_json(case), "stays": stays, "incidents": incs, "manifest": manifest})
        return
    console.print(f"RMA {ticket}: {case['node']} {case['kind']} {case['slot']} {case['part_key']} -- {case['state']}")
    for s in rmamod.STATES:
        if s in case["times"]:
            console.print(f"  {s:<10} {when(case['times'][s][0])}  ({case['state_s'].get(s, 0) / 3600:.1f} h)")
    for s in stays:
        console.print(f"  in {s['node']} {s['kind']} {s['slot']} from {when(s['installed'])}"
                      + (f" to {when(s['removed'])}" if s["removed"] else ""))
    console.print(f"  incidents: {len(incs)}; bundle: {case['bundle'] or '-'}")
    if manifest and manifest.get("missing"):
        for m in manifest["missing"]:
            console.print(f"  missing {m['name']}: {m['why']}")


MOVE_TO = {"ship": "shipped", "replaced": "replaced", "qualifying": "qualifying"}


def _move(fn_name: str, ticket: str, site_file, as_json, dry_run: bool = False, **kw) -> None:
    from ..repair import rma as rmamod

    site = get_site(site_file)
    with _stores(site) as (store, source):
        _sync(store, source)
        if dry_run:
            plan = rmamod.plan_move(store, ticket, MOVE_TO[fn_name], new_key=kw.get("new_key", ""))
        else:
            case = getattr(rmamod, fn_name)(store, ticket, **kw)
    if dry_run:
        if as_json:
            print_json({"dry_run": True, **plan})
            return
        if not plan["changes"]:
            console.print(f"RMA {ticket}: already {plan['to']}; nothing to do (dry run)")
            return
        then = (f"; incidents {', '.join(plan['incidents_to_qualify'])} would be qualified by the next "
                "`repair run`" if plan["incidents_to_qualify"] else "")
        console.print(f"would move RMA {ticket} ({plan['node']} {plan['part_key']}) from {plan['from']} to "
                      f"{plan['to']}{then} (dry run: nothing changed)")
        return
    if as_json:
        print_json(rmamod.to_json(case))
    else:
        console.print(f"RMA {ticket}: {case['state']}")


@rma.command("ship")
@click.argument("ticket")
@click.option("--reason", default="", help="Why / shipping note: recorded in the audit event.")
@dry_run_option
@site_option
@json_option
def rma_ship(ticket, reason, site_file, as_json, dry_run) -> None:
    """The part went to the vendor."""
    _move("ship", ticket, site_file, as_json, why=reason, dry_run=dry_run)


@rma.command("replaced")
@click.argument("ticket")
@click.option("--new", "new_key", default="", metavar="SERIAL", help="The replacement's serial.")
@click.option("--reason", default="", help="Recorded in the audit event.")
@dry_run_option
@site_option
@json_option
def rma_replaced(ticket, new_key, reason, site_file, as_json, dry_run) -> None:
    """The replacement is in (set on its own when the next health run shows a new serial in the slot)."""
    _move("replaced", ticket, site_file, as_json, new_key=new_key, why=reason, dry_run=dry_run)


@rma.command("qualify")
@click.argument("ticket")
@click.option("--reason", default="", help="Recorded in the audit event.")
@dry_run_option
@site_option
@json_option
def rma_qualify(ticket, reason, site_file, as_json, dry_run) -> None:
    """The node's qualification started (set on its own from `repair run`'s qualification)."""
    _move("qualifying", ticket, site_file, as_json, why=reason, dry_run=dry_run)


@rma.command("close")
@click.argument("ticket")
@click.option("--reason", required=True, help="Why: recorded in the audit event.")
@dry_run_option
@site_option
@json_option
def rma_close(ticket, reason, dry_run, site_file, as_json) -> None:
    """Close the case; the node is resumed when its drain is still this case's."""
    from ..repair import rma as rmamod

    site = get_site(site_file)
    with _stores(site) as (store, source):
        _sync(store, source)
        out = rmamod.close_rma(store, ticket, why=reason, backend=_backend(), dry_run=dry_run)
    if as_json:
        print_json(out)
    else:
        verb = "would close" if dry_run else "closed"
        console.print(f"{verb} RMA {ticket}; node {out['node']} " + ("resumed" if out["resume"] is True else
                                                                       "left as it is"))
