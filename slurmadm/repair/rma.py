"""Vendor RMA cases: one per failed part, from the evidence bundle to the replacement back in service.

    open -> shipped -> replaced -> qualifying -> closed

- `open_case`: the part (GPU N of a node, a serial, or the board) must be in the parts inventory
  and have no case that is not closed (a second open is refused naming that case's ticket). It
  writes the evidence bundle (bundle.py), records the case and drains the node with
  `slurmadm: repair: rma <ticket>: ...` (or re-reasons slurmadm's own drain to it), audited.
- `ship`: the part went to the vendor. `replaced`: set by `sync` when the parts inventory saw
  another serial in the case's slot (the swap detection), or by hand.
- `qualifying`: the ladder's qualification job for the node started after the replacement
  (repair-run's qualifications), or by hand; `closed`: the qualification passed, or by hand.
  Closing resumes the node when its drain is still this case's.

Each state's entry and exit times are kept (`times`); `figures` turns them into the fault-to-RMA
time, the vendor's turnaround and RMAs per GPU model and per class (`repair rma list --json`, the
head exporter, and the cost helper's reliability report: `figures(store, since)`).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from . import parts as partsmod

STATES = ("open", "shipped", "replaced", "qualifying", "closed")
NEXT = {"open": ("shipped", "replaced", "closed"), "shipped": ("replaced", "closed"),
        "replaced": ("qualifying", "closed"), "qualifying": ("closed", "replaced"), "closed": ()}
CHECK_ID = "repair"          # the drain's check id (slurm/ownership.py: repair owns these drains)
REASON_CONTEXT = "repair"  # the context every repair reason carries (repair run writes [repair] too)
TICKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,63}$")


def reason_for(ticket: str, case: dict) -> str:
    from ..slurm.ownership import format_reason

    return format_reason(CHECK_ID, f"rma {ticket}: {case['kind']} {label(case)} {case['part_key']} at vendor",
                         REASON_CONTEXT)


def label(case: dict) -> str:
    """The slot as people name it: GPU index (its bus id is the slot), HCA device, PSU name."""
    attrs = case.get("attrs") or {}
    return str(attrs["index"]) if "index" in attrs else str(case["slot"])


def is_case_reason(reason: str, ticket: str) -> bool:
    return reason.startswith(f"slurmadm: {CHECK_ID}: rma {ticket}: ")


def check_ticket(ticket: str) -> str:
    if not TICKET_RE.match(ticket or ""):
        raise UsageError(f"ticket {ticket!r}: letters, digits and . _ : - only (at most 64)")
    return ticket


# ------------------------------------------------------------------------------------- reading


def _case(r: dict) -> dict:
    d = dict(r)
    d["times"] = json.loads(d.get("times") or "{}")
    d["state_s"] = time_in_states(d)
    return d


def get(store, ticket: str) -> dict:
    rows = store.query("SELECT * FROM rma_cases WHERE ticket=?", (ticket,))
    if not rows:
        raise UsageError(f"no RMA case with ticket {ticket!r}")
    return _case(rows[0])


def cases(store, *, node: str | None = None, states: tuple[str, ...] | None = None,
          since: float | None = None) -> list[dict]:
    sql, args = "SELECT * FROM rma_cases WHERE 1=1", []
    if node:
        sql += " AND node=?"
        args.append(node)
    if states:
        sql += f" AND state IN ({','.join('?' * len(states))})"
        args += list(states)
    if since is not None:
        sql += " AND (closed IS NULL OR closed >= ?)"
        args.append(since)
    return [_case(r) for r in store.query(sql + " ORDER BY opened", args)]


def open_case_of(store, part_key: str) -> dict | None:
    rows = store.query("SELECT * FROM rma_cases WHERE part_key=? AND state != 'closed' ORDER BY opened DESC LIMIT 1",
                       (part_key,))
    return _case(rows[0]) if rows else None


def time_in_states(case: dict, now: float | None = None) -> dict[str, float]:
    """Seconds spent in each state so far (the current one up to now)."""
    now = time.time() if now is None else now
    out: dict[str, float] = {}
    for state, (entered, left) in (case.get("times") or {}).items():
        end = left if left is not None else (now if state != "closed" else entered)
        out[state] = round(max(0.0, end - entered), 3)
    return out


# ------------------------------------------------------------------------------------ changing


def check_move(case: dict, state: str) -> None:
    """UsageError when the case cannot go to `state` from where it is (staying put is no move)."""
    if state != case["state"] and state not in NEXT[case["state"]]:
        raise UsageError(f"RMA {case['ticket']}: is {case['state']}; cannot go to {state} "
                         f"(from {case['state']}: {', '.join(NEXT[case['state']]) or 'nothing'})")


def plan_move(store, ticket: str, state: str, *, new_key: str = "") -> dict:
    """What `rma ship|replaced|qualify --dry-run` shows: the move, refused as the real one would
    be, and the incidents it would hand back to the ladder (at `replaced`). Changes nothing."""
    case = get(store, ticket)
    check_move(case, state)
    moves = state != case["state"]
    incs = [i.id for i in _part_incidents(store, case, ("rma",))] if moves and state == "replaced" else []
    return {"ticket": ticket, "node": case["node"], "part_key": case["part_key"], "from": case["state"], "to": state,
            "changes": moves, "new_key": new_key if state == "replaced" else "", "incidents_to_qualify": incs}


def _move(store, case: dict, state: str, *, why: str, ts: float | None = None, **set_: Any) -> dict:
    """One state change, audited (`repair.rma.<state>`). Refused when the case cannot go there."""
    ts = time.time() if ts is None else ts
    if state == case["state"]:
        return case
    check_move(case, state)
    times = dict(case["times"])
    if case["state"] in times and times[case["state"]][1] is None:
        times[case["state"]] = [times[case["state"]][0], ts]
    times[state] = [ts, ts if state == "closed" else None]
    cols = {"state": state, "updated": ts, "times": json.dumps(times), **set_}
    if state == "closed":
        cols["closed"] = ts
    with store.transaction() as db:
        db.execute(f"UPDATE rma_cases SET {', '.join(f'{k}=?' for k in cols)} WHERE ticket=?",
                   (*cols.values(), case["ticket"]))
    store.audit(f"repair.rma.{state}", case["node"], why, ticket=case["ticket"], part_key=case["part_key"],
                was=case["state"], **{k: v for k, v in set_.items() if k != "times"})
    return get(store, case["ticket"])


def plan_open(store, node: str, *, gpu: int | None, part: str | None, ticket: str) -> dict:
    """What `rma open` would do: the part, the case, the drain reason. Raises UsageError for an
    unknown node/GPU/serial, a ticket in use, or a part that already has an open case."""
    check_ticket(ticket)
    row = partsmod.resolve(store, node, gpu=gpu, part=part)
    other = open_case_of(store, row["part_key"])
    if other is not None:
        raise UsageError(f"{row['kind']} {row['part_key']} already has an open RMA case: ticket {other['ticket']} "
                         f"({other['state']})")
    if store.query("SELECT 1 FROM rma_cases WHERE ticket=?", (ticket,)):
        raise UsageError(f"ticket {ticket!r} is already used by another RMA case")
    incs = partsmod.incidents_of(store, row["part_key"])
    fault = min((i.get("opened_ts") for i in incs if i.get("opened_ts")), default=None)
    klass = next((i.get("class") for i in reversed(incs) if i.get("class")), "")
    model = row["attrs"].get("name") or row["attrs"].get("board_part") or row["attrs"].get("model") or ""
    case = {"ticket": ticket, "node": node, "kind": row["kind"], "slot": row["slot"], "part_key": row["part_key"],
            "model": model, "class": klass, "fault_ts": fault, "incidents": len(incs), "attrs": row["attrs"]}
    case["reason"] = reason_for(ticket, case)
    return case


def record_open(store, case: dict, bundle_path: str, *, note: str = "") -> dict:
    now = time.time()
    with store.transaction() as db:
        db.execute("INSERT INTO rma_cases (ticket, node, kind, slot, part_key, model, class, state, fault_ts, opened,"
                   " updated, bundle, times, note) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (case["ticket"], case["node"], case["kind"], case["slot"], case["part_key"], case["model"],
                    case["class"], "open", case["fault_ts"], now, now, bundle_path,
                    json.dumps({"open": [now, None]}), note))
    store.audit("repair.rma.open", case["node"], note or f"RMA {case['ticket']}",
                ticket=case["ticket"], kind=case["kind"], slot=case["slot"], part_key=case["part_key"],
                bundle=bundle_path, incidents=case.get("incidents", 0))
    return get(store, case["ticket"])


def _part_incidents(store, case: dict, states: tuple[str, ...]) -> list:
    """The case part's incidents on the case's node in `states` (repair-core's model)."""
    from . import incidents as incmod

    keys = {case["part_key"], *(s["attrs"].get("uuid") for s in partsmod.stays(store, case["part_key"]))} - {None, ""}
    out = {}
    for k in keys:
        for inc in incmod.list_incidents(store, node=case["node"], part_key=k, states=list(states)):
            out[inc.id] = inc
    return list(out.values())


def hand_incidents(store, case: dict, event: str, *, new_key: str = "") -> list[str]:
    """Keep the ladder in step with the case (slurmadm/repair/run.py): at `open` the part's open
    (or lemon) incidents become `rma` (held drained: the ladder takes no step on them); at `replaced` they
    become `qualifying`, so the next `repair run` qualifies the node with the new part, and `sync`
    closes the case when that qualification passes. Returns the incident ids moved."""
    from . import incidents as incmod

    ticket = case["ticket"]
    if event == "open":
        # a lemon's part too: the admin who opens the case hands it to the vendor; the node comes
        # back only when the replacement qualifies
        todo = _part_incidents(store, case, ("open", "resetting", "rebooting", "qualifying", "lemon"))
        moved = [incmod.advance(store, i.id, "rma", "rma", why=f"RMA {ticket} opened",
                                evidence={"rma": ticket, "bundle": case.get("bundle", "")}) for i in todo]
    else:
        todo = _part_incidents(store, case, ("rma",))
        moved = [incmod.advance(store, i.id, "qualifying", "qualify",
                                why=f"RMA {ticket}: part replaced by {new_key or 'a new part'}; qualification due",
                                evidence={"rma": ticket, "new_part": new_key}) for i in todo]
    return [i.id for i in moved]


def ship(store, ticket: str, *, why: str = "") -> dict:
    return _move(store, get(store, ticket), "shipped", why=why or "shipped to the vendor")


def replaced(store, ticket: str, *, new_key: str = "", why: str = "", ts: float | None = None) -> dict:
    case = _move(store, get(store, ticket), "replaced", why=why or "replaced by hand", ts=ts, new_key=new_key)
    hand_incidents(store, case, "replaced", new_key=new_key)
    return case


def qualifying(store, ticket: str, *, why: str = "") -> dict:
    return _move(store, get(store, ticket), "qualifying", why=why or "qualification started")


def close(store, ticket: str, *, why: str = "") -> dict:
    return _move(store, get(store, ticket), "closed", why=why or "closed")


def sync(store, source=None) -> list[dict]:
    """Refresh the parts inventory and carry its swaps into the cases: a case whose part left its
    slot for another serial is `replaced` (with the new serial), at the time the swap was seen.
    Then follow the qualification of replaced/qualifying cases (`qualification_of`). Returns
    what changed, one dict per step."""
    out: list[dict] = []
    for ch in partsmod.refresh(store, source):
        out.append({"part": ch.to_json()})
    for case in cases(store, states=("open", "shipped")):
        gone = store.query("SELECT removed FROM parts WHERE node=? AND kind=? AND slot=? AND part_key=? "
                           "AND removed IS NOT NULL ORDER BY removed DESC LIMIT 1",
                           (case["node"], case["kind"], case["slot"], case["part_key"]))
        now_there = partsmod.current(store, case["node"], case["kind"], case["slot"])
        if gone and now_there is not None and now_there["part_key"] != case["part_key"]:
            c = replaced(store, case["ticket"], new_key=now_there["part_key"], ts=max(gone[0]["removed"], case["opened"]),
                         why=f"swap seen: {case['part_key']} -> {now_there['part_key']}")
            out.append({"ticket": c["ticket"], "state": "replaced", "new_key": c["new_key"]})
    for case in cases(store, states=("replaced", "qualifying")):
        q = qualification_of(store, case["node"], case["times"].get("replaced", [case["updated"]])[0])
        if q is None:
            continue
        if case["state"] == "replaced":
            case = qualifying(store, case["ticket"], why=f"qualification {q.get('id', '')} started".strip())
            out.append({"ticket": case["ticket"], "state": "qualifying"})
        if q.get("result") == "pass":
            c = close(store, case["ticket"], why=f"qualification {q.get('id', '')} passed")
            out.append({"ticket": c["ticket"], "state": "closed", "resume": True})
    return out


def qualification_of(store, node: str, since: float) -> dict | None:
    """The node's latest qualification started at or after `since`, from repair-run's
    `qualifications` table when the store has it ({id, result: pass|fail|running}); else None."""
    try:
        cols = {r["name"] for r in store.query("PRAGMA table_info(qualifications)")}
    except Exception:  # noqa: BLE001 - a central store without PRAGMA: no qualifications seen
        return None
    if not cols or "node" not in cols:
        return None
    start = next((c for c in ("started", "started_ts", "ts", "opened_ts") if c in cols), None)
    res = next((c for c in ("result", "verdict", "status", "state") if c in cols), None)
    if start is None or res is None:
        return None
    rows = store.query(f"SELECT * FROM qualifications WHERE node=? AND {start} >= ? ORDER BY {start} DESC LIMIT 1",
                       (node, since))
    if not rows:
        return None
    r = rows[0]
    verdict = str(r.get(res) or "").lower()
    result = "pass" if verdict in ("pass", "passed", "ok") else "fail" if verdict in ("fail", "failed") else "running"
    return {"id": r.get("id", ""), "result": result, "started": r.get(start)}


# ------------------------------------------------------------------------------------- figures


def _stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "median_s": None, "mean_s": None, "max_s": None}
    return {"n": len(values), "median_s": round(statistics.median(values), 3),
            "mean_s": round(statistics.fmean(values), 3), "max_s": round(max(values), 3)}


