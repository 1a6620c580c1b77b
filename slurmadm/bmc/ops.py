"""The `slurmadm bmc` operations: plans, Slurm safety, the change itself, audit events.

Slurm safety for power off/cycle/reset (and firmware updates): a node with running jobs is
refused unless --force; with --drain it is drained (`slurmadm: bmc-<action>: <why> [bmc]`), the
command waits (bmc.drain_timeout_s) until its jobs are gone, acts, and leaves it drained so the
reason says what happened. A node someone else drained keeps their reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CommandFailed, UnreachableError, UsageError
from ..slurm.model import NodeInfo, SlurmBackend
from ..slurm.ownership import format_reason, may_drain
from ..store import Store
from .fanout import Conn, Fleet, Row
from .model import SelEvent

BUSY = ("ALLOCATED", "MIXED", "COMPLETING")
DISRUPTIVE = ("off", "cycle", "reset")


def busy(node: NodeInfo | None) -> bool:
    return node is not None and (node.state in BUSY or "COMPLETING" in node.flags)


@dataclass
class Step:
    node: str
    action: str  # what would be done: "power cycle", "nothing (already on)", "refused"
    do: bool
    why: str = ""
    power: str | None = None  # power state read from the BMC
    slurm: str = ""  # Slurm state
    drain: bool = False  # drain and wait before acting
    error: str = ""
    no_slurm: bool = False  # Slurm was unreachable: acting without the job check (--force)

    def to_json(self) -> dict:
        return {"node": self.node, "action": self.action, "do": self.do, "why": self.why, "power": self.power,
                "slurm": self.slurm, "drain": self.drain, "error": self.error, "no_slurm": self.no_slurm}


@dataclass
class Outcome:
    steps: list[Step]
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def unreachable(self) -> bool:
        return any(s.error for s in self.steps) or bool(self.failed)

    @property
    def refused(self) -> bool:
        return any(not s.do and s.action == "refused" for s in self.steps)


def slurm_view(backend: SlurmBackend | None, nodes: list[str]) -> dict[str, NodeInfo]:
    if backend is None:
        return {}
    return {n.name: n for n in backend.nodes(nodes)}


def safety(node: str, info: NodeInfo | None, *, disruptive: bool, force: bool, drain: bool) -> tuple[bool, bool, str]:
    """(may act, must drain first, why)."""
    if not disruptive or force:
        return True, False, "--force" if (disruptive and busy(info)) else ""
    if info is None:
        return True, False, "not known to Slurm"
    if drain:
        if info.drained:
            return True, False, f"already drained ({info.reason})" if not busy(info) else "drained; waiting for jobs"
        verdict = may_drain(info)
        if not verdict.act:
            return False, False, f"cannot drain: {verdict.why}"
        return True, True, "drain, wait for jobs to end"
    if busy(info):
        return False, False, f"running jobs ({info.state_text}); use --drain or --force"
    return True, False, ""


class NoSlurm:
    """A Slurm backend that could not be had (get_backend failed): every query says why."""

    def __init__(self, why: str):
        self.why = why

    def nodes(self, names=None):
        raise UnreachableError(self.why)


def plan_power(fleet: Fleet, nodes: list[str], action: str, backend: SlurmBackend | None, *, force: bool,
               drain: bool, warn: Callable[[str], None] = lambda _msg: None) -> list[Step]:
    """What `bmc power ACTION` does on each node. Out-of-band power is for when the head's Slurm
    is down: if Slurm does not answer, `on` and anything with --force act without the job
    check (warned once, and audited as such); off/cycle/reset without --force are refused."""
    no_slurm = ""
    try:
        states = slurm_view(backend, nodes)
    except (UnreachableError, CommandFailed) as exc:
        states, no_slurm = {}, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if force or action == "on":
            warn(f"Slurm did not answer ({no_slurm}); power {action} without the job check")
    rows = {r.node: r for r in fleet.run(nodes, lambda c: c.bmc.power_state())}
    steps = []
    for node in nodes:
        info = states.get(node)
        row = rows[node]
        slurm = info.state_text if info else ("unreachable" if no_slurm else "?")
        if not row.ok:
            steps.append(Step(node, "unreachable", False, slurm=slurm, error=row.error))
            continue
        power = row.value
        if action in ("on", "off") and power == action:
            steps.append(Step(node, f"nothing (already {power})", False, power=power, slurm=slurm))
            continue
        if no_slurm:
            if force or action == "on":
                steps.append(Step(node, f"power {action}" if not (action == "cycle" and power == "off")
                                  else "power on (was off)", True,
                                  "--force; Slurm unreachable, no job check" if force else "Slurm unreachable",
                                  power=power, slurm=slurm, no_slurm=True))
            else:
                steps.append(Step(node, "refused", False, f"Slurm unreachable ({no_slurm}): cannot check for "
                                  "running jobs; use --force to act without the check", power=power, slurm=slurm))
            continue
        ok, must_drain, why = safety(node, info, disruptive=action in DISRUPTIVE, force=force, drain=drain)
        if not ok:
            steps.append(Step(node, "refused", False, why, power=power, slurm=slurm))
            continue
        label = f"power {action}" if not (action == "cycle" and power == "off") else "power on (was off)"
        steps.append(Step(node, label, True, why, power=power, slurm=slurm, drain=must_drain))
    return steps


def drain_and_wait(backend: SlurmBackend, steps: list[Step], check_id: str, reason: str, timeout_s: float,
                   progress: Callable[[str], None]) -> dict[str, str]:
    """Drain the steps that need it, wait until none of them runs jobs. Returns node -> why
    for those still busy at the deadline (they are left drained and not acted on)."""
    to_drain = [s.node for s in steps if s.do and s.drain]
    if to_drain:
        backend.drain(to_drain, format_reason(check_id, reason, "bmc"))
        progress(f"drained {len(to_drain)} node(s); waiting up to {timeout_s:g} s for their jobs")
    waiting = [s.node for s in steps if s.do and (s.drain or s.why == "drained; waiting for jobs")]
    deadline = time.monotonic() + timeout_s
    while waiting:
        states = slurm_view(backend, waiting)
        waiting = [n for n in waiting if busy(states.get(n))]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    return {n: f"jobs still running after {timeout_s:g} s (left drained)" for n in waiting}


def backend_or_none(get_backend: Callable[[], SlurmBackend]) -> SlurmBackend | NoSlurm:
    """The Slurm backend, or a NoSlurm saying why there is none: out-of-band power is for when
    Slurm is down, and plan_power decides what may still be done."""
    from ..errors import SlurmadmError

    try:
        return get_backend()
    except SlurmadmError as exc:
        return NoSlurm(str(exc))


def power(site, fleet: Fleet, backend: SlurmBackend, steps: list[Step], action: str, reason: str,
          progress: Callable[[str], None]) -> Outcome:
    """`bmc power ACTION` after its plan: drain and wait where asked (--drain; nodes still busy
    at bmc.drain_timeout_s are refused), then the power action, audited; a node whose BMC failed
    the change gets its error on its step."""
    with Store.for_site(site) as store:
        if any(s.do and (s.drain or s.why == "drained; waiting for jobs") for s in steps):
            stuck = drain_and_wait(backend, steps, f"bmc-power-{action}", reason, site.bmc.drain_timeout_s, progress)
            for s in steps:
                if s.node in stuck:
                    s.do, s.action, s.why = False, "refused", stuck[s.node]
            store.audit_many([("bmc.drain", s.node, reason, {"for": f"power {action}"}) for s in steps if s.drain])
        outcome = apply_power(fleet, steps, action, store, reason)
    for s in steps:
        if s.node in outcome.failed:
            s.error = outcome.failed[s.node]
    return outcome


def apply_power(fleet: Fleet, steps: list[Step], action: str, store: Store, reason: str) -> Outcome:
    todo = [s.node for s in steps if s.do]
    by_node = {s.node: s for s in steps}
    rows = fleet.run(todo, lambda c: c.bmc.power(action)) if todo else []
    out = Outcome(steps)
    events = []
    for r in rows:
        if r.ok:
            out.done.append(r.node)
            s = by_node[r.node]
            events.append((f"bmc.power.{action}", r.node, reason,
                           {"was": s.power, "slurm": s.slurm, "forced": s.why.startswith("--force"),
                            "drained": s.drain, "slurm_unreachable": s.no_slurm}))
        else:
            out.failed[r.node] = r.error
    if events:
        store.audit_many(events)
    return out


# ---------------------------------------------------------------------- reads
def read_sensors(fleet: Fleet, nodes: list[str], *, kind: str | None, alarms: bool) -> list[Row]:
    def fn(c: Conn):
        out = c.bmc.sensors()
        if kind:
            out = [s for s in out if s.type == kind or (kind == "power" and s.type == "psu")]
        if alarms:
            out = [s for s in out if s.alarm]
        return out

    return fleet.run(nodes, fn)


def read_sel(fleet: Fleet, nodes: list[str], *, since: float | None, clear: bool, store: Store | None,
             reason: str) -> list[Row]:
    """The event log; with clear, read and cleared in one step (IPMI: under a SEL reservation
    that any new event cancels, so the clear fails rather than lose it) and audited with what
    was cleared."""

    def fn(c: Conn) -> list[SelEvent]:
        return c.bmc.sel(clear=clear)

    rows = fleet.run(nodes, fn)
    if clear and store is not None:
        store.audit_many([("bmc.sel.clear", r.node, reason,
                           {"cleared": len(r.value), "critical": sum(e.severity == "critical" for e in r.value),
                            "last": [e.to_json() for e in r.value[-5:]]}) for r in rows if r.ok])
    if since is not None:
        for r in rows:
            if r.ok:
                r.value = [e for e in r.value if e.timestamp is None or e.timestamp >= since]
    return rows


def read_inventory(fleet: Fleet, nodes: list[str], *, redfish: bool) -> list[Row]:
    """FRU and firmware of each node. On a site with IPMI and Redfish, a half that fails does
    not throw away the half that answered: the row keeps what was read, with the failure under
    "errors" (the command still exits 3). Only when nothing answered is the row an error."""
    use_redfish = redfish and fleet.site.bmc.redfish

    def fn(c: Conn) -> dict:
        inv: dict = {}
        errors: list[str] = []
        try:
            inv.update(c.bmc.inventory())
        except UnreachableError as exc:
            if not use_redfish or fleet.site.bmc.protocol == "redfish":
                raise
            errors.append(str(exc))
        if use_redfish:
            try:
                firmware = c.redfish.firmware()
                extra = c.redfish.inventory() if fleet.site.bmc.protocol != "redfish" else {}
            except UnreachableError as exc:
                if not inv:
                    raise UnreachableError("; ".join([*errors, str(exc)])) from None
                errors.append(str(exc))
            else:
                inv["firmware"] = firmware
                for k, v in extra.items():
                    inv.setdefault(k, v)
        if errors:
            inv["errors"] = errors
        return inv

    return fleet.run(nodes, fn)


INVENTORY_KEY = "bmc.inventory"  # node_state: the node's last BMC inventory (slurmadm/repair/parts.py)


def record_inventory(store: Store, rows: list[Row]) -> None:
    """Keep what each BMC answered (FRU serials, PSUs, fans, firmware) as the node's
    `bmc.inventory` state, so the parts inventory is filled without asking the BMC again.
    Written only when it changed: the row's time is when it did."""
    import json

    for r in rows:
        if not r.ok or not r.value:
            continue
        value = json.dumps({k: v for k, v in r.value.items() if k != "errors"}, sort_keys=True)
        if store.get_node_state(r.node, INVENTORY_KEY) != value:
            store.set_node_state(r.node, INVENTORY_KEY, value)


