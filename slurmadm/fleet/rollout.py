"""Canary rollouts of a software change: canary nodes, then waves, stopping on failures.

A plan (TOML):

    name = "nccl-2.26"                     # the rollout's id in the store
    description = "NCCL 2.26.2 for the new all-to-all"
    nodes = "b200-[001-128]"               # default: every node of the site
    reboot = true                          # through Slurm (RebootProgram)
    health_command = "slurmadm health run --dry-run --json"   # on the node after the reboot (NCCL
                                                            # check included); "" skips
    # canary_nodes, wave_fraction, max_failed_fraction: default from [software]

    [[steps]]                              # in order, on the node, over SSH; each must exit 0
    run = "apt-get install -y libnccl2=2.26.2-1+cuda12.8"
    timeout_s = 900
    [[steps]]
    packages = ["libnccl-dev=2.26.2-1+cuda12.8"]   # a package target (package_manager = apt|dnf)
    [[steps]]                              # a firmware update through the node's BMC (Redfish,
    firmware = { component = "BIOS", image = "http://repo/bios-2.9.0.bin", version = "2.9.0" }
    timeout_s = 1800                       #  the `slurmadm bmc firmware update` API; push = true
                                           #  to send the image rather than let the BMC fetch it)

    [expect]                               # facts the node must show afterwards
    nccl = "2.26.2"

Per node: drain (`slurmadm: rollout: <name> [rollout]`; running jobs finish first, up to
fleet.drain_timeout_s) or, with --reservation, the nodes of an active maintenance reservation; the
steps (firmware steps through the BMC); the reboot through Slurm, `scontrol reboot ASAP
nextstate=DOWN reason=...` (with ReturnToService=2 Slurm returns a DOWN node to service as soon as
it registers, so there the node stays drained across a plain `scontrol reboot reason=...` instead);
wait until it registered with a new boot time (a node whose slurmd is gone, DOWN and not responding,
so that Slurm cannot reboot it, is power-cycled through its BMC instead when `slurmadm bmc` is set
up); verify `expect`; the health command; resume (also a node that came back DOWN under
--reservation). Canary nodes first (any failure stops the rollout), then waves of wave_fraction of
the nodes; the rollout stops when more than max_failed_fraction of its nodes failed. Failed nodes
stay drained with the reason.

State is in the store (fleet_rollouts, fleet_rollout_nodes): re-running the same plan after an
interruption skips finished nodes, picks up a node caught mid-reboot where it was, and redoes the
steps (which must be idempotent, as package installs are) of a node interrupted before its reboot.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from ..errors import SiteError, UnreachableError, UsageError
from ..hostlist import compress, expand
from ..proc import run as proc_run
from ..site.profiles import Strict
from ..slurm.ownership import OWNER_PREFIX, format_reason, reason_check_id

PKG_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._:~=\-]*$")
CHECK_ID = "rollout"


class FirmwareStep(Strict):
    """`slurmadm bmc firmware update` of one component, as a rollout step."""

    component: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    image: Annotated[str, Field(pattern=r"^(https?://|file://|/)[^\s'\"]+$")]
    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:+\-]{1,64}$")] | None = None
    push: bool = False  # slurmadm sends the image (multipart) instead of the BMC fetching it


class Step(Strict):
    run: str | None = None
    packages: list[Annotated[str, Field(pattern=PKG_TOKEN.pattern)]] | None = None
    firmware: FirmwareStep | None = None
    timeout_s: Annotated[float, Field(gt=0, le=86400)] = 900.0


class Plan(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$")]
    description: str = ""
    nodes: str | None = None
    reboot: bool = True
    package_manager: Literal["apt", "dnf"] = "apt"
    steps: Annotated[list[Step], Field(min_length=1)]
    expect: dict[str, Annotated[str, Field(min_length=1)]] = {}
    # On the node after the reboot; exit 0 = healthy. With --json its failing checks are named.
    health_command: str = "slurmadm health run --dry-run --json"
    canary_nodes: Annotated[int, Field(ge=0)] | None = None
    wave_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    max_failed_fraction: Annotated[float, Field(ge=0, le=1)] | None = None

    def command(self, step: Step) -> str:
        if step.run is not None:
            return step.run
        if step.firmware is not None:
            f = step.firmware
            return (f"bmc firmware update --component {f.component} --image {f.image}"
                    + (f" --version {f.version}" if f.version else "") + (" --push" if f.push else ""))
        pkgs = " ".join(step.packages or [])
        if self.package_manager == "apt":
            return f"DEBIAN_FRONTEND=noninteractive apt-get install -y --allow-downgrades {pkgs}"
        return f"dnf install -y {pkgs}"


BMC_CYCLE = "power cycle through the BMC"  # in a node's "rebooting" detail: how it was rebooted


def load_plan(path: str | Path) -> tuple[Plan, str]:
    """The plan and its sha256; a bad plan is a UsageError naming the key."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the plan ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{p}: not TOML ({exc})") from None
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        from ..site.load import format_validation_error

        raise SiteError(str(p), format_validation_error(exc, data)) from None
    problems = []
    for i, step in enumerate(plan.steps):
        if sum(x is not None for x in (step.run, step.packages, step.firmware)) != 1:
            problems.append(f"steps[{i}]: give exactly one of run, packages or firmware")
        elif step.run is not None and (not step.run.strip() or "\n" in step.run):
            problems.append(f"steps[{i}].run: one non-empty command line")
    if "\n" in plan.health_command:
        problems.append("health_command: one command line")
    if problems:
        raise SiteError(str(p), problems)
    return plan, hashlib.sha256(raw).hexdigest()