def figures(store, since: float | None = None) -> dict:
    """RMA figures over the cases open at or after `since` (None: all): how long from the
    part's first fault to its RMA, the vendor's turnaround (shipped -> replaced, else open ->
    replaced), time spent in each state, and RMAs per GPU model and per incident class.
    The cost helper's reliability report calls this (slurmadm.repair.rma.figures)."""
    rows = cases(store)
    if since is not None:
        rows = [c for c in rows if c["opened"] >= since or c["closed"] is None or c["closed"] >= since]
    fault_to_rma = [c["opened"] - c["fault_ts"] for c in rows if c["fault_ts"]]
    turnaround = []
    for c in rows:
        t = c["times"]
        if "replaced" in t:
            start = (t.get("shipped") or t.get("open"))[0]
            turnaround.append(t["replaced"][0] - start)
    per_state: dict[str, list[float]] = {}
    for c in rows:
        for state, secs in c["state_s"].items():
            if state != "closed":
                per_state.setdefault(state, []).append(secs)
    per_model: dict[str, int] = {}
    per_class: dict[str, int] = {}
    for c in rows:
        if c["kind"] == "gpu":
            per_model[c["model"] or "unknown"] = per_model.get(c["model"] or "unknown", 0) + 1
        per_class[c["class"] or "unknown"] = per_class.get(c["class"] or "unknown", 0) + 1
    return {"since": since, "cases": len(rows), "open": sum(c["state"] != "closed" for c in rows),
            "by_state": {s: sum(c["state"] == s for c in rows) for s in STATES},
            "fault_to_rma": _stats(fault_to_rma), "vendor_turnaround": _stats(turnaround),
            "time_in_state": {s: _stats(v) for s, v in sorted(per_state.items())},
            "per_gpu_model": dict(sorted(per_model.items())), "per_class": dict(sorted(per_class.items()))}


