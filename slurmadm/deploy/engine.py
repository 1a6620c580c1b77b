"""Carrying a deploy out: per node, and across the fleet as a rollout.

`Deployer` does one node: read what it has (one SSH command), install the release if it lacks
it (the wheelhouse over SFTP, a virtualenv with `--no-index --find-links`), switch
<prefix>/current, write the files (SFTP: temp name, mode, rename), the hook links, the exporter
unit, prune old releases, then run `slurmadm doctor` there. A node whose doctor fails after a
switch is switched back to the release it ran before.

`DeployRollout` is `fleet rollout`'s engine (canary nodes, then waves, stop past the failure
budget, progress in the store as any rollout, shown by `fleet rollout status` and `deploy
status`) with the per-node work above in place of steps, reboot and health command. It takes no
node out of service: the switch is atomic, so jobs keep running and starting throughout.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field

from ..errors import SlurmadmError
from ..fleet.rollout import NodeFailed, Options, Plan, Rollout, Step, Tracker
from ..hostlist import compress
from . import node as nodemod
from .wheelhouse import Release


class DeployError(SlurmadmError):
    exit_code = 1


@dataclass
class NodeResult:
    node: str
    changes: list[nodemod.Change] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    ok: bool = True
    error: str = ""
    release: str | None = None  # what current points at afterwards
    reverted: bool = False

    def as_dict(self) -> dict:
        return {"node": self.node, "ok": self.ok, "error": self.error, "release": self.release,
                "reverted": self.reverted, "changes": [c.as_dict() for c in self.changes],
                "findings": self.findings}


class Deployer:
    def __init__(self, site, release: Release, remote, *, store=None, reason: str = "deploy",
                 progress=lambda m: None, site_file: str | None = None):
        self.site, self.release, self.remote = site, release, remote
        self.store, self.reason, self.progress = store, reason, progress
        self.want = nodemod.desired(site, release.name, release.version, site_file=site_file)
        self.timeout = site.fleet.command_timeout_s
        self.results: dict[str, NodeResult] = {}
        self._tar_lock = threading.Lock()
        self.store_of = None  # the calling thread's store (a rollout's node threads), else self.store

    def _audit(self, action: str, target: str, reason: str, **detail) -> None:
        store = self.store_of() if self.store_of else self.store
        if store is not None:
            store.audit(action, target, reason, **detail)

    # ---- reading
    def probe(self, nodes: list[str]) -> dict[str, nodemod.Actual | str]:
        """Each node's state, or a one-line reason it could not be read."""
        out: dict[str, nodemod.Actual | str] = {}
        for r in self.remote.run(nodes, "/bin/sh -s", stdin=nodemod.probe_script(self.want), timeout=self.timeout):
            if r.exit is None:
                out[r.node] = r.error
                continue
            try:
                out[r.node] = nodemod.parse_probe(r.output)
            except ValueError as exc:
                out[r.node] = str(exc)
        return out

    def plan(self, nodes: list[str]) -> dict[str, list[nodemod.Change] | str]:
        return {n: (nodemod.plan(self.want, a) if isinstance(a, nodemod.Actual) else a)
                for n, a in self.probe(nodes).items()}

    # ---- one node
    def _sh(self, node: str, script: str, what: str, timeout: float | None = None) -> str:
        r = self.remote.run([node], "/bin/sh -s", stdin=script, timeout=timeout or self.timeout)[0]
        if r.exit != 0:
            last = r.error or (r.output.strip().splitlines() or [f"exit {r.exit}"])[-1]
            raise NodeFailed(f"{what}: {last[:200]}")
        return r.output

    def _put(self, node: str, uploads: list, what: str, timeout: float | None = None) -> None:
        r = self.remote.put([node], uploads, timeout=timeout or self.timeout)[0]
        if r.exit != 0:
            raise NodeFailed(f"{what}: {r.error[:200]}")

    def apply_node(self, node: str) -> NodeResult:
        """Bring one node to the release (idempotent: a node that has it all changes nothing),
        then its doctor; a failing doctor after a switch switches it back. Raises NodeFailed."""
        from ..fleet.ssh import Upload

        res = self.results[node] = NodeResult(node)
        have = self.probe([node])[node]
        if isinstance(have, str):
            raise NodeFailed(f"cannot read its install: {have}")
        want = self.want
        changes = res.changes = nodemod.plan(want, have)
        kinds = {c.action for c in changes}
        if changes:
            self._sh(node, nodemod.dirs_script(want, "install" in kinds), "mkdir")
        if "install" in kinds:
            self.progress(f"{node}: installing {want.release}")
            limit = self.site.deploy.install_timeout_s
            if self.site.deploy.install == "tarball":
                tar = self._tarball()
                self._put(node, [Upload(f"{want.prefix}/wheelhouse/{want.release}.tar.gz", source=str(tar))],
                          "copying the release", timeout=limit)
                self._sh(node, nodemod.unpack_script(want), "unpack", timeout=limit)
            else:
                ups = [Upload(f"{want.prefix}/wheelhouse/{want.release}/{w}", source=str(self.release.dir / w))
                       for w in self.release.wheels]
                self._put(node, ups, "copying the wheelhouse", timeout=limit)
                self._sh(node, nodemod.install_script(want, self.site.deploy.python), "install", timeout=limit)
        if "switch" in kinds:
            self._sh(node, nodemod.switch_script(want, have), "switch")
        writes = [f for f in want.files if any(c.action == "write" and c.path == f.path for c in changes)]
        if writes:
            self._put(node, [Upload(f.path, data=f.data, mode=f.mode) for f in writes], "writing files")
        if "link" in kinds:
            self._sh(node, nodemod.links_script(want), "hook links")
        if want.unit and ("switch" in kinds or any(f.path == want.unit for f in writes)):
            self._sh(node, nodemod.systemd_script(want), "exporter unit")
        doomed = [c.path.rsplit("/", 1)[-1] for c in changes if c.action == "prune"]
        if doomed:
            self._sh(node, nodemod.prune_script(want, doomed), "prune")
        if changes:
            self._audit("deploy.node", node, self.reason, release=want.release,
                             changes=[c.line() for c in changes])
        res.release = want.release
        ok, res.findings, summary = self.doctor(node)
        if not ok:
            res.ok = False
            back = have.current if have.current and have.current != want.release and have.releases.get(have.current) \
                else None
            if back:
                self._sh(node, nodemod.switch_script(want, nodemod.Actual(current=want.release), back),
                         "switching back")
                res.release, res.reverted = back, True
                self._audit("deploy.revert", node, self.reason, release=want.release, back_to=back,
                                     doctor=summary)
            res.error = f"doctor: {summary}" + (f"; back on {back}" if back else "")
            raise NodeFailed(res.error)
        return res

    def _tarball(self):
        """The release's virtualenv as a tarball, built here once (one thread builds, the others wait)."""
        from .wheelhouse import tarball

        with self._tar_lock:
            return tarball(self.site, self.release, progress=self.progress)

    def doctor(self, node: str) -> tuple[bool, list[dict], str]:
        """`slurmadm doctor` of the node's current release: (passed, findings, failing summary)."""
        r = self.remote.run([node], nodemod.doctor_command(self.site, node), timeout=self.timeout)[0]
        if r.exit is None:
            return False, [], r.error
        try:
            data = json.loads(r.output[r.output.index("{"):])
            findings = [{k: f.get(k, "") for k in ("check", "status", "summary", "fix")} for f in data["findings"]]
        except (ValueError, KeyError, TypeError):
            last = (r.output.strip().splitlines() or [f"exit {r.exit}"])[-1]
            return False, [], f"no report (exit {r.exit}): {last[:160]}"
        for f in findings:
            _hooks_not_configured_yet(f)
        bad = [f"{f['check']} {f['status']}: {f['summary']}" for f in findings if f["status"] == "fail"]
        return not bad, findings, "; ".join(bad)[:300] or (f"exit {r.exit}" if r.exit else "")

    def rollback(self, node: str) -> NodeResult:
        """current <-> previous (the release it ran before), then its doctor."""
        res = self.results[node] = NodeResult(node)
        have = self.probe([node])[node]
        if isinstance(have, str):
            raise NodeFailed(f"cannot read its install: {have}")
        if not have.previous or not have.releases.get(have.previous):
            raise NodeFailed(f"no previous release to go back to (current: {have.current or 'none'})")
        self._sh(node, nodemod.switch_script(self.want, have, have.previous), "switch")
        res.changes = [nodemod.Change("switch", f"{self.want.prefix}/current", f"{have.current} -> {have.previous}")]
        res.release = have.previous
        self._audit("deploy.rollback", node, self.reason, release=have.previous, was=have.current)
        res.ok, res.findings, summary = self.doctor(node)
        if not res.ok:
            res.error = f"doctor: {summary}"
        return res


