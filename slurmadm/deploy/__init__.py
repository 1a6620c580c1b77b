"""`slurmadm deploy`: this slurmadm on the head and the compute nodes, and upgrades of it.

    from slurmadm.site import load_site
    from slurmadm import deploy

    site = load_site("/etc/slurmadm/site.toml")
    print(deploy.manifest(site))                       # what a node needs (image builds, Ansible)
    rel = deploy.wheelhouse.build(site)                # pip wheel, once, on the head
    with deploy.remote(site) as r:
        d = deploy.Deployer(site, rel, r)
        d.plan(["b200-001"])                           # {node: [Change] | "why unreadable"}

The rollout of a release over many nodes is `deploy.DeployRollout` (fleet.rollout's engine). See
node.py for the layout on a node and engine.py for the order of the work.
"""

from __future__ import annotations

from ..hostlist import compress, fold, neutral
from . import node, wheelhouse
from .engine import DeployError, Deployer, DeployRollout, NodeResult, rollout_name
from .node import Change, HOOKS

__all__ = ["Change", "DeployError", "DeployRollout", "Deployer", "HOOKS", "NodeResult", "fold_findings",
           "fold_plans", "manifest", "node", "remote", "rollout_name", "wheelhouse"]


def remote(site, *, head: bool = False):
    from ..fleet.ssh import ParamikoRemote

    return ParamikoRemote(site.fleet)


def manifest(site, release: str = "{release}", version: str | None = None, *, site_file: str | None = None) -> dict:
    """The files, modes and commands that make a node's install, as `deploy apply` makes it:
    for an image build or a configuration-management playbook. Secrets are named, never shown."""
    from .. import __version__

    version = version or __version__
    want = node.desired(site, release, version, site_file=site_file)
    d = site.deploy
    wh = f"{want.prefix}/wheelhouse/{release}"
    commands = [
        f"mkdir -p {want.prefix}/releases {wh} {want.hook_dir}",
        f"# copy the wheelhouse (slurmadm deploy build, or pip wheel slurmadm=={version}) to {wh}/",
        *[ln for ln in node.install_script(want, d.python).splitlines()
          if ln and not ln.startswith(("set -e", "export ", "rm -rf"))],
        f"rm -rf {wh}",
        f"ln -s releases/{release} {want.prefix}/current.new && mv -T {want.prefix}/current.new {want.prefix}/current",
        *[f"ln -sfn {t} {link}" for link, t in want.links.items()],
    ]
    if want.unit:
        commands += ["systemctl daemon-reload", f"systemctl enable --now {node.UNIT}"]
    files = []
    for f in want.files:
        entry = {"path": f.path, "mode": f"{f.mode:04o}", "owner": "root:root"}
        if f.secret:
            entry["source"] = f"copy of the head's {f.path} (secret: never in argv, logs or images' build logs)"
        elif f.path.endswith(".toml"):
            entry["source"] = f"copy of the head's site file {f.path}"
            entry["sha256"] = f.sha
        else:
            entry["content"] = f.data.decode()
        files.append(entry)
    return {
        "release": release, "version": version, "prefix": want.prefix,
        "directories": [f"{want.prefix}/releases/{release}", want.hook_dir],
        "links": [{"path": link, "target": t} for link, t in want.links.items()]
        + [{"path": f"{want.prefix}/current", "target": f"releases/{release}"}],
        "files": files,
        "commands": commands,
        "check": node.doctor_command(site, "$(hostname -s)"),
        "slurm_conf": {k: f"{want.hook_dir}/{s}" for k, s in
                       (("Prolog", "prolog.sh"), ("Epilog", "epilog.sh"), ("HealthCheckProgram", "healthcheck.sh"))},
    }


def fold_plans(plans: dict) -> list[tuple[list[str], list | str]]:
    """Nodes with the same changes (or the same error) together: [(nodes, changes | error)]."""
    groups = fold((n, p if isinstance(p, str) else tuple(p)) for n, p in plans.items())
    return sorted(((list(g.nodes), (g.key if isinstance(g.key, str) else list(g.key))) for g in groups),
                  key=lambda g: (isinstance(g[1], str), -len(g[0])))


def fold_findings(results: dict) -> list[dict]:
    """One row per (check, status, summary) with the nodes that agree (node names in a summary
    are read as `<node>`, so 128 healthy nodes are one row per check)."""
    groups = {g.key: list(g.nodes) for g in
              fold((n, (f["check"], f["status"], neutral(f["summary"], n), f.get("fix", "")))
                   for n, r in results.items() for f in r.findings)}
    order = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}
    return [{"nodes": compress(ns), "count": len(ns), "check": c, "status": s, "summary": m, "fix": fx}
            for (c, s, m, fx), ns in sorted(groups.items(), key=lambda kv: (order.get(kv[0][1], 9), kv[0][0]))]