def to_json(case: dict) -> dict:
    keys = ("ticket", "node", "kind", "slot", "part_key", "model", "class", "state", "fault_ts", "opened", "updated",
            "closed", "new_key", "bundle", "times", "state_s", "note")
    return {k: case.get(k) for k in keys}


# ------------------------------------------------------------------- with Slurm and the nodes


def settings(site):
    """[repair.rma] (repair-core's [repair] holds it), else the defaults."""
    from ..site.rma import RmaSettings

    return getattr(getattr(site, "repair", None), "rma", None) or RmaSettings()


def _slurm_node(backend, node: str):
    found = backend.nodes([node])
    return found[0] if found else None


def drain_plan(info, ticket: str, reason: str) -> tuple[str, str]:
    """(action, why): drain | re-reason | keep (already this case's) | leave (someone else's)."""
    from ..slurm.ownership import foreign_state, is_ours

    if info is None:
        return "leave", "Slurm does not know the node"
    if info.drained and is_case_reason(info.reason, ticket):
        return "keep", "already drained for this case"
    if foreign_state(info):
        return "leave", f"node is {foreign_state(info)}; left to whoever owns that"
    if info.drained and not is_ours(info):
        return "leave", f"drained by {info.reason_user or 'someone'}: {info.reason!r}"
    if info.drained:
        return "re-reason", f"slurmadm's drain {info.reason!r} becomes the case's"
    return "drain", ""


