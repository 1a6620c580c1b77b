"""What each `repair` command shows: --json shapes and table rows (cli/repair.py only parses
and prints). Rows about many nodes fold the nodes that agree with `hostlist.fold`."""

from __future__ import annotations

import json

import time
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError
from ..hostlist import fold
from . import incidents, ladder
from .model import HELD, Incident


def settings_of(site) -> ladder.Settings:
    return ladder.settings(getattr(site, "repair", None))


@contextmanager
def opened(site):
    """The head's store (where incidents live)."""
    from ..store import Store

    with Store.for_site(site) as store:
        yield store


def ingest(site, store, *, now: float | None = None) -> incidents.IngestResult:
    """One ingest pass: from the central store when the site has one, else this store. The
    head's own verdict sources (the alert webhook, burn-in, `bmc health`, `bmc recover`) record
    their drains here on the head: they are shipped first (best effort, as every reader does),
    so the ladder acts on them at this run, not after the head's `store ship` cron (without one
    they never reached it: the fleet replay's webhook drains opened no incident)."""
    s = settings_of(site)
    if site.store.url is None:
        return incidents.ingest(store, now=now, settings=s)
    from ..store import read

    with read.reader(site) as r:
        return incidents.ingest(store, r, now=now, settings=s)


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def part_text(i: Incident) -> str:
    if i.part_kind == "gpu":
        return f"GPU{i.slot} {i.serial}".strip() if i.slot else i.part_key
    if i.part_kind == "node":
        return "node"
    return f"{i.part_kind} {i.slot or i.part_key.split('/', 1)[-1]}"


# ---- ladder

def ladder_json(s: ladder.Settings) -> dict[str, Any]:
    return {"classes": ladder.rows(s), "auto_resume": ladder.auto_resume_classes(),
            "lemon": {"incidents": s.lemon_incidents, "window_days": s.lemon_window_days,
                      "failed_qualifications": s.lemon_failed_qualifications, "source": s.lemon_source}}


def auto_resume() -> list[str]:
    return ladder.auto_resume_classes()


def ladder_rows(s: ladder.Settings) -> list[tuple[str, ...]]:
    return [(r["class"], r["part"], str(r["window_days"]),
             "  |  ".join(" -> ".join(rung) for rung in r["rungs"]), r["source"] + (" (site)" if r["site"] else ""))
            for r in ladder.rows(s)]


# ---- status

def status_json(open_incidents: list[Incident], s: ladder.Settings, store, now: float) -> list[dict[str, Any]]:
    """Each incident not closed with the step `repair run` gives it next: the ladder's, or
    `close` where a burn-in sweep that passed its node proves it (as `repair run` plans it)."""
    per_node: dict[str, list[Incident]] = {}
    for i in open_incidents:
        per_node.setdefault(i.node, []).append(i)
    passes = incidents.burnin_passes(store, per_node)
    closes: dict[str, str] = {}
    for node, incs in per_node.items():
        closable = incidents.burnin_closable(incs, passes.get(node))
        closes.update({i.id: incidents.close_why(closable, passes[node]) for i in closable})
    out = []
    for i in open_incidents:
        if i.id in closes:
            nxt, why = "close", closes[i.id]
        else:
            step = ladder.next_step(i, incidents.part_history(store, i), s, now)
            nxt, why = step.action, step.why
        out.append({**{k: v for k, v in i.to_json().items() if k != "evidence"},
                    "in_repair_s": round(now - i.opened_ts, 1), "next": nxt, "next_why": why,
                    "last_signal": (i.evidence[0].get("line") if i.evidence else "")})
    return out


def status_rows(rows: list[dict[str, Any]], now: float) -> list[tuple[str, ...]]:
    """One row per (class, state, next step), its nodes folded; the oldest first within."""
    keyed = [(r["node"], (r["class"], r["state"], r["step"] or "-", r["next"])) for r in rows]
    oldest: dict[tuple, float] = {}
    parts: dict[tuple, list[str]] = {}
    for r in rows:
        key = (r["class"], r["state"], r["step"] or "-", r["next"])
        oldest[key] = max(oldest.get(key, 0.0), r["in_repair_s"])
        parts.setdefault(key, []).append(r["part_key"] if r["part_kind"] == "gpu" else r["part_kind"])
    out = []
    for f in fold(keyed):
        cls, state, step, nxt = f.key
        ps = parts[f.key]
        part = ps[0] if len(ps) == 1 else f"{len(ps)} parts"
        out.append((f.hostlist, cls, part, state, step, nxt, _age(oldest[f.key])))
    return out


# ---- history

def check_target(site, store, node: str | None, serial: str | None) -> None:
    """An unknown node or serial: one line, exit 2."""
    if node is not None and node not in set(site.node_names) and not incidents.known_node(store, node):
        raise UsageError(f"{node}: no such node in the site")
    if serial is not None and not incidents.list_incidents(store, serial=serial):
        raise UsageError(f"GPU serial {serial}: no incident on record")


def history_json(items: list[Incident]) -> list[dict[str, Any]]:
    return [i.to_json() for i in items]


def history_rows(items: list[Incident], when) -> list[tuple[str, ...]]:
    return [(when(i.opened_ts), i.node, part_text(i), i.cls, i.state, i.step or "-", str(i.count),
             when(i.closed_ts) if i.closed_ts else "-", i.why) for i in items]


# ---- lemons

