"""Drain ownership: slurmadm only undoes what it did.

Drain reasons slurmadm sets start with `slurmadm:` followed by the check id
(`slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]`). A node drained for any other reason,
or in a state someone else is handling (reboot, power, maintenance, reservation), is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import FOREIGN_FLAGS, NodeInfo

OWNER_PREFIX = "slurmadm:"
MAX_REASON = 240


def format_reason(check_id: str, detail: str, context: str) -> str:
    detail = " ".join(detail.split())
    head = f"{OWNER_PREFIX} {check_id}: "
    tail = f" [{context}]"
    room = MAX_REASON - len(head) - len(tail)
    if len(detail) > room:
        detail = detail[: max(room - 3, 0)] + "..."
    return head + detail + tail


def is_ours(node: NodeInfo) -> bool:
    return node.drained and node.reason.startswith(OWNER_PREFIX)


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
    foreign = node.flags & FOREIGN_FLAGS
    if foreign:
        return Verdict(False, f"node is {'+'.join(sorted(foreign))}; left to whoever owns that")
    if node.drained and not is_ours(node):
        return Verdict(False, f"node already drained by {node.reason_user or 'someone'}: {node.reason!r}")
    if is_ours(node):
        return Verdict(False, "already drained by slurmadm")
    if node.state in ("FUTURE",):
        return Verdict(False, f"node is {node.state}")
    return Verdict(True, "")


def may_resume(node: NodeInfo) -> Verdict:
    """May slurmadm resume this node now? Only its own drains, never a foreign state."""
    if not node.drained:
        return Verdict(False, "node is not drained")
    if not is_ours(node):
        return Verdict(False, f"drained by {node.reason_user or 'someone else'}: {node.reason!r}")
    foreign = node.flags & FOREIGN_FLAGS
    if foreign:
        return Verdict(False, f"node is {'+'.join(sorted(foreign))}")
    return Verdict(True, "")
