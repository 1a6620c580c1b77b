"""What burn-in holds out of service now, read from Slurm's drain reasons (the store keeps the
sweeps; Slurm keeps which nodes are still held). Pure: the site and Slurm's nodes in, rows out.

A sweep drains a node for one of four things (sweep.py), each with its own check id:
  - `failed`: a burn-in test failed (`burnin-<test>`, e.g. burnin-gpu-burn, burnin-kat): a repair
    incident (repair/data/classes.toml BURNIN, SDC), mended by the ladder or a person;
  - `straggler`: slow in burnin.straggler.drain_after sweeps in a row (`burnin-straggler`): a
    repair incident too;
  - `suspect`: slow in one sweep, held for the next sweep's re-test (`burnin-suspect`,
    burnin.straggler.hold_suspects): no incident; the next sweep takes it first and drains it as
    a straggler or resumes it;
  - `due`: busy and not burned in for burnin.due_days (`burnin-due`): drained so that its jobs
    finish, no incident; the next sweep tests it and resumes it on a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ..hostlist import compress, fold, neutral
from ..site import Site
from ..slurm.model import NodeInfo
from ..slurm.ownership import is_ours, reason_check_id, reason_detail
from .select import DUE_CHECK, STRAGGLER_CHECK, SUSPECT_CHECK, age_text

PREFIX = "burnin-"
KINDS = ("failed", "straggler", "suspect", "due")  # the order rows are shown in

# what releases a node held for each kind (people's text; --json has it too)
NEXT = {
    "failed": "its repair incident (`slurmadm repair status`)",
    "straggler": "its repair incident (`slurmadm repair status`)",
    "suspect": "the next sweep's re-test (slow again: a straggler; at speed: resumed)",
    "due": "the next sweep's test (resumed on a pass)",
}
NO_SWEEP = "a person: no sweep re-tests a drained node without burnin.reservation"


@dataclass(frozen=True)
class Held:
    node: str
    kind: str  # one of KINDS
    check_id: str  # burnin-<test>, burnin-straggler, burnin-suspect, burnin-due
    state: str  # DRAINING while its jobs end, DRAINED after (Slurm's state text)
    detail: str  # the drain reason's detail
    since: float  # when Slurm set the reason (Unix time; 0: unknown)
    next: str  # what releases it

    def as_dict(self) -> dict:
        return asdict(self)


def kind_of(check_id: str) -> str:
    return {SUSPECT_CHECK: "suspect", DUE_CHECK: "due", STRAGGLER_CHECK: "straggler"}.get(check_id, "failed")


def held(site: Site, nodes: Iterable[NodeInfo]) -> list[Held]:
    """The site's nodes slurmadm drained for burn-in, failed first, then by node (site order)."""
    order = {n: i for i, n in enumerate(site.node_names)}
    out = []
    for n in nodes:
        check = reason_check_id(n.reason) if n.name in order and is_ours(n) else None
        if not check or not check.startswith(PREFIX):
            continue
        kind = kind_of(check)
        nxt = NEXT[kind] if site.burnin.reservation or kind not in ("suspect", "due") else NO_SWEEP
        out.append(Held(node=n.name, kind=kind, check_id=check, state=n.state_text, detail=reason_detail(n.reason),
                        since=n.reason_time, next=nxt))
    return sorted(out, key=lambda h: (KINDS.index(h.kind), order[h.node]))


def held_for(h: Held) -> str:
    """`failed: gpu-burn`, `straggler`, `suspect`, `due`."""
    return f"failed: {h.check_id[len(PREFIX):]}" if h.kind == "failed" else h.kind


def rows(items: list[Held], now: float) -> list[tuple[str, str, str, str, str]]:
    """For people: nodes that agree on what they are held for, state and detail are one row (a
    hostlist), in KINDS order: nodes, held for, state, held (the longest-held node's time; '?'
    when Slurm has no reason time), detail."""
    groups = fold((h.node, (KINDS.index(h.kind), held_for(h), h.state, neutral(h.detail, h.node))) for h in items)
    groups.sort(key=lambda g: (g.key[0], g.hostlist))
    since = {h.node: h.since for h in items}
    out = []
    for g in groups:
        oldest = min(since[n] for n in g.nodes)
        out.append((g.hostlist, g.key[1], g.key[2], age_text(now - oldest) if oldest else "?", g.named(g.key[3])))
    return out


def releases(items: list[Held]) -> list[tuple[str, str]]:
    """(kinds, what releases them) for the kinds present: `failed, straggler` share one line."""
    by: dict[str, list[str]] = {}
    for kind in KINDS:
        for nxt in sorted({h.next for h in items if h.kind == kind}):
            by.setdefault(nxt, []).append(kind)
    return [(", ".join(kinds), nxt) for nxt, kinds in by.items()]


def summary(items: list[Held]) -> str:
    """`2 held: 1 straggler (b200-003), 1 due (b200-007)`, or `none held`."""
    if not items:
        return "none held"
    parts = []
    for kind in KINDS:
        mine = [h.node for h in items if h.kind == kind]
        if mine:
            parts.append(f"{len(mine)} {kind} ({compress(mine)})")
    return f"{len(items)} held: " + ", ".join(parts)