# ---------------------------------------------------------------------------------------- waves


def waves(nodes: list[str], canary: int, fraction: float) -> list[list[str]]:
    """[canary, wave 1, wave 2, ...]: the canary nodes first, then ceil(fraction x all) at a time."""
    canary = min(canary, len(nodes))
    out = [nodes[:canary]] if canary else []
    size = max(1, math.ceil(fraction * len(nodes)))
    rest = nodes[canary:]
    out += [rest[i:i + size] for i in range(0, len(rest), size)]
    return out


def budget(total: int, fraction: float) -> int:
    """How many failed nodes the rollout tolerates: it stops when more than this fail."""
    return math.floor(fraction * total + 1e-9)


def reboot_argv(node: str, reason: str, return_to_service: int) -> list[str]:
    """Slurm's documented update reboot is `scontrol reboot ASAP nextstate=DOWN reason=...`: the
    node comes back DOWN until verified. With ReturnToService=2 slurmctld returns a DOWN node to
    service as soon as it registers (seen on 22.05), so there a drained node is rebooted plainly:
    it comes back still DRAINED with our reason."""
    if return_to_service == 2:
        return ["scontrol", "reboot", f"reason={reason}", node]
    return ["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", node]


# ---------------------------------------------------------------------------------------- state

PHASES = ("pending", "draining", "steps", "rebooting", "verifying", "health", "resuming", "done", "failed",
          "skipped")


@dataclass
class NodeState:
    node: str
    wave: int
    phase: str = "pending"
    detail: str = ""
    ts: float = 0.0

    def as_dict(self) -> dict:
        return {"node": self.node, "wave": self.wave, "phase": self.phase, "detail": self.detail, "ts": self.ts}


@dataclass
class Status:
    name: str
    state: str  # running | stopped | done | failed | interrupted | absent
    detail: str
    nodes: list[NodeState] = field(default_factory=list)
    started: float | None = None
    updated: float | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "detail": self.detail, "started": self.started,
                "updated": self.updated, "nodes": [n.as_dict() for n in self.nodes]}


def status(store, name: str | None = None) -> list[Status]:
    rows = store.db.execute("SELECT * FROM fleet_rollouts" + (" WHERE id=?" if name else "") +
                            " ORDER BY started DESC", (name,) if name else ()).fetchall()
    out = []
    for r in rows:
        nodes = [NodeState(n["node"], n["wave"], n["phase"], n["detail"], n["ts"]) for n in store.db.execute(
            "SELECT * FROM fleet_rollout_nodes WHERE rollout=? ORDER BY wave, node", (r["id"],))]
        out.append(Status(r["id"], r["state"], r["detail"], nodes, r["started"], r["updated"]))
    return out