def open_rma(site, store, node: str, *, ticket: str, gpu: int | None = None, part: str | None = None,
             dry_run: bool = False, backend=None, remote=None, bug_report: bool = True,
             sel_reader: Callable[[str], tuple[Any, str]] | None = None, note: str = "",
             source=None, no_remote_why: str = "") -> dict:
    """`repair rma open`: plan; with dry_run, only the plan. Else the bundle, the case, the drain."""
    from . import bundle as bundlemod

    if node not in site.node_names:
        raise UsageError(f"{node}: not a node of this site")
    partsmod.refresh(store, source)
    case = plan_open(store, node, gpu=gpu, part=part, ticket=ticket)
    if not case["model"] and case["kind"] == "gpu":
        profile = getattr(site, "node_profile", None)
        case["model"] = profile(node).gpus.nvml_name if profile is not None else ""
    cfg = settings(site)
    info = _slurm_node(backend, node) if backend is not None else None  # Slurm unreachable: exit 3, nothing changed
    action, why = drain_plan(info, ticket, case["reason"]) if backend is not None else ("leave", "no Slurm")
    plan = {**case, "bundle_dir": cfg.bundle_dir, "drain": action, "drain_why": why, "dry_run": dry_run}
    if dry_run:
        return plan
    since = time.time() - cfg.history_days * 86400
    bug = bundlemod.bug_report_via(remote, cfg.bug_report_command, cfg.bug_report_timeout_s) \
        if (bug_report and remote is not None) else None
    files, missing = bundlemod.collect(store, site, case, since=since, bug_report=bug, sel=sel_reader, records=source)
    if bug_report and remote is None:
        missing["nvidia-bug-report"] = no_remote_why or "no SSH to the nodes configured ([fleet])"
    path, manifest = bundlemod.write(cfg.bundle_dir, case, files, missing, secrets=bundlemod.secrets_of(site))
    record_open(store, case, path, note=note)
    hand_incidents(store, {**case, "bundle": path}, "open")
    if action == "drain":
        backend.drain([node], case["reason"])
    elif action == "re-reason":
        backend.set_reason([node], case["reason"])
    if action in ("drain", "re-reason"):
        store.audit("node.drain", node, case["reason"], ticket=ticket, check_id=CHECK_ID)
    return {**plan, "bundle": path, "manifest": manifest}


