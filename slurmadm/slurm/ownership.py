"""Drain ownership: slurmadm only undoes what it did.

Drain reasons slurmadm sets start with `slurmadm:` followed by the check id
(`slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]`). A node drained for any other reason,
or in a state someone else is handling (DOWN, not responding, FAIL, reboot, power, a maintenance
reservation), is left alone: never drained, resumed or given a new reason. A node in an ordinary
(non-MAINT) reservation is not such a state: its faults are enforced like anyone's.

A reason is slurmadm's only while it has exactly the shape slurmadm writes; an admin who appends
or removes text ("... [prolog] -- admin: RMA, do not resume") has made the drain theirs. Callers
that remember the exact reason they set (the health store) also treat any other change as the
admin's (`decide(our_reason=...)`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import FOREIGN_FLAGS, FOREIGN_STATES, NodeInfo

OWNER_PREFIX = "slurmadm:"
MAX_REASON = 240
# exactly what format_reason writes: `slurmadm: <check-id>: <detail> [<context>]`
REASON_RE = re.compile(r"slurmadm: [A-Za-z0-9][A-Za-z0-9_.-]*: .* \[[a-z][a-z-]*\]")


# Check ids whose drains one capability owns outright: only it lifts them (health resumes only
# drains whose check id is a health check; burn-in drains, `burnin-*`, are lifted by a passing
# burn-in). `repair` (slurmadm/repair/, issue 34): `slurmadm: repair: <step>: <detail> [repair]`,
# lemons `slurmadm: repair: lemon: ...`, RMA candidates `slurmadm: repair: rma <ticket>: ...`.
REPAIR_CHECK_ID = "repair"
OWNED_CHECK_IDS = {REPAIR_CHECK_ID: "slurmadm repair"}


def owner(reason: str) -> str | None:
    """The capability that owns a slurmadm drain reason outright (`slurmadm repair`), else None."""
    return OWNED_CHECK_IDS.get(reason_check_id(reason) or "")


def format_reason(check_id: str, detail: str, context: str) -> str:
    detail = " ".join(detail.split())
    head = f"{OWNER_PREFIX} {check_id}: "
    tail = f" [{context}]"
    room = MAX_REASON - len(head) - len(tail)
    if len(detail) > room:
        detail = detail[: max(room - 3, 0)] + "..."
    return head + detail + tail


def is_ours(node: NodeInfo) -> bool:
    return node.drained and REASON_RE.fullmatch(node.reason) is not None


def foreign_state(node: NodeInfo) -> str:
    """'' unless the node is in a state someone else handles; else that state (`DOWN+NOT_RESPONDING`)."""
    found = sorted(node.flags & FOREIGN_FLAGS)
    if node.state in FOREIGN_STATES:
        found.insert(0, node.state)
    return "+".join(found)


def reason_check_id(reason: str) -> str | None:
    if not reason.startswith(OWNER_PREFIX):
        return None
    rest = reason[len(OWNER_PREFIX):].strip()
    return rest.split(":", 1)[0].strip() or None


def reason_detail(reason: str) -> str:
    """The detail of a slurmadm reason: `slurmadm: xid: GPU2 XID 79 [prolog]` -> `GPU2 XID 79`."""
    if not reason.startswith(OWNER_PREFIX):
        return reason
    rest = reason[len(OWNER_PREFIX):].strip()
    detail = rest.split(":", 1)[1].strip() if ":" in rest else rest
    if detail.endswith("]") and " [" in detail:
        detail = detail[: detail.rindex(" [")]
    return detail


@dataclass(frozen=True)
class Verdict:
    act: bool
    why: str


def may_drain(node: NodeInfo) -> Verdict:
    """May slurmadm drain this node now?"""
    foreign = foreign_state(node)
    if foreign:
        return Verdict(False, f"node is {foreign}; left to whoever owns that")
    if node.drained and not is_ours(node):
        return Verdict(False, f"node already drained by {node.reason_user or 'someone'}: {node.reason!r}")
    if is_ours(node):
        return Verdict(False, "already drained by slurmadm")
    return Verdict(True, "")


def may_resume(node: NodeInfo) -> Verdict:
    """May slurmadm resume this node now? Only its own drains, never a foreign state."""
    if not node.drained:
        return Verdict(False, "node is not drained")
    if not is_ours(node):
        return Verdict(False, f"drained by {node.reason_user or 'someone else'}: {node.reason!r}")
    foreign = foreign_state(node)
    if foreign:
        return Verdict(False, f"node is {foreign}")
    return Verdict(True, "")