def lemons(store, s: ladder.Settings, now: float | None = None) -> list[dict[str, Any]]:
    """Nodes and GPU serials that are lemons: an incident held as one, or past the thresholds."""
    now = time.time() if now is None else now
    since = now - s.lemon_window_days * ladder.DAY
    recent = incidents.list_incidents(store, since=since)
    by_node: dict[str, list[Incident]] = {}
    by_serial: dict[str, list[Incident]] = {}
    for i in recent:
        by_node.setdefault(i.node, []).append(i)
        if i.part_kind == "gpu" and i.serial:
            by_serial.setdefault(i.serial, []).append(i)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for i in incidents.list_incidents(store, states=["lemon"]):
        out[("node", i.node)] = {"kind": "node", "name": i.node, "why": i.why, "held": True,
                                 "incidents": len(by_node.get(i.node, []))}
    cleared = {str(r["node"]): float(r["t"] or 0) for r in
               store.query("SELECT node, MAX(closed_ts) AS t FROM incidents WHERE step = 'clear' GROUP BY node")}
    for node, items in by_node.items():
        items = [i for i in items if i.opened_ts >= cleared.get(node, 0.0)]  # counted again from a clear
        if ladder.faults(items, node_rule=True) >= s.lemon_incidents and ("node", node) not in out:
            out[("node", node)] = {"kind": "node", "name": node, "held": any(x.state in HELD for x in items),
                                   "why": f"{len(items)} incidents in {s.lemon_window_days} days",
                                   "incidents": len(items)}
    for serial, items in by_serial.items():
        if ladder.faults(items) >= s.lemon_incidents:
            out[("gpu", serial)] = {"kind": "gpu", "name": serial, "held": any(x.state in HELD for x in items),
                                    "why": f"{len(items)} incidents in {s.lemon_window_days} days on "
                                           f"{', '.join(sorted({x.node for x in items}))}",
                                    "incidents": len(items)}
    failed = store.query("SELECT i.node AS node, count(*) AS n FROM qualifications q JOIN incidents i "
                         f"ON q.incident_id = i.id WHERE q.status = 'failed' AND {incidents.SINCE_CLEAR_SQL} "
                         "GROUP BY i.node")
    for row in failed:
        if int(row["n"]) >= s.lemon_failed_qualifications and ("node", row["node"]) not in out:
            out[("node", row["node"])] = {"kind": "node", "name": row["node"], "held": False,
                                          "why": f"{row['n']} failed qualifications", "incidents":
                                          len(by_node.get(row["node"], []))}
    for serial, (n, where) in failed_by_gpu(store).items():
        if n >= s.lemon_failed_qualifications and ("gpu", serial) not in out:
            node = where.split(" ", 1)[0]
            out[("gpu", serial)] = {"kind": "gpu", "name": serial, "held": ("node", node) in out and
                                    bool(out[("node", node)]["held"]),
                                    "why": f"{n} failed qualifications blame it ({where})",
                                    "incidents": len(by_serial.get(serial, []))}
    return sorted(out.values(), key=lambda d: (d["kind"] != "node", d["name"]))


def failed_by_gpu(store) -> dict[str, tuple[int, str]]:
    """GPU serial -> (failed qualifications that blame it, where: `node GPUn`), since each
    node's last `repair clear` (qualify.Qualification.blamed, in the qualification's evidence)."""
    out: dict[str, tuple[int, str]] = {}
    rows = store.query("SELECT q.evidence AS evidence, i.node AS node FROM qualifications q JOIN incidents i "
                       f"ON q.incident_id = i.id WHERE q.status = 'failed' AND {incidents.SINCE_CLEAR_SQL} "
                       "ORDER BY q.started")
    for row in rows:
        try:
            evidence = json.loads(row["evidence"] or "[]")
        except ValueError:
            continue
        seen = set()
        for e in evidence if isinstance(evidence, list) else []:
            for b in (e.get("blamed") or []) if isinstance(e, dict) else []:
                serial = str(b.get("serial") or "") if isinstance(b, dict) else ""
                if serial and serial not in seen:
                    seen.add(serial)
                    n, _ = out.get(serial, (0, ""))
                    out[serial] = (n + 1, f"{row['node']} GPU{b.get('slot', '?')}")
    return out


def lemon_rows(items: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    return [(d["kind"], d["name"], str(d["incidents"]), "yes" if d["held"] else "no", d["why"]) for d in items]


def resume_cleared(backend, store, node: str, why: str, *, dry_run: bool = False) -> str:
    """`repair clear NODE --resume`: the node back in service when its drain is slurmadm's (a
    repair drain, a lemon's or an RMA's included, or health's); someone else's drain, or a node
    in a state someone else handles, stays. Re-reads Slurm first; audited. What was done, in words."""
    from ..slurm.ownership import foreign_state, is_ours

    n = backend.nodes([node])[0]  # Slurm unreachable: UnreachableError (exit 3)
    if not n.drained:
        return "not drained: nothing to resume"
    if not is_ours(n):
        return f"drained by {n.reason_user or 'someone else'} ({n.reason!r}): left to them"
    foreign = foreign_state(n)
    if foreign:
        return f"{foreign}: left to whoever handles that"
    if dry_run:
        return f"would resume (drain {n.reason!r})"
    backend.resume([node])
    store.audit("repair.clear.resume", node, why, was=n.reason)
    return f"resumed (was {n.reason!r})"

