"""Which nodes a sweep takes. Pure: the site, what Slurm reported, the time and the history in,
a selection with a reason for every node left out.

Taken, in this order, up to `burnin.max_nodes`:
  1. nodes named with --nodes (any time of day);
  2. nodes slurmadm drained that await re-qualification (any time; they serve no users): a
     suspect held for its re-test first, a node held for its turn (`due`) last;
  3. idle nodes, only inside the burn-in window: first those the last sweep that tested them
     found slow (`suspects`: a straggler is drained after burnin.straggler.drain_after slow
     sweeps in a row, so the next sweep confirms or clears it rather than waiting for the node's
     turn, 16 nights at 8 of 128 a night), then those tested longest ago.
Held for the next sweep (`due`, burnin.due_days): inside the window, busy nodes not burned in
for due_days (counted from `since`, the store's first sweep, for a node never tested), oldest
first, as many as the next sweep has room for (max_nodes less the nodes already held so): the
sweep drains them `burnin-due` so that their jobs end, and the next sweep re-qualifies them.
Never taken: nodes drained by someone else, nodes in a state another party handles (reboot,
power, someone else's reservation), busy or unresponsive nodes, nodes outside the partition, and
nodes the repair ladder holds (`slurmadm: repair: ...`: mid-ladder, an RMA candidate, a lemon):
a burn-in pass must not resume what repair keeps out of service, named or not (`slurmadm repair
qualify` is that node's test). Nor, while the ladder runs (`repairing`: the sweep passes it only
when `repair run` ran lately), a drained node with an open incident that the ladder has not
taken over yet: its ladder's step (a reboot for a fallen-off GPU) is what mends it, and a
re-qualification before it fails, drains it again, and holds the node in the sweep's
reservation where the ladder cannot act (the fleet replay's loop, issue 37).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import UsageError
from ..site import Site, require_nodes
from ..slurm.model import NodeInfo
from ..slurm.ownership import foreign_state, is_ours, owner, reason_check_id

NAMED = "named"
REQUALIFY = "requalify"
IDLE = "idle"
SUSPECT = "suspect"  # idle, and the last sweep that tested it found it slow


@dataclass
class Selection:
    chosen: dict[str, str] = field(default_factory=dict)  # node -> why (named|requalify|idle)
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why not
    in_window: bool = False
    due: dict[str, str] = field(default_factory=dict)  # busy node -> why the next sweep should test it


def in_window(now: dt.time, start: str, end: str) -> bool:
    s = dt.time.fromisoformat(start)
    e = dt.time.fromisoformat(end)
    if s == e:
        return True
    if s < e:
        return s <= now < e
    return now >= s or now < e  # spans midnight


def burnin_partition(site: Site) -> str:
    return site.burnin.partition or site.default_partition.name


def _unusable(node: NodeInfo) -> str | None:
    """Why a node cannot be tested now, or None."""
    # anyone's reservation too (burn-in reserves its own nodes), not only a maintenance one
    foreign = "+".join(filter(None, [foreign_state(node), "RESERVED" if "RESERVED" in node.flags else ""]))
    if foreign:
        return f"{foreign}: left to whoever handles that"
    if "NOT_RESPONDING" in node.flags or node.state in ("DOWN", "UNKNOWN", "FUTURE", "ERROR"):
        return f"node is {node.state_text}"
    if node.drained and not is_ours(node):
        who = node.reason_user or "someone else"
        return f"drained by {who}: {node.reason!r} (slurmadm never touches that)"
    if node.drained and owner(node.reason):  # a drain one capability lifts alone (repair's)
        return f"held by repair: {node.reason!r} (left to its ladder; `slurmadm repair qualify` tests it)"
    if node.state != "IDLE":
        return f"busy ({node.state_text})"
    return None


def named_nodes(site: Site, pattern: str) -> list[str]:
    """--nodes: a hostlist of the site's nodes, no more than burnin.max_nodes (UsageError)."""
    wanted = require_nodes(site, pattern)
    if len(wanted) > site.burnin.max_nodes:
        raise UsageError(f"--nodes: {len(wanted)} nodes is more than burnin.max_nodes ({site.burnin.max_nodes})")
    return wanted


DUE_CHECK = "burnin-due"  # the drain reason's check id of a node held for the next sweep
SUSPECT_CHECK = "burnin-suspect"  # ... of a node found slow once, held for the next sweep's re-test
STRAGGLER_CHECK = "burnin-straggler"  # ... of a node found slow in drain_after sweeps in a row
# The order nodes slurmadm drained are re-qualified in when max_nodes cannot take them all: a
# suspect's re-test first (its hold promised it the next sweep, and it decides a repair), the
# rotation's holds last (routine; a sweep that held a suspect after holding them for the next one
# overfilled it), the rest (health's drains) between, each in site order.
REQUALIFY_ORDER = {SUSPECT_CHECK: 0, DUE_CHECK: 2}