def bootdev_plan(rows: list[Row], device: str, persistent: bool, *, dry_run: bool) -> list[dict]:
    """`bmc bootdev status` (and its --dry-run plan): each node's boot override as read, and
    with dry_run whether `bootdev DEVICE` would change it (set_bootdev's own rule)."""
    return [{"node": r.node, "bootdev": r.value[0] if r.ok else None, "persistent": r.value[1] if r.ok else None,
             "error": r.error or None,
             **({"would_change": r.ok and r.value != (device, persistent) and
                 not (device == "default" and r.value[0] == "default")} if dry_run else {})}
            for r in rows]


def inventory_errors(rows: list[Row]) -> list[tuple[str, str]]:
    """(node, error) for each node that did not answer, or answered only in part."""
    return [(r.node, e) for r in rows for e in ([r.error] if not r.ok else r.value.get("errors", []))]


def set_bootdev(fleet: Fleet, nodes: list[str], device: str, persistent: bool, store: Store,
                reason: str) -> tuple[list[Row], list[str]]:
    """Idempotent: nodes already set that way are left alone. Returns (rows, changed nodes)."""
    def fn(c: Conn):
        current = c.bmc.bootdev()
        if current == (device, persistent) or (device == "default" and current[0] == "default"):
            return {"was": current[0], "changed": False}
        c.bmc.set_bootdev(device, persistent)
        return {"was": current[0], "changed": True}

    rows = fleet.run(nodes, fn)
    changed = [r.node for r in rows if r.ok and r.value["changed"]]
    if changed:
        store.audit_many([("bmc.bootdev", n, reason, {"device": device, "persistent": persistent})
                          for n in changed])
    return rows, changed


def check_nodes(site, pattern: str) -> list[str]:
    from ..hostlist import expand

    nodes = expand(pattern, what="NODES")
    known = set(site.node_names)
    unknown = [n for n in nodes if n not in known]
    if unknown:
        from ..hostlist import compress

        raise UsageError(f"NODES: {compress(unknown)} not in the site's nodes")
    return nodes