def close_rma(store, ticket: str, *, why: str, backend=None, dry_run: bool = False) -> dict:
    """`repair rma close`: the case closed; the node resumed when its drain is still this case's."""
    from ..slurm.ownership import may_resume

    case = get(store, ticket)
    if case["state"] == "closed":
        return {**to_json(case), "resume": "already closed"}
    if "closed" not in NEXT[case["state"]]:
        raise UsageError(f"RMA {ticket}: is {case['state']}; cannot close")
    info = _slurm_node(backend, case["node"]) if backend is not None else None
    resume = info is not None and info.drained and is_case_reason(info.reason, ticket) and may_resume(info).act
    if dry_run:
        return {**to_json(case), "would_close": True, "resume": resume}
    case = close(store, ticket, why=why)
    if resume:
        backend.resume([case["node"]])
        store.audit("node.resume", case["node"], why or f"RMA {ticket} closed", ticket=ticket, check_id=CHECK_ID)
    return {**to_json(case), "resume": resume}


def apply_sync_resumes(store, changes: list[dict], backend) -> None:
    """Resume the nodes whose case `sync` closed after a passed qualification (drain still ours)."""
    from ..slurm.ownership import may_resume

    for ch in changes:
        if ch.get("state") == "closed" and ch.get("resume") and backend is not None:
            case = get(store, ch["ticket"])
            info = _slurm_node(backend, case["node"])
            if info is not None and info.drained and is_case_reason(info.reason, case["ticket"]) \
                    and may_resume(info).act:
                backend.resume([case["node"]])
                store.audit("node.resume", case["node"], f"RMA {case['ticket']}: qualified", ticket=case["ticket"],
                            check_id=CHECK_ID)