class Tracker:
    """The rollout's rows in the store; every phase change is written before it starts. Node
    threads write through their own connection (SQLite connections stay in their thread)."""

    def __init__(self, store, plan: Plan, sha: str):
        self.main, self.plan, self.sha = store, plan, sha
        self._local = threading.local()
        self._opened: list = []
        self._lock = threading.Lock()

    @property
    def store(self):
        if threading.current_thread() is threading.main_thread():
            return self.main
        st = getattr(self._local, "store", None)
        if st is None:
            from ..store import Store

            st = self._local.store = Store(self.main.path, audit_log=self.main.audit_log)
            with self._lock:
                self._opened.append(st)
        return st

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for st in opened:
            try:
                st.close()
            except Exception:
                pass

    def begin(self, plan_waves: list[list[str]], *, restart: bool) -> dict[str, NodeState]:
        db = self.store.db
        row = db.execute("SELECT * FROM fleet_rollouts WHERE id=?", (self.plan.name,)).fetchone()
        if row is not None and row["plan_sha"] != self.sha and not restart:
            raise UsageError(f"rollout {self.plan.name!r} ran with another version of this plan (state "
                             f"{row['state']}); give the changed plan a new name, or --restart")
        now = time.time()
        with self.store.transaction() as tx:
            if row is None or restart:
                tx.execute("DELETE FROM fleet_rollouts WHERE id=?", (self.plan.name,))
                tx.execute("DELETE FROM fleet_rollout_nodes WHERE rollout=?", (self.plan.name,))
                tx.execute("INSERT INTO fleet_rollouts (id, plan_sha, plan, state, detail, started, updated) "
                           "VALUES (?,?,?,?,?,?,?)", (self.plan.name, self.sha, self.plan.model_dump_json(),
                                                      "running", "", now, now))
            else:
                tx.execute("UPDATE fleet_rollouts SET state='running', detail='', updated=? WHERE id=?",
                           (now, self.plan.name))
            for w, members in enumerate(plan_waves):
                for n in members:
                    tx.execute("INSERT OR IGNORE INTO fleet_rollout_nodes (rollout, node, wave, phase, detail, ts) "
                               "VALUES (?,?,?,?,?,?)", (self.plan.name, n, w, "pending", "", now))
        return {s.node: s for s in status(self.store, self.plan.name)[0].nodes}

    def node(self, st: NodeState, phase: str, detail: str = "") -> None:
        st.phase, st.detail, st.ts = phase, detail, time.time()
        with self.store.transaction() as tx:
            tx.execute("UPDATE fleet_rollout_nodes SET phase=?, detail=?, ts=? WHERE rollout=? AND node=?",
                       (phase, detail, st.ts, self.plan.name, st.node))
        if phase in ("done", "failed", "skipped"):
            self.store.audit(f"fleet.rollout.node-{phase}", st.node, f"rollout {self.plan.name}", detail=detail)

    def end(self, state: str, detail: str) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE fleet_rollouts SET state=?, detail=?, updated=? WHERE id=?",
                       (state, detail, time.time(), self.plan.name))
        self.store.audit(f"fleet.rollout.{state}", self.plan.name, detail or state)


# ---------------------------------------------------------------------------------------- Slurm


class SlurmOps:
    """What a rollout asks of Slurm beyond the backend: reboots, boot times, jobs, reservations."""

    def __init__(self, backend, timeout: float = 20.0):
        self.backend = backend
        self.timeout = timeout

    def _run(self, argv: list[str]) -> str:
        return proc_run(argv, timeout=self.timeout, env=getattr(self.backend, "env", None)).stdout

    def node(self, name: str):
        return self.backend.nodes([name])[0]

    def boot_time(self, name: str) -> str:
        m = re.search(r"\bBootTime=(\S+)", self._run(["scontrol", "show", "node", "-o", name]))
        return m.group(1) if m else ""

    def jobs_on(self, name: str) -> list[str]:
        return self._run(["squeue", "-h", "-w", name, "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%i"]).split()

    def reboot(self, name: str, reason: str, rts: int) -> None:
        self._run(reboot_argv(name, reason, rts))

    def reservation_nodes(self, name: str) -> list[str] | None:
        """Nodes of an ACTIVE maintenance reservation `name` (None if there is none)."""
        for r in self.backend.reservations() if hasattr(self.backend, "reservations") else []:
            if r.name == name:
                return expand(r.nodes) if r.maintenance and r.nodes else None
        return None


