"""`slurmadm repair run`: advance each incident by one step.

Planning (`plan()`) is pure: the incidents, what Slurm says about their nodes and a few facts
from the store in, one `Action` per node out, each with why. Acting (`Executor`) re-reads Slurm,
re-plans under the repair lock (`<store>.repair.lock`), audits each step (`repair.<step>`),
carries it out, moves the incident (`incidents.advance`) and re-reads. A second run with nothing
new does nothing.

What a node's step may be:
- `reset`: `nvidia-smi --gpu-reset` of the incident's GPU over SSH (reset.py), only on a node
  slurmadm drained that runs no job; then the qualification job (qualify.py) in the same run. A
  reset that fails falls back to a reboot at once.
- `reboot`: `scontrol reboot ASAP nextstate=DOWN reason="slurmadm: repair: reboot: ..."`; when
  the node is back, the qualification job. A reboot that has not come back within the timeout is
  power-cycled through the BMC (`bmc recover`'s power cycle, under its hourly rate limit); one
  that does not come back from that either is an RMA candidate.
- `qualify`: the gate before return. A pass resumes the node and closes the incident; a failure
  keeps it drained and lets the ladder pick the next step. `lemon_failed_qualifications` failed
  qualifications in `lemon_window_days` make the node a lemon.
- `rma` / `lemon`: the node stays drained with `slurmadm: repair: rma <ticket>: ...` /
  `slurmadm: repair: lemon: ...`; never resumed by slurmadm.
- `drain`: an incident on a node still in service (the verdict did not drain it): drain it with
  the repair reason, under the health breaker; the step follows once its jobs are gone.
- `close`: incidents the ladder has not acted on yet, of a class a burn-in pass proves
  (classes.toml `burnin_closes`), on a node a burn-in sweep passed that began after their last
  signal: closed, and nothing else is done to the node (a site without the ladder's timer lets
  burn-in re-qualify its drained nodes; the ladder must not drain a node that passed for a step
  it no longer needs).

Never acted on: a node drained by someone else or whose reason an admin edited, a node in a
MAINT reservation or another state someone else handles (reboot, power, DOWN) unless it is our
own reboot, a node running jobs (wait), and past `[repair] breaker_fraction` of any partition in
repair at once (hold). The run plans every node, then acts node after node: each step re-reads
its node first (`changed_since`), and one that changed since the plan (a job, someone else's
drain or state, resumed under us) is left for the next run (`ok: null`). Slurm unreachable, or SSH to a node that needs a reset: exit 3 before
anything changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..errors import UnreachableError
from ..slurm.model import NodeInfo
from ..slurm.ownership import (
    foreign_state,
    format_reason,
    is_ours,
    reason_check_id,
    reason_detail,
)
from .incidents import burnin_closable, burnin_passes, close_why

CHECK_ID = "repair"
CONTEXT = "repair"
REBOOT_AT = "repair-reboot-at"  # node_state: when repair asked Slurm to reboot the node
CYCLED_AT = "repair-cycled-at"  # node_state: when repair power-cycled it through the BMC
BOOT_BEFORE = "repair-boot-before"  # node_state: Slurm's BootTime of the node when the reboot was asked
REBOOT_TIMEOUT_S = 1800.0  # HGX reboots take tens of minutes; then the BMC power cycle
IN_REPAIR = ("resetting", "rebooting", "qualifying")
WORKING = ("reset", "reboot", "power-cycle", "qualify")  # steps that take a node out to repair it
ORDER = {"rma": 0, "lemon": 0, "rebooting": 1, "qualifying": 2, "resetting": 3, "open": 4}
OUR_REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "NOT_RESPONDING", "POWERING_UP"})
# what slurmctld appends to a node's reason as it reboots it (node_mgr.c/agent: seen on 22.05)
SLURM_REBOOT_SUFFIXES = (" : reboot issued", " : reboot complete")


def without_reboot_notes(reason: str) -> str:
    """Our reboot reason as we set it, without the notes slurmctld appended while rebooting."""
    changed = True
    while changed:
        changed = False
        for suffix in SLURM_REBOOT_SUFFIXES:
            if reason.endswith(suffix):
                reason, changed = reason[: -len(suffix)], True
    return reason


def reason(step: str, detail: str) -> str:
    """`slurmadm: repair: <step>: <detail> [repair]` (slurm/ownership.py: repair owns it)."""
    return format_reason(CHECK_ID, f"{step}: {detail}", CONTEXT)


def repair_step_of(node: NodeInfo) -> str:
    """The step of a repair drain reason ('' when the reason is not repair's)."""
    if not is_ours(node) and not node.reason.startswith("slurmadm: repair:"):
        return ""
    if reason_check_id(node.reason) != CHECK_ID:
        return ""
    return reason_detail(node.reason).split(":", 1)[0].split(" ", 1)[0].strip()


@dataclass
class Action:
    node: str
    do: str  # reset | reboot | power-cycle | qualify | rma | lemon | drain | close | wait | hold | skip | none
    why: str
    incident: str = ""
    cls: str = ""
    slots: tuple[int, ...] = ()
    reason: str = ""  # the drain reason this step sets ('' = leaves it)
    state: str = ""  # the incident's state now
    rung: int | None = None  # the ladder rung the step is on (None: the incident's own)
    closes: tuple[str, ...] = ()  # `close`: the incidents a burn-in pass closes

    @property
    def acts(self) -> bool:
        return self.do not in ("wait", "hold", "skip", "none")

    def to_json(self) -> dict[str, Any]:
        out = {"node": self.node, "step": self.do, "why": self.why, "incident": self.incident, "class": self.cls,
               "gpus": list(self.slots), "reason": self.reason, "state": self.state}
        if self.closes:
            out["closes"] = list(self.closes)
        return out


def _slots(inc) -> tuple[int, ...]:
    slot = str(getattr(inc, "slot", "") or "")
    if getattr(inc, "part_kind", "gpu") != "gpu":
        return ()
    return tuple(int(s) for s in slot.replace(" ", "").split(",") if s.isdigit())


def _busy(n: NodeInfo) -> str:
    if n.state in ("ALLOCATED", "MIXED") or "COMPLETING" in n.flags:
        return f"jobs still on the node ({n.state_text})"
    if n.gpus_used:
        return f"{n.gpus_used} GPU(s) allocated"
    return ""


def repair_breaker(node: NodeInfo, everyone: Sequence[NodeInfo], in_repair: set[str], fraction: float) -> str:
    """'' when taking `node` into repair keeps every partition of it within `fraction` (at least
    one node per partition), else why not."""
    for part in node.partitions:
        members = [n.name for n in everyone if part in n.partitions]
        busy = sorted(m for m in members if m in in_repair and m != node.name)
        cap = max(1, math.floor(fraction * len(members) + 1e-9))
        if len(busy) + 1 > cap:
            return (f"partition {part}: {len(busy)} of {len(members)} nodes already in repair "
                    f"({', '.join(busy)}), cap {cap} (repair.breaker_fraction {fraction:g})")
    return ""


def link_watch_s(site, classes) -> float:
    """How long a qualification watches the node's links at least: `repair.link_watch_s` for a
    node repaired for an HCA (a link down or flapping), at most half the qualification job's time
    limit (`burnin.job_time_limit`); else no longer than its other tests."""
    if "HCA" not in classes:
        return 0.0
    from ..site.accounts import slurm_time_seconds

    job = slurm_time_seconds(site.burnin.job_time_limit) or 0
    # the job's own limit bounds it (a site's explicit watch must fit: site/validate.py)
    return float(min(site.repair.link_watch_s, job / 2)) if job else float(site.repair.link_watch_s)


def qualification_text(watch: float) -> str:
    return ("qualification job: stress, single-node all-reduce, known-answer test, health suite, link watch"
            + (f" (at least {watch:g} s)" if watch else ""))


def rebooted_back(n: NodeInfo) -> bool:
    """Back from our reboot: slurmd registered again, no reboot pending or issued."""
    return not (n.flags & OUR_REBOOT_FLAGS) and n.state not in ("UNKNOWN", "FUTURE")


@dataclass
class Facts:
    """What planning needs from the store besides the incidents."""

    reboot_at: dict[str, float] = field(default_factory=dict)
    cycled_at: dict[str, float] = field(default_factory=dict)
    failed_quals: dict[str, int] = field(default_factory=dict)  # node -> failed qualifications
    # nodes whose BootTime is still the one before our reboot (registered, but not rebooted yet)
    not_rebooted: set[str] = field(default_factory=set)
    # node -> (when it began, id) of the latest burn-in sweep that passed it
    burnin_passed: dict[str, tuple[float, str]] = field(default_factory=dict)


def plan(incidents: Iterable, nodes: Sequence[NodeInfo], *, next_step: Callable[[Any], Any], now: float,
         fraction: float, drain_fraction: float, facts: Facts | None = None, lemon_after: int = 2,
         reboot_timeout_s: float = REBOOT_TIMEOUT_S) -> list[Action]:
    """One action per node with an incident not closed (see the module docstring)."""
    from ..health.actions import breaker

    facts = facts or Facts()
    by_name = {n.name: n for n in nodes}
    per_node: dict[str, list] = {}
    for inc in incidents:
        if inc.state == "closed":
            continue
        per_node.setdefault(inc.node, []).append(inc)
    # nodes in repair now: a working state, or a repair drain of a working step
    in_repair = {i.node for incs in per_node.values() for i in incs if i.state in IN_REPAIR}
    in_repair |= {n.name for n in nodes if repair_step_of(n) in WORKING}
    out: list[Action] = []
    for node_name in sorted(per_node):
        incs = _in_order(per_node[node_name], next_step)
        inc = incs[0]
        n = by_name.get(node_name)
        base = {"node": node_name, "incident": str(inc.id), "cls": inc.cls, "slots": _slots(inc), "state": inc.state}
        if n is None:
            out.append(Action(do="skip", why="Slurm does not report this node", **base))
            continue
        closable = burnin_closable(incs, facts.burnin_passed.get(node_name))
        if closable:
            first = closable[0]
            out.append(Action(node=node_name, do="close", incident=str(first.id), cls=first.cls, slots=_slots(first),
                              state=first.state, closes=tuple(str(i.id) for i in closable),
                              why=close_why(closable, facts.burnin_passed[node_name])))
            continue
        if inc.state == "rebooting" and n.reason.startswith("slurmadm: repair: "):
            n = replace(n, reason=without_reboot_notes(n.reason))  # our reason, as Slurm rebooted it
        act = _decide(inc, n, next_step=next_step, now=now, facts=facts, lemon_after=lemon_after,
                      reboot_timeout_s=reboot_timeout_s, base=base)
        if act.do == "reset":
            act = _with_other_resets(act, incs[1:], next_step)
        act = _guard(act, n, nodes, in_repair, fraction, drain_fraction, breaker)
        if act.do in WORKING:
            in_repair.add(node_name)
        out.append(act)
    return out


# of incidents merely open on one node, the one whose step goes first: a reboot resets every GPU
STRENGTH = {"rma": 0, "lemon": 0, "reboot": 1, "reset": 2, "resume": 3, "qualify": 3}


def _action_of(inc, next_step) -> str:
    step = next_step(inc)
    return getattr(step, "action", None) or str(step)


def _in_order(incs: list, next_step) -> list:
    """A node's incidents, the one its step is for first: one in progress (ORDER: an RMA or a
    lemon, then rebooting, qualifying, resetting), else among those merely open the strongest
    next step (RMA, reboot, reset, qualify), then the incident id."""
    def key(i):
        strength = STRENGTH.get(_action_of(i, next_step), 9) if i.state == "open" else 0
        return (ORDER.get(i.state, 9), strength, str(i.id))

    return sorted(incs, key=key)


def _with_other_resets(act: Action, others: list, next_step) -> Action:
    """A reset takes every GPU of the node an open incident wants reset, not only its own
    incident's: the qualification after it judges the whole node, and the reset's XID
    acknowledgement covers every line before it."""
    more = [o for o in others if o.state == "open" and _slots(o) and _action_of(o, next_step) == "reset"
            and set(_slots(o)) - set(act.slots)]
    if not more:
        return act
    slots = tuple(sorted(set(act.slots).union(*(_slots(o) for o in more))))
    also = ", ".join(f"GPU{','.join(map(str, _slots(o)))} ({o.cls} {o.id})" for o in more)
    return replace(act, slots=slots, why=f"{act.why}; also {also}")


def _decide(inc, n: NodeInfo, *, next_step, now, facts: Facts, lemon_after: int, reboot_timeout_s: float,
            base: dict) -> Action:
    where = f"{inc.cls} GPU{','.join(map(str, _slots(inc)))}" if _slots(inc) else inc.cls
    failed = facts.failed_quals.get(n.name, 0)
    # an incident an RMA case holds (rma, then qualifying with the new part) is the case's: the
    # failed qualifications were the old part's
    in_case = inc.state == "rma" or (inc.state == "qualifying"
                                     and any(isinstance(e, dict) and e.get("new_part") for e in getattr(inc, "evidence", [])))
    if inc.state == "lemon" or (failed >= lemon_after and not in_case):
        why = f"{failed} failed qualification(s) (lemon at {lemon_after})" if failed >= lemon_after else \
            inc.why or "a lemon"
        return Action(do="lemon", why=why, reason=reason("lemon", f"{where}: {why}"), **base)
    if inc.state == "rma":
        return Action(do="rma", why=inc.why or "RMA candidate", reason=reason("rma", f"{where}: {inc.why or 'RMA'}"),
                      **base)
    if inc.state == "rebooting":
        asked = facts.reboot_at.get(n.name)
        if rebooted_back(n) and n.name not in facts.not_rebooted:
            return Action(do="qualify", why="back from the reboot", reason=reason("qualify", f"{where}: after reboot"),
                          **base)
        cycled = facts.cycled_at.get(n.name)
        if cycled is not None:
            if now - cycled > reboot_timeout_s:
                why = f"not back {now - cycled:.0f} s after a BMC power-cycle"
                return Action(do="rma", why=why, reason=reason("rma", f"{where}: {why}"), **base)
            return Action(do="wait", why=f"power-cycled {now - cycled:.0f} s ago; waiting for slurmd", **base)
        if asked is not None and now - asked > reboot_timeout_s:
            return Action(do="power-cycle", why=f"reboot not back after {now - asked:.0f} s "
                          f"(timeout {reboot_timeout_s:g} s)", **base)
        return Action(do="wait", why=f"rebooting ({n.state_text})" + (f" for {now - asked:.0f} s" if asked else ""),
                      **base)
    if inc.state == "qualifying":
        return Action(do="qualify", why=inc.why or "qualification due", reason=reason("qualify", where), **base)
    if inc.state == "resetting":  # a run died during the reset: do it again (idempotent)
        return Action(do="reset", why="reset interrupted; again", reason=reason("reset", where), **base)
    step = next_step(inc)
    action = getattr(step, "action", None) or str(step)
    why = getattr(step, "why", "") or f"ladder: {action}"
    detail = f"{where}: {why}"
    if action in ("reset", "reboot", "qualify", "rma", "lemon"):
        r = getattr(step, "reason", "") or reason(action, detail)
        return Action(do=action, why=why, reason=r, rung=getattr(step, "rung", None), **base)
    if action == "resume":  # the ladder says the node may return: only through a qualification
        return Action(do="qualify", why=why, reason=reason("qualify", detail), rung=getattr(step, "rung", None),
                      **base)
    return Action(do="none" if action == "none" else "wait", why=why, **base)


def _ours_reboot(act: Action, n: NodeInfo) -> bool:
    """Our own reboot: its flags, and the DOWN it leaves (nextstate=DOWN with our reason), are ours."""
    return act.state == "rebooting" and (n.reason.startswith("slurmadm: repair:") or not n.reason
                                         or "REBOOT_REQUESTED" in n.flags or "REBOOT_ISSUED" in n.flags)


def _guard(act: Action, n: NodeInfo, everyone: Sequence[NodeInfo], in_repair: set[str], fraction: float,
           drain_fraction: float, breaker) -> Action:
    """The safety rules: ownership, foreign states, jobs, the breakers."""
    if not act.acts or act.do == "close":  # closing touches no node
        return act
    if n.drained and not is_ours(n):
        return replace(act, do="skip", why=f"drained by {n.reason_user or 'someone else'}: {n.reason!r}; "
                       "left to them")
    if "MAINTENANCE" in n.flags:
        return replace(act, do="skip", why="in a MAINT reservation; left to whoever owns it")
    ours_reboot = _ours_reboot(act, n)
    foreign = foreign_state(n)
    if foreign and not (ours_reboot and (act.do in ("power-cycle", "rma", "qualify"))):
        return replace(act, do="skip", why=f"node is {foreign}; left to whoever owns that")
    if act.do in ("rma", "lemon"):
        if n.reason == act.reason or repair_step_of(n) == act.do:
            return replace(act, do="none", why=f"{act.do}: already drained as one ({n.reason})")
        if not n.drained and not ours_reboot:
            why = breaker(n, list(everyone), drain_fraction)
            if why:
                return replace(act, do="hold", why=f"breaker: not draining for {act.do}: {why}")
        return act
    if act.do == "power-cycle":
        return act
    # reset, reboot, qualify: a node drained by slurmadm with no job (after our reboot: DOWN by us)
    if not n.drained and not (ours_reboot and act.do == "qualify"):
        why = breaker(n, list(everyone), drain_fraction)
        if why:
            return replace(act, do="hold", why=f"breaker: not draining for {act.do}: {why}")
        return replace(act, do="drain", why=f"{act.do} due; draining first ({act.why})")
    busy = _busy(n)
    if busy:
        return replace(act, do="wait", why=f"{act.do} due; {busy}")
    why = repair_breaker(n, everyone, in_repair, fraction)
    if why:
        return replace(act, do="hold", why=f"breaker: {why}")
    return act


def changed_since(act: Action, n: NodeInfo) -> str:
    """'' when the planned step `act` may still be taken on `n` as Slurm reports it now; else what
    changed in the meantime (the run acts node after node, and a qualification takes minutes):
    someone else's drain or state, a MAINT reservation, a node resumed under us, or a job on a
    node a reset, reboot or qualification needs idle. The step is then left for the next run."""
    if not act.acts or act.do == "close":  # closing touches no node
        return ""
    if act.state == "rebooting" and n.reason.startswith("slurmadm: repair: "):
        n = replace(n, reason=without_reboot_notes(n.reason))  # our reason, as Slurm rebooted it (as in plan)
    if n.drained and not is_ours(n):
        return f"drained by {n.reason_user or 'someone else'} ({n.reason!r})"
    if "MAINTENANCE" in n.flags:
        return "in a MAINT reservation"
    ours_reboot = _ours_reboot(act, n)
    foreign = foreign_state(n)
    if foreign and not (ours_reboot and act.do in ("power-cycle", "rma", "qualify")):
        return f"{foreign}"
    if act.do in ("reset", "reboot", "qualify"):
        if not n.drained and not (ours_reboot and act.do == "qualify"):
            return f"no longer drained ({n.state_text})"
        busy = _busy(n)
        if busy:
            return busy
    return ""


# ---------------------------------------------------------------------- the world, behind protocols


class Incidents(Protocol):
    """What the executor asks of the incident store (repair-core's incidents/ladder)."""

    def ingest(self) -> Any: ...

    def mark_run(self) -> None: ...

    def current(self) -> list: ...

    def next_step(self, incident, now: float) -> Any: ...

    def get(self, incident_id: str) -> Any: ...

    def advance(self, incident_id: str, state: str, step: str, *, evidence: dict | None, why: str,
                outcome: str = "", rung: int | None = None) -> None: ...

    def record_qualification(self, incident_id: str, node: str, q) -> None: ...

    def failed_qualifications(self, node: str) -> int: ...


class CoreIncidents:
    """The store's incidents through slurmadm.repair.incidents, .ladder and .views."""

    def __init__(self, store, site):
        self.store = store
        self.site = site

    def ingest(self):
        from . import views

        return views.ingest(self.site, self.store)

    def mark_run(self) -> None:
        from . import incidents

        incidents.mark_ladder_run(self.store)

    def current(self) -> list:
        from . import incidents
        from .model import ACTIVE, HELD

        return incidents.list_incidents(self.store, states=list(ACTIVE) + list(HELD))

    def get(self, incident_id: str):
        from . import incidents

        return incidents.get(self.store, incident_id)

    def next_step(self, incident, now: float):
        from . import incidents, ladder, views

        return ladder.next_step(incident, incidents.part_history(self.store, incident), views.settings_of(self.site),
                                now)

    def advance(self, incident_id: str, state: str, step: str, *, evidence: dict | None, why: str,
                outcome: str = "", rung: int | None = None) -> None:
        from . import incidents

        incidents.advance(self.store, incident_id, state, step, outcome=outcome, evidence=evidence, why=why, rung=rung)

    def record_qualification(self, incident_id: str, node: str, q) -> None:
        from . import incidents

        status = "passed" if q.passed else "error" if q.refused else "failed"
        incidents.record_qualification(self.store, incident_id, node, job_id=q.job_id, status=status,
                                       evidence=[q.to_json()])

    def failed_qualifications(self, node: str) -> int:
        from . import incidents

        return incidents.failed_qualifications(self.store, node=node)


class SlurmOps(Protocol):
    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]: ...

    def drain(self, nodes: list[str], reason: str) -> None: ...

    def resume(self, nodes: list[str]) -> None: ...

    def set_reason(self, nodes: list[str], reason: str) -> None: ...