_NOT_CONFIGURED = re.compile(r"^(Prolog|Epilog|HealthCheckProgram) is .* in .*, not \S+$")


def _hooks_not_configured_yet(f: dict) -> None:
    """The doctor's `hooks` check fails a node whose slurm.conf does not run the hooks in
    slurm.prolog_dir yet, as on a first deploy (Slurm is pointed at them after they exist on
    every node: `deploy apply --head` or `config apply`). When that is its only problem the
    installed hooks are fine: a warning that says what is left to do, not a failed node."""
    if f["check"] != "hooks" or f["status"] != "fail" or not f["summary"].startswith("hooks: "):
        return
    problems = f["summary"][len("hooks: "):].split("; ")
    if problems and all(_NOT_CONFIGURED.match(p) for p in problems):
        f["status"] = "warn"
        f["summary"] = "hooks installed; slurm.conf does not run them yet: " + "; ".join(problems)
        f["fix"] = "slurmadm deploy apply --head (or slurmadm config apply) once every node has them"


# ------------------------------------------------------------------------------ the rollout


def rollout_name(release: str, nodes: list[str]) -> str:
    return f"deploy-{release}-{hashlib.sha256(compress(nodes).encode()).hexdigest()[:6]}"


class DeployRollout(Rollout):
    """`fleet rollout` with a deploy per node: no drain (the switch is atomic), no reboot."""

    def __init__(self, site, deployer: Deployer, nodes: list[str], *, store, restart: bool = False,
                 progress=lambda m: None):
        name = rollout_name(deployer.release.name, nodes)
        plan = Plan(name=name, description=f"slurmadm deploy {deployer.release.name}", nodes=compress(nodes),
                    reboot=False, steps=[Step(run=f"slurmadm deploy apply (release {deployer.release.name})")],
                    health_command="")
        sha = hashlib.sha256(f"{deployer.release.name} {compress(nodes)}".encode()).hexdigest()
        # a finished deploy of the same release runs again from the start: every node is read
        # again (one that has it all changes nothing; one changed since is repaired); a stopped
        # or interrupted one continues where it stopped
        from ..fleet.rollout import status

        before = status(store, name)
        restart = restart or bool(before and before[0].state == "done")
        super().__init__(site, plan, sha, backend=None, remote=deployer.remote, store=store,
                         options=Options(restart=restart), progress=progress)
        self.deployer = deployer
        deployer.store_of = lambda: self.db

    def _node_inner(self, tracker: Tracker, st) -> None:
        tracker.node(st, "steps")
        try:
            self.deployer.apply_node(st.node)
        except NodeFailed:
            raise
        except (SlurmadmError, OSError) as exc:  # one node's surprise fails that node, not the rollout
            raise NodeFailed(f"{type(exc).__name__}: {exc}") from None
        tracker.node(st, "done")
        self.progress(f"{st.node}: done")

    def _mark_failed(self, node: str, why: str) -> None:
        """Nothing to undo in Slurm: the node never left service (and is on its old release)."""
