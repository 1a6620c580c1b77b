"""What `fleet drift --drain` does in Slurm: drain drifted nodes (slurmadm's own reason, under
the health breaker, never a node someone else holds), resume nodes drained for drift that no
longer drift. Pure planning (`plan_drains`) + carrying out (`apply`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..health.actions import breaker, drain_lock
from ..slurm.model import NodeInfo
from ..slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id

CHECK_ID = "drift"
CONTEXT = "fleet"


@dataclass
class Action:
    node: str
    action: str  # drain | resume | alert | none
    reason: str

    def as_dict(self) -> dict:
        return {"node": self.node, "action": self.action, "reason": self.reason}


def drift_reason(diffs: list) -> str:
    first = diffs[0]
    more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
    return format_reason(CHECK_ID, f"{first.fact} {_short(first.have)} != {_short(first.want)}{more}", CONTEXT)


def _short(v: str) -> str:
    return v[:12] if len(v) == 64 else v


def plan_drains(drifted: dict[str, list], clean: list[str], nodes: list[NodeInfo], fraction: float) -> list[Action]:
    """drifted: node -> its Differences; clean: nodes that answered and do not drift."""
    by_name = {n.name: n for n in nodes}
    everyone = list(nodes)
    out: list[Action] = []
    for name in sorted(drifted):
        node = by_name.get(name)
        reason = drift_reason(drifted[name])
        if node is None:
            out.append(Action(name, "alert", f"not in Slurm; would drain: {reason}"))
            continue
        verdict = may_drain(node)
        if not verdict.act:
            out.append(Action(name, "none", verdict.why))
            continue
        why = breaker(node, everyone, fraction)
        if why:
            out.append(Action(name, "alert", f"breaker: not draining ({reason}): {why}"))
            continue
        out.append(Action(name, "drain", reason))
        # count this drain for the next node's breaker decision
        everyone = [replace(n, flags=n.flags | {"DRAIN"}, reason=reason)
                    if n.name == name else n for n in everyone]
    for name in sorted(clean):
        node = by_name.get(name)
        if node is not None and is_ours(node) and reason_check_id(node.reason) == CHECK_ID and may_resume(node).act:
            out.append(Action(name, "resume", f"no drift any more (was: {node.reason})"))
    return out


def apply(actions: list[Action], backend, store, *, why: str) -> None:
    with drain_lock(str(store.path), 10.0):
        for a in actions:
            if a.action == "drain":
                backend.drain([a.node], a.reason)
                store.audit("node.drain", a.node, why, slurm_reason=a.reason, by="fleet drift")
            elif a.action == "resume":
                backend.resume([a.node])
                store.audit("node.resume", a.node, why, slurm_reason=a.reason, by="fleet drift")