def select(site: Site, nodes: list[NodeInfo], *, now: dt.datetime, named: str | None = None,
           last_tested: Mapping[str, float] | None = None, reservation_enabled: bool = True,
           repairing: Mapping[str, str] | None = None, suspects: Mapping[str, str] | None = None,
           since: float | None = None) -> Selection:
    """`repairing`: node -> its open repair incidents (text), when the ladder is running; a
    drained one is left to it. `suspects`: node -> what the last sweep that tested it found slow
    (history.suspects): taken first among idle nodes. `since`: when the store's first sweep
    began (None: no sweep yet, so no node is due)."""
    b = site.burnin
    repairing = repairing or {}
    suspects = suspects or {}
    part = burnin_partition(site)
    by_name = {n.name: n for n in nodes}
    sel = Selection(in_window=in_window(now.time(), b.window_start, b.window_end))
    last_tested = last_tested or {}

    def consider(name: str, why: str) -> None:
        if name in sel.chosen or name in sel.skipped:
            return
        node = by_name.get(name)
        if node is None:
            sel.skipped[name] = "Slurm does not report this node"
            return
        if part not in node.partitions:
            sel.skipped[name] = f"not in partition {part}"
            return
        problem = _unusable(node)
        if problem:
            sel.skipped[name] = problem
            return
        if node.drained and name in repairing:
            sel.skipped[name] = (f"open repair incident {repairing[name]}: left to its ladder (`slurmadm repair "
                                 "status`; `slurmadm repair qualify` tests it)")
            return
        if node.drained and not reservation_enabled:
            sel.skipped[name] = "drained by slurmadm: re-qualifying it needs burnin.reservation"
            return
        if len(sel.chosen) >= b.max_nodes:
            sel.skipped[name] = f"burnin.max_nodes ({b.max_nodes}) reached; next sweep"
            return
        sel.chosen[name] = REQUALIFY if node.drained else why

    if named:
        for name in named_nodes(site, named):
            consider(name, NAMED)
        return sel

    site_nodes = set(site.node_names)
    ours = [n.name for n in nodes if n.name in site_nodes and is_ours(n)]
    ours.sort(key=lambda name: (REQUALIFY_ORDER.get(reason_check_id(by_name[name].reason) or "", 1),
                                site.node_names.index(name)))
    for name in ours:
        consider(name, REQUALIFY)
    rest = [n.name for n in nodes if n.name in site_nodes]
    rest.sort(key=lambda name: (name not in suspects, last_tested.get(name, 0.0), site.node_names.index(name)))
    for name in rest:
        if sel.in_window or by_name[name].drained:  # a drained node says why it is left out
            consider(name, SUSPECT if name in suspects else IDLE)
        elif name not in sel.chosen:
            sel.skipped.setdefault(name, f"outside the burn-in window {b.window_start}-{b.window_end}")
    if sel.in_window and b.due_days > 0 and since is not None and reservation_enabled:
        _due(sel, site, [by_name[n] for n in rest], now=now, last_tested=last_tested, since=since)
    return sel


def _due(sel: Selection, site: Site, nodes: list[NodeInfo], *, now: dt.datetime,
         last_tested: Mapping[str, float], since: float) -> None:
    """Busy nodes not burned in for burnin.due_days, oldest first, as many as the next sweep has
    room for: the nodes slurmadm drained that this sweep does not test count against it (held
    for it earlier, or health's drains still running jobs or past max_nodes: the next sweep takes
    them first, REQUALIFY_ORDER)."""
    b = site.burnin
    part = burnin_partition(site)

    def waiting(n: NodeInfo) -> bool:  # the next sweep's, and not tested by this one
        if n.name in sel.chosen or not is_ours(n):
            return False
        if reason_check_id(n.reason) == DUE_CHECK:
            return True
        why = sel.skipped.get(n.name, "")
        return n.drained and (why.startswith("busy") or why.startswith("burnin.max_nodes"))

    held = sum(1 for n in nodes if waiting(n))
    horizon = now.timestamp() - b.due_days * 86400
    busy = [n for n in nodes if n.name not in sel.chosen and part in n.partitions and not n.drained
            and n.state in ("ALLOCATED", "MIXED") and not foreign_state(n) and "RESERVED" not in n.flags
            and "NOT_RESPONDING" not in n.flags]
    busy.sort(key=lambda n: (last_tested.get(n.name, since), site.node_names.index(n.name)))
    for node in busy[:max(b.max_nodes - held, 0)]:
        last = last_tested.get(node.name)
        at = last if last is not None else since
        if at > horizon:
            break
        age = age_text(now.timestamp() - at)
        sel.due[node.name] = (f"last burned in {age} ago" if last is not None else
                              f"never burned in ({age} of burn-in history)") + \
            f" (burnin.due_days {b.due_days:g}); held for the next sweep"


def age_text(seconds: float) -> str:
    """`45 days`, `30 h`, `12 min`."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{max(seconds, 0) / 60:.0f} min"