# ---------------------------------------------------------------------------------------- engine


@dataclass
class Options:
    reservation: str | None = None
    restart: bool = False
    poll_s: float = 1.0


@dataclass
class Result:
    name: str
    state: str
    detail: str
    waves: list[list[str]]
    nodes: dict[str, NodeState]

    @property
    def failed(self) -> list[str]:
        return [n for n, s in self.nodes.items() if s.phase == "failed"]

    def as_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "detail": self.detail,
                "waves": [compress(w) for w in self.waves],
                "nodes": [s.as_dict() for s in self.nodes.values()]}


class NodeFailed(Exception):
    pass


def health_failures(reply) -> str:
    """What a failed health command said: the failing checks of `slurmadm health run --json`,
    else its last line."""
    if reply.error:
        return reply.error
    try:
        data = json.loads(reply.output[reply.output.index("{"):])
        bad = [f"{r['check_id']} {r['status']}: {r['detail']}" for r in data.get("results", [])
               if r.get("status") in ("fail", "error")]
        if bad:
            return "; ".join(bad)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    lines = reply.output.strip().splitlines()
    return f"exit {reply.exit}" + (f": {lines[-1]}" if lines else "")


class Rollout:
    def __init__(self, site, plan: Plan, sha: str, *, backend, remote, store, options: Options,
                 progress: Callable[[str], None] = lambda m: None):
        self.site, self.plan, self.sha = site, plan, sha
        self.slurm = SlurmOps(backend)
        self.backend, self.remote, self.store = backend, remote, store
        self.opt = options
        self.progress = progress
        self.nodes = self.plan_nodes(site, plan)
        sw = site.software
        self.canary = plan.canary_nodes if plan.canary_nodes is not None else sw.canary_nodes
        self.fraction = plan.wave_fraction or sw.wave_fraction
        self.max_failed = plan.max_failed_fraction if plan.max_failed_fraction is not None else sw.max_failed_fraction
        self.waves = waves(self.nodes, self.canary, self.fraction)
        self.reason = format_reason(CHECK_ID, plan.name, CHECK_ID)

    @staticmethod
    def plan_nodes(site, plan: Plan) -> list[str]:
        if not plan.nodes:
            return list(site.node_names)
        names = expand(plan.nodes, what="plan nodes")
        unknown = [n for n in names if n not in set(site.node_names)]
        if unknown:
            raise UsageError(f"plan nodes: {compress(unknown)} are not nodes of the site")
        return names

    def dry_run(self) -> dict:
        return {"name": self.plan.name, "waves": [{"wave": "canary" if i == 0 and self.canary else i,
                                                   "nodes": compress(w), "count": len(w)}
                                                  for i, w in enumerate(self.waves)],
                "steps": [self.plan.command(s) for s in self.plan.steps], "reboot": self.plan.reboot,
                "reboot_command": " ".join(reboot_argv("NODE", self.reason, self.site.slurm.return_to_service)),
                "expect": self.plan.expect, "health_command": self.plan.health_command,
                "max_failed": budget(len(self.nodes), self.max_failed),
                "hold": f"reservation {self.opt.reservation}" if self.opt.reservation else "drain"}

    # ---- the run
    def run(self) -> Result:
        tracker = self.tracker = Tracker(self.store, self.plan, self.sha)
        try:
            return self._run(tracker)
        finally:
            tracker.close()

    @property
    def db(self):
        """The store for the calling thread."""
        return self.tracker.store if getattr(self, "tracker", None) else self.store

    def _run(self, tracker: "Tracker") -> Result:
        states = tracker.begin(self.waves, restart=self.opt.restart)
        self.store.audit("fleet.rollout.start", self.plan.name, self.plan.description or "rollout",
                         waves=[compress(w) for w in self.waves], plan_sha=self.sha)
        allowed = budget(len(self.nodes), self.max_failed)
        try:
            for i, wave in enumerate(self.waves):
                todo = [n for n in wave if states[n].phase not in ("done", "skipped")]
                label = "canary" if i == 0 and self.canary else f"wave {i}"
                if not todo:
                    continue
                self.progress(f"{label}: {compress(todo)}")
                workers = max(1, min(len(todo), self.site.fleet.fanout))
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(lambda n: self._node(tracker, states[n]), todo))
                failed = [n for n, s in states.items() if s.phase == "failed"]
                if i == 0 and self.canary and any(states[n].phase == "failed" for n in wave):
                    detail = f"canary failed: {compress([n for n in wave if states[n].phase == 'failed'])}"
                    tracker.end("stopped", detail)
                    return Result(self.plan.name, "stopped", detail, self.waves, states)
                if len(failed) > allowed:
                    detail = (f"{len(failed)} node(s) failed ({compress(failed)}), more than max_failed_fraction "
                              f"{self.max_failed:g} of {len(self.nodes)} allows ({allowed})")
                    tracker.end("stopped", detail)
                    return Result(self.plan.name, "stopped", detail, self.waves, states)
        except BaseException:
            tracker.end("interrupted", "interrupted; run the same plan again to continue")
            raise
        failed = [n for n, s in states.items() if s.phase == "failed"]
        skipped = [n for n, s in states.items() if s.phase == "skipped"]
        state = "done" if not failed and not skipped else "failed"
        detail = "" if state == "done" else (f"failed: {compress(failed)} " if failed else "") + (
            f"skipped: {compress(skipped)}" if skipped else "")
        tracker.end(state, detail.strip())
        return Result(self.plan.name, state, detail.strip(), self.waves, states)

    # ---- one node
    def _node(self, tracker: Tracker, st: NodeState) -> None:
        try:
            self._node_inner(tracker, st)
        except _Skip:
            self.progress(f"{st.node}: skipped: {st.detail}")
        except NodeFailed as exc:
            tracker.node(st, "failed", str(exc))
            self._mark_failed(st.node, str(exc))
            self.progress(f"{st.node}: failed: {exc}")
        except UnreachableError as exc:
            tracker.node(st, "failed", f"Slurm: {exc}")
            self.progress(f"{st.node}: failed: {exc}")

    def _node_inner(self, tracker: Tracker, st: NodeState) -> None:
        node = st.node
        resumed_midway = st.phase in ("rebooting", "verifying", "health", "resuming")
        if not resumed_midway:
            self._hold(tracker, st)
            tracker.node(st, "steps")
            for i, step in enumerate(self.plan.steps):
                cmd = self.plan.command(step)
                if step.firmware is not None:
                    self._firmware(node, i, step)
                    continue
                reply = self.remote.run([node], cmd, timeout=step.timeout_s)[0]
                self.db.audit("fleet.rollout.step", node, f"rollout {self.plan.name}", step=i, command=cmd,
                                 exit=reply.exit, error=reply.error)
                if reply.exit != 0:
                    last = (reply.error or reply.output.strip().splitlines()[-1:] or [""])[0] if (
                        reply.error or reply.output.strip()) else ""
                    raise NodeFailed(f"step {i + 1} ({cmd[:60]}) "
                                     + (f"exit {reply.exit}" if reply.exit is not None else "did not finish")
                                     + (f": {last[:120]}" if last else ""))
        if self.plan.reboot and (not resumed_midway or st.phase == "rebooting"):
            self._reboot(tracker, st)
        tracker.node(st, "verifying")
        self._verify(node)
        if self.plan.health_command.strip():
            tracker.node(st, "health")
            reply = self.remote.run([node], self.plan.health_command, timeout=self.site.fleet.command_timeout_s)[0]
            if reply.exit != 0:
                raise NodeFailed(f"health: {health_failures(reply)[:160]}")
        tracker.node(st, "resuming")
        self._release(node)
        tracker.node(st, "done")
        self.progress(f"{node}: done")

    def _hold(self, tracker: Tracker, st: NodeState) -> None:
        """Take the node out of service (drain, or the maintenance reservation) and wait until no
        job runs there."""
        node = st.node
        tracker.node(st, "draining")
        info = self.slurm.node(node)
        if self.opt.reservation:
            members = self.slurm.reservation_nodes(self.opt.reservation)
            if members is None or node not in members:
                raise NodeFailed(f"not in the active maintenance reservation {self.opt.reservation}")
        elif info.drained and info.reason.startswith(f"{OWNER_PREFIX} {CHECK_ID}: {self.plan.name}"):
            pass  # ours from an earlier run
        elif (info.drained and reason_check_id(info.reason) == "drift"
              and not info.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "RESERVED"}):
            # drained by `fleet drift`: the rollout is what fixes it, so it takes the node over
            self.backend.set_reason([node], self.reason)
            self.db.audit("node.drain", node, f"rollout {self.plan.name}", slurm_reason=self.reason,
                          took_over=info.reason)
        elif info.drained or info.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "RESERVED",
                                           "POWERED_DOWN", "POWERING_DOWN"}:
            tracker.node(st, "skipped", f"held by someone else ({info.state_text}: {info.reason or 'no reason'})")
            raise _Skip()
        else:
            self.backend.drain([node], self.reason)
            self.db.audit("node.drain", node, f"rollout {self.plan.name}", slurm_reason=self.reason)
        deadline = time.monotonic() + self.site.fleet.drain_timeout_s
        while self.slurm.jobs_on(node):
            if time.monotonic() > deadline:
                raise NodeFailed(f"jobs still running after {self.site.fleet.drain_timeout_s:g} s")
            time.sleep(self.opt.poll_s)

    def _reboot(self, tracker: Tracker, st: NodeState) -> None:
        node = st.node
        info = self.slurm.node(node)
        gone = "NOT_RESPONDING" in info.flags or info.state == "DOWN" and not info.reason.startswith(OWNER_PREFIX)
        m = re.match(r"boot time before: (\S*)", st.detail) if st.phase == "rebooting" else None
        if m and not info.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"} and not gone \
                and self.slurm.boot_time(node) != m.group(1):
            return  # interrupted after the node came back: not rebooted twice
        limit = self.site.fleet.reboot_timeout_s
        waited = time.time() - st.ts if m else 0.0
        if gone and m and BMC_CYCLE in st.detail and waited < limit:
            # interrupted while the node boots from our power cycle: wait out the rest of the
            # reboot time rather than cut its power again (a re-run must not cycle twice)
            before = m.group(1)
            limit -= waited
            self.progress(f"{node}: power-cycled {waited:.0f} s ago by this rollout; waiting for it to boot")
        elif gone:
            before = self.slurm.boot_time(node)
            tracker.node(st, "rebooting", f"boot time before: {before} ({BMC_CYCLE})")
            self._bmc_cycle(node, info)
        elif m is None or not info.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}:
            before = self.slurm.boot_time(node)
            tracker.node(st, "rebooting", f"boot time before: {before}")
            self.slurm.reboot(node, self.reason, self.site.slurm.return_to_service)
            self.db.audit("node.reboot", node, f"rollout {self.plan.name}", slurm_reason=self.reason, via="slurm")
        else:
            before = m.group(1)
        deadline = time.monotonic() + limit
        while True:
            info = self.slurm.node(node)
            rebooting = info.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}
            if not rebooting and "NOT_RESPONDING" not in info.flags and self.slurm.boot_time(node) != before:
                return
            if time.monotonic() > deadline:
                raise NodeFailed(f"did not come back within {self.site.fleet.reboot_timeout_s:g} s "
                                 f"({info.state_text})")
            time.sleep(self.opt.poll_s)

    def _bmcs(self):
        """`slurmadm bmc`'s fan-out over the site's BMCs (made once per rollout)."""
        from ..errors import SlurmadmError
        from . import bmc_configured

        if getattr(self, "_bmc_fleet", None) is None:
            if not bmc_configured(self.site):
                raise NodeFailed(f"no BMC access (bmc.password_file {self.site.bmc.password_file} does not exist)")
            from ..bmc.fanout import Fleet

            try:
                self._bmc_fleet = Fleet(self.site)
            except SlurmadmError as exc:
                raise NodeFailed(f"BMC: {exc}") from None
        return self._bmc_fleet

    def _bmc_cycle(self, node: str, info) -> None:
        """slurmd is gone (Slurm cannot run its RebootProgram): power-cycle through the BMC."""
        try:
            bmcs = self._bmcs()
        except NodeFailed as exc:
            raise NodeFailed(f"slurmd not responding ({info.state_text}) and {exc}; a power cycle is needed") from None
        row = bmcs.run([node], lambda c: c.bmc.power("cycle"))[0]
        self.db.audit("bmc.power.cycle", node, f"rollout {self.plan.name}", was=info.state_text,
                      ok=row.ok, error=row.error)
        if not row.ok:
            raise NodeFailed(f"slurmd not responding ({info.state_text}); BMC power cycle failed: {row.error}")
        self.db.audit("node.reboot", node, f"rollout {self.plan.name}", slurm_reason=self.reason, via="bmc")

    def _firmware(self, node: str, i: int, step: Step) -> None:
        """A firmware step: `slurmadm bmc firmware update` of one component on this node's BMC
        (skipped when it already runs `version`), the task followed to the end and re-read."""
        from ..bmc import firmware as fw
        from ..bmc.redfish import _fetch
        from ..errors import SlurmadmError

        f = step.firmware
        bmcs = self._bmcs()
        try:
            image = _fetch(f.image) if f.push else None
        except SlurmadmError as exc:
            raise NodeFailed(f"step {i + 1} (firmware {f.component}): {exc}") from None

        def update(c) -> dict:
            have = c.redfish.firmware().get(f.component)
            if f.version and have == f.version:
                return {"before": have, "after": have, "ok": True, "skipped": f"already at {f.version}"}
            return fw.update_one(c, f.component, f.image, image, step.timeout_s, f.version)

        row = bmcs.run([node], update, deadline_s=bmcs.default_deadline + step.timeout_s + 30)[0]
        res = row.value if row.ok else {"ok": False, "error": row.error}
        self.db.audit("bmc.firmware.update", node, f"rollout {self.plan.name}", step=i, component=f.component,
                      image=f.image, **{k: v for k, v in res.items() if k != "ok"}, ok=res["ok"])
        if not res["ok"]:
            why = res.get("error") or "; ".join(res.get("messages", [])) or (
                f"task {res.get('task')}, version {res.get('before')} -> {res.get('after')}")
            raise NodeFailed(f"step {i + 1} (firmware {f.component}) failed: {why[:160]}")

    def _verify(self, node: str) -> None:
        if not self.plan.expect:
            return
        from . import facts

        got = facts(self.site, [node], remote=self.remote, store=self.db)[node]
        if got.error:
            raise NodeFailed(f"verify: {got.error}")
        wrong = [f"{k} {got.facts.get(k, '(none)')} != {v}" for k, v in sorted(self.plan.expect.items())
                 if got.facts.get(k) != v]
        if wrong:
            raise NodeFailed("verify: " + ", ".join(wrong))

    def _release(self, node: str) -> None:
        """Back to service if the hold is ours: our drain, or (also under --reservation) the
        DOWN state our `scontrol reboot ... nextstate=DOWN` left."""
        info = self.slurm.node(node)
        ours = info.reason.startswith(f"{OWNER_PREFIX} {CHECK_ID}: {self.plan.name}")
        if ours and (info.drained or info.state == "DOWN"):
            self.backend.resume([node])
            self.db.audit("node.resume", node, f"rollout {self.plan.name}", slurm_reason="verified after the rollout")

    def _mark_failed(self, node: str, why: str) -> None:
        """A failed node stays out of service, its reason saying why (only if the drain is ours)."""
        try:
            info = self.slurm.node(node)
        except UnreachableError:
            return
        if not info.reason.startswith(f"{OWNER_PREFIX} {CHECK_ID}: {self.plan.name}"):
            return
        failed = format_reason(CHECK_ID, f"{self.plan.name}: FAILED {why}", CHECK_ID)
        if info.drained:
            self.backend.set_reason([node], failed)
        elif info.state == "DOWN":  # back from `reboot ... nextstate=DOWN`: drained too, so it stays out
            self.backend.drain([node], failed)


class _Skip(NodeFailed):
    pass
