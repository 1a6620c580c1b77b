"""`slurmadm repair qualify NODE...`: the qualification gate on an admin's word (issue 45).

The ladder qualifies a node after its reset or reboot (`run.Executor._do_qualify`); an admin
also asks for it by hand: after swapping a GPU, reseating a cable, or before trusting a node that
came back on its own. The same job runs (qualify.py: stress, single-node all-reduce, known-answer
test, the whole health suite), in the node's own short reservation. What happens around it
depends on who holds the node:

- **slurmadm's incident on it** (not an RMA or a lemon): exactly the ladder's step, so the result
  goes into the incident, a pass closes it and resumes the node, a fail moves the incident on
  and two failures make a lemon.
- **in service, idle**: drained first under the health breaker (`[health] drain_cap_fraction`),
  resumed on a pass, kept drained as `slurmadm: repair: qualify: failed: ...` on a fail.
- **drained by slurmadm without an incident**: repair's reason while it qualifies; resumed on a
  pass, kept drained on a fail.
- **drained by someone else**: their drain and reason stay whatever the result; the result is
  theirs to act on (and goes into the node's incident, if it has one).

Bad input changes nothing: a node the site or Slurm does not know, a node running jobs, one in a
state someone else handles (DOWN, NOT_RESPONDING, ...), in a MAINT reservation, or held as an RMA
case or a lemon (`repair rma qualify`, `repair clear`) is one line and exit 2, with nothing
submitted for any node named. Slurm unreachable: exit 3. Every job is audited; an interrupted
run is undone by the next `repair run` or `repair qualify` (qualify.Qualifier.recover).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..slurm.model import NodeInfo
from ..slurm.ownership import foreign_state, is_ours, reason_check_id
from . import incidents, ladder
from .run import CHECK_ID, ORDER, Action, Report, _busy, _slots, link_watch_s, qualification_text, reason

ASKED = "asked by an admin"
HELD_STATES = {"rma": "an RMA case holds it: `slurmadm repair rma qualify` after the new part is in",
               "lemon": "a lemon: `slurmadm repair clear` first, if it is to be trusted again"}


def known(names: Sequence[str], site_nodes: Sequence[str]) -> None:
    """UsageError naming the first of `names` the site file lacks (before Slurm is asked anything)."""
    have = set(site_nodes)
    unknown = [n for n in dict.fromkeys(names) if n not in have]
    if unknown:
        raise UsageError(f"repair qualify: {unknown[0]} is not a node of the site file")


def plan(names: Sequence[str], site_nodes: Sequence[str], nodes: Sequence[NodeInfo], incidents: Sequence[Any], *,
         drain_fraction: float) -> list[Action]:
    """One `qualify` (or `hold`: the health breaker will not let an in-service node drain) per
    node named; UsageError naming the first node that cannot be qualified (nothing done)."""
    from ..health.actions import breaker

    known(names, site_nodes)
    by_name = {n.name: n for n in nodes}
    out: list[Action] = []
    for name in dict.fromkeys(names):
        n = by_name.get(name)
        if n is None:
            raise UsageError(f"repair qualify: Slurm does not report {name}")
        busy = _busy(n)
        if busy:
            raise UsageError(f"repair qualify: {name}: {busy}; qualify it when they end (nothing submitted)")
        if "MAINTENANCE" in n.flags:
            raise UsageError(f"repair qualify: {name} is in a MAINT reservation; left to whoever owns it")
        foreign = foreign_state(n)
        if foreign:
            raise UsageError(f"repair qualify: {name} is {foreign}; a job cannot run there (nothing submitted)")
        mine = sorted((i for i in incidents if i.node == name and i.state != "closed"
                       and getattr(i, "part_kind", "gpu") != "leaf"),
                      key=lambda i: (ORDER.get(i.state, 9), str(i.id)))
        inc = mine[0] if mine else None
        if inc is not None and inc.state in HELD_STATES:
            raise UsageError(f"repair qualify: {name}: incident {inc.id} is {HELD_STATES[inc.state]}")
        where = inc.cls if inc is not None else "by hand"
        if inc is not None and _slots(inc):
            where = f"{inc.cls} GPU{','.join(map(str, _slots(inc)))}"
        base = dict(node=name, incident=str(inc.id) if inc else "", cls=inc.cls if inc else "",
                    slots=_slots(inc) if inc else (), state=inc.state if inc else "",
                    reason=reason("qualify", f"{where}: {ASKED}"))
        if n.drained and not is_ours(n):
            who = n.reason_user or "someone else"
            out.append(Action(do="qualify", why=f"{ASKED}; drained by {who} ({n.reason!r}): their drain stays "
                              "whatever the result", **base))
        elif not n.drained:
            why = breaker(n, list(nodes), drain_fraction)
            if why:
                out.append(Action(do="hold", why=f"breaker: not draining it to qualify: {why}", **base))
            else:
                out.append(Action(do="qualify", why=f"{ASKED}; in service: drained first, resumed on a pass", **base))
        else:
            then = "the incident's step: closed and resumed on a pass" if inc else "resumed on a pass"
            out.append(Action(do="qualify", why=f"{ASKED}; drained by slurmadm: {then}", **base))
    return out


def run(ex, names: Sequence[str], *, dry_run: bool = False) -> Report:
    """Qualify `names` through the executor `ex` (run.Executor: its Slurm, store, incidents and
    qualifier), under the same lock as `repair run`."""
    known(names, ex.site.node_names)

    def planned() -> list[Action]:
        nodes = ex.backend.nodes()  # Slurm unreachable: UnreachableError (exit 3), nothing changed
        incs = ex.incidents.current()
        return plan(names, ex.site.node_names, nodes, incs, drain_fraction=ex.site.health.drain_cap_fraction)

    if dry_run:
        ex.incidents.ingest()  # bookkeeping, as `repair status` does it
        return Report(planned(), dry_run=True)
    if ex.qualifier is None:
        raise UsageError("repair qualify: no qualifier")
    with ex.begun():
        actions = planned()  # every node checked before the first job is submitted
        report = Report(actions)
        for a in actions:
            if a.do == "hold":
                report.done.append({"node": a.node, "step": "hold", "incident": a.incident, "ok": False,
                                    "detail": a.why})
                continue
            ex.progress(f"{a.node}: qualify: {a.why}")
            report.done.append({"node": a.node, "step": "qualify", "incident": a.incident, **_qualify(ex, a)})
        return report


def _qualify(ex, a: Action) -> dict[str, Any]:
    n = ex._node(a.node)  # re-read: an earlier node's qualification took minutes; act on Slurm as it is now
    changed = _busy(n) or foreign_state(n)
    if changed:  # a job started on it meanwhile (it was in service), or someone else's state
        return {"ok": False, "detail": f"not qualified: {changed} since the plan; nothing done"}
    foreign = n.drained and not is_ours(n)
    if a.incident and not foreign:
        return ex._do_qualify(a)  # the ladder's own step: incident, resume, lemon
    drained_here = not n.drained
    if drained_here:
        ex.backend.drain([a.node], a.reason)
    elif not foreign and n.reason != a.reason:
        ex.backend.set_reason([a.node], a.reason)
    # a node an admin cleared (the part replaced) is watched as its cleared incidents ask
    watch = link_watch_s(ex.site, ladder.last_cleared(a.node, incidents.list_incidents(ex.store, node=a.node)))
    ex._audit(a, qualification_text(watch))
    q = ex.qualifier.qualify(ex._node(a.node), ex.site.health.on_error, link_watch_s=watch)
    if a.incident:  # someone else's drain over our incident: the result is evidence for it
        ex.incidents.record_qualification(a.incident, a.node, q)
    ex.store.audit("repair.qualify.result", a.node, f"{q.status}: {q.detail}", incident=a.incident,
                   qualification=q.to_json(), by=ex.why)
    out: dict[str, Any] = {"qualification": q.to_json()}
    if foreign:
        verdict = "passed" if q.passed else f"could not run: {q.detail}" if q.refused else f"failed: {q.detail}"
        return {**out, "ok": q.passed, "detail": f"qualification {verdict}; drained by "
                f"{n.reason_user or 'someone else'}: their drain stays"}
    now = ex._node(a.node)
    ours_now = is_ours(now) and reason_check_id(now.reason) == CHECK_ID
    if q.refused:
        # never tested: a node taken out of service for it goes back; one drained before stays
        if drained_here and ours_now:
            ex.backend.resume([a.node])
        return {**out, "ok": False, "detail": f"qualification could not run: {q.detail}"
                + ("; resumed as it was" if drained_here and ours_now else "")}
    if q.passed:
        if ours_now:
            ex.backend.resume([a.node])
        return {**out, "ok": True, "detail": f"qualified and resumed ({q.detail})" if ours_now
                else f"qualified ({q.detail}); its drain changed meanwhile ({now.reason!r}): left as it is"}
    if ours_now:
        ex.backend.set_reason([a.node], reason("qualify", f"failed: {q.detail}"))
    return {**out, "ok": False, "detail": f"qualification failed: {q.detail}; kept drained"}
