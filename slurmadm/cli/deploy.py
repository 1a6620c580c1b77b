"""`slurmadm deploy ...`: slurmadm itself onto the nodes (slurmadm/deploy/)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from .. import deploy as dep
from ..errors import EXIT_PROBLEMS, EXIT_UNREACHABLE
from ..hostlist import compress
from ..store import Store
from .common import Group, dry_run_option, get_site, json_option, print_json, progress, reason_option
from .common import site_option
from .common import markup_console as console  # this module escapes every value itself
from .common import markup_table as table
from .fleet import _nodes


@click.group(cls=Group)
def deploy() -> None:
    """slurmadm itself on every node, and its upgrades.

    slurmadm itself on the nodes: versioned virtualenvs from one wheelhouse, an atomic switch,
    hooks, slurmadm.env, secrets, the exporter unit, then `slurmadm doctor` on every node."""


def wheelhouse_option(fn):
    return click.option("--wheelhouse", "wheelhouse", metavar="DIR", type=click.Path(file_okay=False),
                        default=None, help="A wheelhouse built earlier (`deploy build`) instead of building one now.")(fn)


def _site_file(site_file) -> str | None:
    from ..sitefile import site_path

    path = site_path(site_file).resolve()
    return str(path) if path.is_file() else None


def _release(site, wheelhouse: str | None):
    if wheelhouse:
        return dep.wheelhouse.load(wheelhouse)
    return dep.wheelhouse.build(site, progress=progress)


@deploy.command("manifest")
@wheelhouse_option
@site_option
@json_option
def manifest(wheelhouse, site_file, as_json) -> None:
    """What a node needs (files, modes, links, commands), for image builds and playbooks: the
    same result as `deploy apply`. Secrets are named, never shown."""
    site = get_site(site_file)
    rel = dep.wheelhouse.load(wheelhouse) if wheelhouse else None
    m = dep.manifest(site, *((rel.name, rel.version) if rel else ()), site_file=_site_file(site_file))
    if as_json:
        print_json(m)
        return
    console.print(f"[bold]slurmadm {escape(m['version'])}[/bold], release {escape(m['release'])}, "
                  f"prefix {escape(m['prefix'])}")
    console.print("[bold]directories[/bold]")
    for d in m["directories"]:
        console.print(f"  {escape(d)}")
    console.print("[bold]links[/bold]")
    for ln in m["links"]:
        console.print(f"  {escape(ln['path'])} -> {escape(ln['target'])}")
    console.print("[bold]files[/bold]")
    for f in m["files"]:
        console.print(f"  {escape(f['path'])}  {f['mode']}  {f['owner']}  " + escape(f.get("source", "content:")))
        if "content" in f:
            for line in f["content"].splitlines():
                console.print(f"      {escape(line)}")
    console.print("[bold]commands[/bold] (as root, in order)")
    for c in m["commands"]:
        console.print(f"  {escape(c)}")
    console.print(f"[bold]check[/bold]\n  {escape(m['check'])}")
    console.print("[bold]slurm.conf[/bold]: " + ", ".join(f"{k}={escape(v)}" for k, v in m["slurm_conf"].items()))


@deploy.command("build")
@click.option("--source", default=None, metavar="PATH|SPEC",
              help="A checkout, a wheel file or a pip requirement (default: deploy.source, else this slurmadm).")
@site_option
@json_option
def build(source, site_file, as_json) -> None:
    """Build the wheelhouse (pip wheel of slurmadm and its dependencies) into deploy.wheelhouse_dir."""
    site = get_site(site_file)
    rel = dep.wheelhouse.build(site, source=source, progress=progress)
    if as_json:
        print_json(rel.as_dict())
    else:
        console.print(f"release [bold]{escape(rel.name)}[/bold]: {len(rel.wheels)} wheels in {escape(str(rel.dir))}")


def _show_plans(plans: dict, verb: str) -> None:
    for nodes, changes in dep.fold_plans(plans):
        head = f"{compress(nodes)} ({len(nodes)})"
        if isinstance(changes, str):
            console.print(f"[red]{escape(head)}: {escape(changes)}[/red]")
        elif not changes:
            console.print(f"{escape(head)}: up to date")
        else:
            console.print(f"[bold]{escape(head)}[/bold] {verb}:")
            for c in changes:
                console.print(f"  {escape(c.line())}")


head_option = click.option("--head", "with_head", is_flag=True,
                           help="Also this machine (the head): the same install, without SSH, the man pages "
                                "(man slurmadm-<group>) and bash/zsh completion, then `config apply` when "
                                "slurm.conf's Prolog/Epilog/HealthCheckProgram are not the deployed hooks.")


@deploy.command("plan")
@click.argument("nodes", required=False)
@wheelhouse_option
@head_option
@site_option
@json_option
def plan_cmd(nodes, wheelhouse, with_head, site_file, as_json) -> None:
    """What `deploy apply` would change on each node (read-only). Exit 1 when a node would
    change, 3 when one could not be read."""
    _plan(nodes, wheelhouse, site_file, as_json, with_head)


def _plan(nodes, wheelhouse, site_file, as_json, with_head=False) -> None:
    from ..deploy import head

    site = get_site(site_file)
    names = _nodes(site, nodes)
    rel = _release(site, wheelhouse)
    with dep.remote(site) as remote:
        plans = dep.Deployer(site, rel, remote, site_file=_site_file(site_file)).plan(names)
    stale, docs = {}, []
    if with_head:
        plans.update(dep.Deployer(site, rel, head.LocalRemote(), site_file=_site_file(site_file)).plan([head.name()]))
        stale = head.stale_hooks(site)
        docs = head.docs_changes()
    if as_json:
        print_json({"release": rel.name, "dry_run": True, "nodes": [
            {"node": n, "error": p} if isinstance(p, str) else {"node": n, "changes": [c.as_dict() for c in p]}
            for n, p in plans.items()], "slurm_conf_hooks": {k: {"has": h, "wants": w} for k, (h, w) in stale.items()},
            "head_docs": docs})
    else:
        console.print(f"release [bold]{escape(rel.name)}[/bold] (nothing changed)")
        _show_plans(plans, "would")
        for k, (h, w) in stale.items():
            console.print(f"head: config apply would set {k}={escape(w)} (now {escape(h or 'unset')})")
        if docs:
            console.print(f"head: would install {len(docs)} man page and completion files ({escape(', '.join(docs[:3]))}"
                          f"{', ...' if len(docs) > 3 else ''})")
    if any(isinstance(p, str) for p in plans.values()):
        sys.exit(EXIT_UNREACHABLE)
    if any(plans.values()):
        sys.exit(EXIT_PROBLEMS)


def _findings_table(results: dict) -> None:
    rows = dep.fold_findings(results)
    if not rows:
        return
    style = {"ok": "green", "warn": "yellow", "fail": "red"}
    console.print(table("slurmadm doctor on the nodes", ["nodes", "check", "status", "summary"],
                        [(r["nodes"], escape(r["check"]),
                          f"[{style.get(r['status'], 'dim')}]{r['status']}[/{style.get(r['status'], 'dim')}]",
                          escape(r["summary"])) for r in rows]))


@deploy.command("apply")
@click.argument("nodes", required=False)
@wheelhouse_option
@click.option("--restart", is_flag=True, help="Forget the stored progress of this deploy and start over.")
@head_option
@dry_run_option
@reason_option("slurmadm deploy")
@site_option
@json_option
def apply_cmd(nodes, wheelhouse, restart, with_head, dry_run, reason, site_file, as_json) -> None:
    """Deploy this slurmadm to NODES as a rollout (canary, then waves, stop past the failure
    budget): install, switch, files, doctor. A node failing its doctor goes back to its previous
    release. Re-running continues; a node that has it all is left alone. Exit 1 when a node failed."""
    if dry_run:
        _plan(nodes, wheelhouse, site_file, as_json, with_head)
        return
    from ..files import exclusive_lock

    site = get_site(site_file)
    names = _nodes(site, nodes)
    rel = _release(site, wheelhouse)
    with Store.for_site(site) as store:
        lock = Path(str(site.store.path) + ".rollout.lock")
        with exclusive_lock(lock, lambda holder: f"another rollout or deploy is running ({holder})"):
            store.audit("deploy.apply", compress(names), reason, release=rel.name)
            with dep.remote(site) as remote:
                d = dep.Deployer(site, rel, remote, reason=reason, progress=progress, site_file=_site_file(site_file))
                ro = dep.DeployRollout(site, d, names, store=store, restart=restart, progress=progress)
                result = ro.run()
            head_out = _head(site, rel, store, reason, site_file) if with_head and result.state == "done" else None
    if head_out is not None:
        d.results.update(head_out["results"])
    if as_json:
        print_json({**result.as_dict(), "release": rel.name,
                    "results": [r.as_dict() for r in d.results.values()],
                    "doctor": dep.fold_findings(d.results),
                    "head": None if head_out is None else {k: v for k, v in head_out.items() if k != "results"}})
    else:
        from .fleet import _show_rollout

        _show_rollout(result.name, result.state, result.detail, list(result.nodes.values()))
        changed = {n: r.changes for n, r in d.results.items()}
        _show_plans(changed, "changed")
        _findings_table(d.results)
        if with_head and head_out is None:
            console.print("[yellow]head: not deployed (the nodes' rollout did not finish)[/yellow]")
        elif head_out is not None:
            if head_out["error"]:
                console.print(f"[red]head: {escape(head_out['error'])}[/red]")
            if head_out["config"]:
                console.print(f"head: config apply wrote {', '.join(head_out['config'])}")
            if head_out["docs"]:
                console.print(f"head: installed {len(head_out['docs'])} man page and completion files")
    if result.state != "done" or (head_out is not None and head_out["error"]):
        sys.exit(EXIT_PROBLEMS)


def _head(site, rel, store, reason, site_file) -> dict:
    """The head's own install (no SSH), then `config apply` when the hook paths changed."""
    from ..deploy import head
    from ..fleet.rollout import NodeFailed

    d = dep.Deployer(site, rel, head.LocalRemote(), store=store, reason=reason, progress=progress,
                     site_file=_site_file(site_file))
    error, written = "", []
    try:
        d.apply_node(head.name())
    except NodeFailed as exc:
        error = str(exc)
    docs: list[str] = []
    if not error:
        try:
            docs = head.install_docs()
            if docs:
                store.audit("deploy.head.docs", head.name(), reason, files=docs)
        except OSError as exc:
            error = f"man pages and completion: {exc.strerror}: {exc.filename}"
    if not error and head.stale_hooks(site):
        res = head.apply_config(site, _site_file(site_file), reason)
        written = list(res.written)
        if res.reconfigure_error:
            error = f"config apply: files written, but `scontrol reconfigure` failed: {res.reconfigure_error}"
    return {"results": d.results, "error": error, "config": written, "docs": docs}