def slurm_reboot(site) -> Callable[[str, str], None]:
    """`scontrol reboot ASAP nextstate=DOWN reason=... NODE` (`fleet rollout`'s reboot_argv: with
    ReturnToService=2 a plain reboot, so the node comes back still drained with our reason)."""
    def reboot(node: str, why: str) -> None:
        from ..fleet.rollout import reboot_argv
        from ..proc import run

        run(reboot_argv(node, why, site.slurm.return_to_service), timeout=30)

    return reboot


def slurm_boot_time(node: str) -> str:
    """Slurm's BootTime of the node ('' when it has none)."""
    import re

    from ..proc import run

    m = re.search(r"\bBootTime=(\S+)", run(["scontrol", "show", "node", "-o", node], timeout=30).stdout)
    return m.group(1) if m else ""


@dataclass
class Report:
    actions: list[Action]
    done: list[dict[str, Any]] = field(default_factory=list)  # what was carried out, one per step
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        return 1 if any(d.get("ok") is False for d in self.done) else 0

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "plan": [a.to_json() for a in self.actions], "done": self.done,
                "exit_code": self.exit_code}


class Executor:
    def __init__(self, site, backend: SlurmOps, store, *, incidents: Incidents | None = None,
                 remote_factory: Callable[[], Any] | None = None, qualifier=None,
                 reboot: Callable[[str, str], None] | None = None,
                 boot_time: Callable[[str], str] | None = slurm_boot_time,
                 power_cycle: Callable[[str], str] | None = None,
                 progress: Callable[[str], None] = lambda m: None, clock: Callable[[], float] = time.time,
                 reason: str = "slurmadm repair run"):
        self.site = site
        self.backend = backend
        self.store = store
        self.incidents = incidents or CoreIncidents(store, site)
        self.remote_factory = remote_factory
        self.qualifier = qualifier
        self.reboot = reboot or slurm_reboot(site)
        self.boot_time = boot_time
        self.power_cycle = power_cycle
        self.progress = progress
        self.clock = clock
        self.why = reason  # the run's --reason, in every audit event of its steps
        rep = getattr(site, "repair", None)
        self.fraction = float(getattr(rep, "breaker_fraction", 0.1))
        self.lemon_after = int(getattr(rep, "lemon_failed_qualifications", 2))
        self.reboot_timeout_s = float(getattr(rep, "reboot_timeout_s", None) or REBOOT_TIMEOUT_S)

    # ------------------------------------------------------------------ facts
    def facts(self, nodes: Iterable[str], now: float) -> Facts:
        f = Facts()
        for n in nodes:
            for key, target in ((REBOOT_AT, f.reboot_at), (CYCLED_AT, f.cycled_at)):
                raw = self.store.get_node_state(n, key)
                if raw:
                    try:
                        target[n] = float(raw)
                    except ValueError:
                        pass
            failed = self.incidents.failed_qualifications(n)
            if failed:
                f.failed_quals[n] = failed
            before = self.store.get_node_state(n, BOOT_BEFORE)
            if n in f.reboot_at and before and self.boot_time is not None and self.boot_time(n) == before:
                f.not_rebooted.add(n)
        f.burnin_passed = burnin_passes(self.store, nodes)
        return f

    def plan(self, now: float | None = None) -> list[Action]:
        now = self.clock() if now is None else now
        # a leaf incident (repair/leaf.py) names a switch for a person: no step acts on a node for it
        incs = [i for i in self.incidents.current() if i.part_kind != "leaf"]
        nodes = self.backend.nodes()  # Slurm unreachable: UnreachableError, nothing changed
        return plan(incs, nodes, next_step=lambda i: self.incidents.next_step(i, now), now=now,
                    fraction=self.fraction, drain_fraction=self.site.health.drain_cap_fraction,
                    facts=self.facts({i.node for i in incs}, now), lemon_after=self.lemon_after,
                    reboot_timeout_s=self.reboot_timeout_s)

    # ------------------------------------------------------------------ one run
    def run(self, *, dry_run: bool = False) -> Report:
        if dry_run:  # ingest is bookkeeping (as `repair status` does it); Slurm, SSH, nodes untouched
            self.backend.nodes()  # Slurm must answer (exit 3 otherwise)
            self.incidents.ingest()
            self._leaves(dry_run=True)
            return Report(self.plan(), dry_run=True)
        with self.begun(ladder=True):
            self._leaves(dry_run=False)
            actions = self.plan()
            self._probe([a for a in actions if a.do == "reset"])
            report = Report(actions)
            for a in actions:
                if not a.acts:
                    continue
                # re-read first: an earlier node's step took minutes, and Slurm is as it is now
                changed = changed_since(a, self._node(a.node))
                if changed:
                    detail = f"not done: {changed} since the plan; left for the next run"
                    self.progress(f"{a.node}: {a.do}: {detail}")
                    report.done.append({"node": a.node, "step": a.do, "incident": a.incident, "ok": None,
                                        "detail": detail})
                    continue
                self.progress(f"{a.node}: {a.do}: {a.why}")
                report.done.append(self._act(a))
            return report

    def begun(self, *, ladder: bool = False):
        """What every acting run (`repair run`, `repair qualify`) starts with, under the one lock
        beside the head's store: Slurm must answer (exit 3 before the store changes), an
        interrupted qualification is undone, new signals are ingested. `ladder`: this is the
        ladder's own run (`repair run`), recorded as such: while it runs, burn-in leaves it the
        nodes with open incidents. An admin's `repair qualify` is not the ladder running: on a
        site without repair's timer, one by hand must not keep burn-in from re-qualifying."""
        from contextlib import contextmanager
        from pathlib import Path

        from ..files import exclusive_lock

        @contextmanager
        def cm():
            lock = Path(f"{self.site.store.local_path()}.repair.lock")
            with exclusive_lock(lock, lambda holder: f"another `repair run` or `repair qualify` holds {lock} "
                                                     f"({holder})"):
                self.backend.nodes()
                if self.qualifier is not None:
                    for node in self.qualifier.recover(self.site.node_names):
                        self.progress(f"{node}: an interrupted qualification undone")
                self.incidents.ingest()
                if ladder:
                    self.incidents.mark_run()  # the ladder runs: burn-in leaves it the nodes with open incidents
                yield

        return cm()

    def _leaves(self, *, dry_run: bool) -> None:
        """InfiniBand port faults on k+ nodes under one leaf become one incident on the leaf
        (repair/leaf.py): observed with the drains, before any step."""
        from . import leaf

        for s in leaf.scan(self.store, self.site, dry_run=dry_run):
            self.progress(s.line + (" (dry run)" if dry_run else ""))

    def _probe(self, resets: list[Action]) -> None:
        if not resets:
            return
        from . import reset

        with self._remote() as remote:
            reset.probe(remote, [a.node for a in resets])

    def _remote(self):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            if self.remote_factory is None:
                raise UnreachableError("no SSH to the nodes configured ([fleet]) for a GPU reset")
            remote = self.remote_factory()
            try:
                yield remote
            finally:
                remote.close()

        return cm()

    def _audit(self, a: Action, what: str, **detail: Any) -> None:
        self.store.audit(f"repair.act.{a.do}", a.node, what, incident=a.incident, cls=a.cls, gpus=list(a.slots),
                         why=a.why, by=self.why, **detail)

    def _act(self, a: Action) -> dict[str, Any]:
        fn = getattr(self, "_do_" + a.do.replace("-", "_"))
        return {"node": a.node, "step": a.do, "incident": a.incident, **fn(a)}

    def _node(self, name: str) -> NodeInfo:
        return self.backend.nodes([name])[0]

    def _take(self, a: Action) -> None:
        """Make the drain repair's (so health's clean runs do not resume it before the gate)."""
        if a.reason and self._node(a.node).reason != a.reason:
            self.backend.set_reason([a.node], a.reason)

    # ---- steps
    def _do_close(self, a: Action) -> dict[str, Any]:
        began, sweep = burnin_passes(self.store, [a.node]).get(a.node) or (0.0, "")
        for incident in a.closes:
            self.incidents.advance(incident, "closed", "resume", evidence={"burnin": {"sweep": sweep, "began": began}},
                                   why=a.why, outcome="ok")
        self._audit(a, f"closed {', '.join(a.closes)}: {a.why}", closes=list(a.closes))
        return {"ok": True, "detail": f"closed {len(a.closes)} incident(s): {a.why}"}

    def _do_drain(self, a: Action) -> dict[str, Any]:
        r = reason(a.why.split(" ", 1)[0], f"{a.cls}: waiting for jobs to end")
        self.backend.drain([a.node], r)
        self._audit(a, r)
        return {"ok": True, "detail": r}

    def _do_reset(self, a: Action) -> dict[str, Any]:
        from . import reset

        self._take(a)
        self.incidents.advance(a.incident, "resetting", "reset", evidence=None, why=a.why, outcome="running",
                               rung=a.rung)
        profile = self.site.node_profile(a.node).gpus
        rule = reset.rule_for(profile.model, profile.nvswitches)
        slots = a.slots or tuple(range(profile.count))
        self._audit(a, f"GPU reset: nvidia-smi --gpu-reset -i {','.join(map(str, slots))} ({rule.name})",
                    rule=rule.name)
        with self._remote() as remote:
            res = reset.reset_gpus(remote, a.node, slots, rule)
        if not res.ok:
            self.store.audit("repair.reset.failed", a.node, res.detail, incident=a.incident, result=res.to_json())
            self.incidents.advance(a.incident, "open", "reset", evidence={"reset": res.to_json()},
                                   why=f"reset failed: {res.detail}", outcome="failed")
            # the fallback is the ladder's next rung (a reboot for RESET_GPU), taken at once
            step = self.incidents.next_step(self.incidents.get(a.incident), self.clock())
            action = getattr(step, "action", "reboot")
            if action not in ("reboot", "rma", "lemon"):
                action = "reboot"
            fallback = replace(a, do=action, why=f"reset failed ({res.detail})", rung=getattr(step, "rung", None),
                               reason=getattr(step, "reason", "") or reason(action, f"{a.cls}: reset failed: {res.detail}"))
            out = self._act(fallback)
            return {"ok": out["ok"], "detail": f"reset failed ({res.detail}); {out['detail']}", "reset": res.to_json()}
        self._acknowledge_reset(a.node, reboot=False)
        self.incidents.advance(a.incident, "qualifying", "reset", evidence={"reset": res.to_json()}, why=res.detail,
                               outcome="ok")
        q = self._do_qualify(replace(a, do="qualify", state="qualifying",
                                     reason=reason("qualify", f"{a.cls}: after GPU reset")))
        return {"ok": q["ok"], "detail": f"{res.detail}; {q['detail']}", "reset": res.to_json(),
                "qualification": q.get("qualification")}

    def _acknowledge_reset(self, node: str, when: float | None = None, *, reboot: bool = True) -> None:
        """Our reboot clears what the XID check holds up to then, a GPU reset the reset-class
        lines (a reboot-class XID, NVIDIA's RESTART_BM such as 79, still wants the reboot): the
        lines logged before it are not held against the qualification. Kept in the head's store
        (`qualify.XID_ACK_KEY` / `XID_RESET_ACK_KEY`, never moving back) and carried by the
        qualification job, which writes it where the node's health reads it (its own store)."""
        from .qualify import XID_ACK_KEY, XID_RESET_ACK_KEY

        key = XID_ACK_KEY if reboot else XID_RESET_ACK_KEY
        ts = self.clock() if when is None else when
        try:
            before = float(self.store.get_node_state(node, key) or 0)
        except ValueError:
            before = 0.0
        self.store.set_node_state(node, key, f"{max(ts, before):.3f}")

    def _do_reboot(self, a: Action) -> dict[str, Any]:
        from ..fleet.rollout import reboot_argv

        self._audit(a, " ".join(reboot_argv(a.node, repr(a.reason), self.site.slurm.return_to_service)))
        self.incidents.advance(a.incident, "rebooting", "reboot", evidence=None, why=a.why, outcome="running",
                               rung=a.rung)
        before = self.boot_time(a.node) if self.boot_time is not None else ""
        self.store.set_node_states(a.node, {REBOOT_AT: f"{self.clock():.3f}", BOOT_BEFORE: before})
        self.store.delete_node_state(a.node, CYCLED_AT)
        self.reboot(a.node, a.reason)
        return {"ok": True, "detail": "reboot requested through Slurm"}

    def _do_power_cycle(self, a: Action) -> dict[str, Any]:
        window = self.store.events(since=self.clock() - 3600, limit=100000)
        cycles = sum(1 for e in window if e.action in ("bmc.recover.cycle", "repair.act.power-cycle"))
        cap = self.site.bmc.recover.max_cycles_per_hour
        if cycles >= cap:
            self.store.audit("repair.alert", a.node, f"power-cycle due but {cycles} cycles in the last hour "
                             f"(bmc.recover.max_cycles_per_hour {cap})", incident=a.incident)
            return {"ok": None, "detail": "held: BMC power-cycle rate limit"}
        if self.power_cycle is None:
            return {"ok": False, "detail": "no BMC configured for a power cycle"}
        self._audit(a, f"BMC power cycle: {a.why}")
        was = self.power_cycle(a.node)
        self.store.set_node_state(a.node, CYCLED_AT, f"{self.clock():.3f}")
        self.incidents.advance(a.incident, "rebooting", "reboot", evidence={"power_cycle": {"was": was}},
                               why=f"power-cycled through the BMC: {a.why}", outcome="running")
        return {"ok": True, "detail": f"power-cycled through the BMC (was {was})"}

    def _do_qualify(self, a: Action) -> dict[str, Any]:
        if self.qualifier is None:
            return {"ok": False, "detail": "no qualifier"}
        n = self._node(a.node)
        if not n.drained:  # back from our reboot (DOWN, not drained): hold it drained first
            self.backend.drain([a.node], a.reason)
        elif n.reason != a.reason:
            self.backend.set_reason([a.node], a.reason)
        if a.state == "rebooting":
            # a reboot clears what the XID check holds (the dev cluster's nodes share the host's boot time)
            asked = self.store.get_node_state(a.node, REBOOT_AT)
            self._acknowledge_reset(a.node, float(asked) if asked else None)
            self.incidents.advance(a.incident, "qualifying", "reboot", evidence=None, why="back from the reboot",
                                   outcome="ok")
        self.incidents.advance(a.incident, "qualifying", "qualify", evidence=None, why=a.why, outcome="running",
                               rung=a.rung)
        watch = link_watch_s(self.site, [a.cls])
        self._audit(a, qualification_text(watch))
        q = self.qualifier.qualify(self._node(a.node), self.site.health.on_error, link_watch_s=watch)
        self.incidents.record_qualification(a.incident, a.node, q)
        for key in (REBOOT_AT, CYCLED_AT, BOOT_BEFORE):
            self.store.delete_node_state(a.node, key)
        if q.refused:
            # Slurm would not run the job (the burn-in account, QOS or partition the site lacks):
            # the node was never tested. No failed qualification, no step up the ladder, never a
            # lemon for it: the node stays drained, qualifying, and the next run tries again.
            self.backend.set_reason([a.node], reason("qualify", f"{a.cls}: could not run: {q.detail}"))
            self.incidents.advance(a.incident, "qualifying", "qualify", evidence={"qualification": q.to_json()},
                                   why=f"qualification could not run: {q.detail}", outcome="error")
            self.store.audit("repair.qualify.refused", a.node, q.detail, incident=a.incident)
            return {"ok": False, "detail": f"qualification could not run: {q.detail}", "qualification": q.to_json()}
        if q.passed:
            n = self._node(a.node)
            if is_ours(n) and reason_check_id(n.reason) == CHECK_ID:
                self.backend.resume([a.node])
            self.incidents.advance(a.incident, "closed", "resume", evidence={"qualification": q.to_json()},
                                   why=f"qualification passed; resumed ({q.detail})", outcome="ok")
            self._close_covered(a, q)
            return {"ok": True, "detail": f"qualified and resumed ({q.detail})", "qualification": q.to_json()}
        failed = self.incidents.failed_qualifications(a.node)
        if failed >= self.lemon_after:
            from . import blame

            part = f"; {blame.describe(q.blamed)}" if q.blamed else ""
            why = f"{failed} failed qualifications (last: {q.detail}{part})"
            self.backend.set_reason([a.node], reason("lemon", f"{a.cls}: {why}"))
            self.incidents.advance(a.incident, "lemon", "lemon", evidence={"qualification": q.to_json()}, why=why,
                                   outcome="failed")
            return {"ok": False, "detail": f"qualification failed: {q.detail}; a lemon now",
                    "qualification": q.to_json()}
        self.backend.set_reason([a.node], reason("qualify", f"{a.cls}: failed: {q.detail}"))
        self.incidents.advance(a.incident, "open", "qualify", evidence={"qualification": q.to_json()},
                               why=f"qualification failed: {q.detail}", outcome="failed")
        return {"ok": False, "detail": f"qualification failed: {q.detail}", "qualification": q.to_json()}

    def _close_covered(self, a: Action, q) -> None:
        """The node's other incidents still on the ladder that were opened before this
        qualification started are closed with it: one fault often opens two (Xid 95 with NVML's
        reset action: RESET_GPU and ECC on the same GPU; an HCA down: HCA and its flaps), and the
        passed qualification (stress, all-reduce, known-answer test and the whole health suite on
        the node) has tested what they would have. Left open, the ladder would drain the node
        again, jobs and all, for a fault already repaired (found by the fleet replay, issue 37).
        RMA and lemon incidents stay: a person holds those."""
        from .model import ACTIVE

        started = time.time() - q.duration_s
        for other in self.incidents.current():
            if (other.node == a.node and other.id != a.incident and other.state in ACTIVE
                    and getattr(other, "opened_ts", 0.0) <= started):
                self.incidents.advance(other.id, "closed", "resume",
                                       evidence={"qualification": q.to_json(), "with": a.incident},
                                       why=f"closed with {a.incident}: the node's qualification passed ({q.detail})",
                                       outcome="ok")

    def _held(self, a: Action, state: str) -> dict[str, Any]:
        n = self._node(a.node)
        if n.drained:
            self.backend.set_reason([a.node], a.reason)
        else:
            self.backend.drain([a.node], a.reason)
        self._audit(a, a.reason)
        self.incidents.advance(a.incident, state, state, evidence=None, why=a.why, rung=a.rung)
        return {"ok": True, "detail": a.reason}

    def _do_rma(self, a: Action) -> dict[str, Any]:
        return self._held(a, "rma")

    def _do_lemon(self, a: Action) -> dict[str, Any]:
        return self._held(a, "lemon")


def bmc_power_cycle(site) -> Callable[[str], str]:
    """`bmc recover`'s power cycle (bmc/fanout.Fleet): the power state before, then cycle (or on)."""
    def cycle(node: str) -> str:
        from ..bmc.fanout import Fleet

        fleet = Fleet(site)
        rows = fleet.run([node], lambda conn: (conn.bmc.power_state(), conn.bmc.power("cycle")))
        if not rows[0].ok:
            raise UnreachableError(f"{node}: BMC: {rows[0].error}")
        return str(rows[0].value[0])

    return cycle