@deploy.command("rollback")
@click.argument("nodes")
@dry_run_option
@reason_option("slurmadm deploy rollback")
@site_option
@json_option
def rollback(nodes, dry_run, reason, site_file, as_json) -> None:
    """Switch NODES back to the release they ran before (<prefix>/previous), then their doctor."""
    from ..fleet.rollout import NodeFailed
    from .. import __version__

    site = get_site(site_file)
    names = _nodes(site, nodes)
    rel = dep.wheelhouse.Release("{release}", __version__, Path("."), ())
    with Store.for_site(site) as store, dep.remote(site) as remote:
        d = dep.Deployer(site, rel, remote, store=None if dry_run else store, reason=reason,
                         site_file=_site_file(site_file))
        if dry_run:
            rows = []
            for n, a in d.probe(names).items():
                rows.append((n, a if isinstance(a, str) else
                             (f"would switch {a.current} -> {a.previous}" if a.previous else "no previous release")))
            if as_json:
                print_json({"dry_run": True, "nodes": [{"node": n, "plan": p} for n, p in rows]})
            else:
                for n, p in rows:
                    console.print(f"{n}: {escape(p)}")
            return
        store.audit("deploy.rollback.start", compress(names), reason)
        failed = {}
        for n in names:
            try:
                d.rollback(n)
            except NodeFailed as exc:
                failed[n] = str(exc)
    if as_json:
        print_json({"results": [r.as_dict() for r in d.results.values()],
                    "failed": [{"node": n, "error": e} for n, e in failed.items()],
                    "doctor": dep.fold_findings(d.results)})
    else:
        for r in d.results.values():
            if r.node not in failed:
                console.print(f"{r.node}: on {escape(str(r.release))}" + (f" [red]{escape(r.error)}[/red]" if r.error else ""))
        for n, e in failed.items():
            console.print(f"[red]{n}: {escape(e)}[/red]")
        _findings_table(d.results)
    if failed or any(not r.ok for r in d.results.values()):
        sys.exit(EXIT_PROBLEMS)


@deploy.command("status")
@site_option
@json_option
def status(site_file, as_json) -> None:
    """The deploy rollouts in the store, with each node's phase (as `fleet rollout status`)."""
    from ..fleet import rollout as ro
    from .fleet import show_rollouts

    site = get_site(site_file)
    with Store.for_site(site) as store:
        found = [s for s in ro.status(store) if s.name.startswith("deploy-")]
    show_rollouts(found, as_json, "no deploys")
