"""Incidents in the store: ingest from what the verdict sources recorded, reads, and the two
writes the executor and admins make (`advance`, `clear`).

Ingest (`ingest`) is ONE pass on the head over the audit events since its cursor: every drain a
verdict source recorded (health's prolog/epilog/periodic runs, `bmc health`, burn-in, `bmc
recover`, the alert webhook), with the failing check results of the same health run, turned into
faults (`classes.classify`) keyed by node and part. A fault of a class that opens incidents opens
one, or extends the open incident of the same part and class (a repeat). GPU faults are keyed by
the NVML serial (else UUID, else slot) the node's health runs keep in `node_state`
(`health.gpus`), so a GPU's history follows its serial to another node. Ingest is idempotent: the
cursor moves past what it read, and every signal it took is recorded with its source (`ref`), so
reading the same events again adds nothing.

Imports only store/, slurm/, record, errors and its own package (no health, bmc, burnin,
monitor, exporter): the incident model sits below them.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from ..errors import UsageError
from ..record import record
from ..slurm.ownership import OWNER_PREFIX, reason_check_id, reason_detail
from . import classes
from .model import STATES, Incident

DRAIN_ACTIONS = ("node.drain", "bmc.recover.give-up", "bmc.recover.failed")
GPU_INVENTORY_KEY = "health.gpus"  # node_state: [{"index", "bus_id", "serial", "uuid", "present"}] (gpu-count)
HCA_INVENTORY_KEY = "health.hcas"  # node_state: "mlx5_0=<node_guid> ..." (the infiniband check)
# node_state: what the node's BMC last answered to `bmc inventory` (bmc/ops.py record_inventory):
# {"board_serial", "serial", "model", ..., "psus": [{"name", "serial", ...}], "fans": [...]}
BMC_INVENTORY_KEY = "bmc.inventory"
BMC_PARTS = ("board", "psu", "fan")
BATCH = 2000
LOOKBACK = 500  # central store: drains re-read behind the cursor (arrival order is not commit order)
EVIDENCE_MAX = 60  # evidence entries kept per incident: the first 10 and the newest 50
HISTORY_KEEP = 10


@record
class IngestResult:
    read: int = 0        # drain events read
    opened: int = 0
    extended: int = 0
    ignored: int = 0     # faults of classes that open no incident (application XIDs, thermal, ...)
    skipped: int = 0     # signals already taken (a second ingest of the same events)
    cursor: int = 0

    def to_json(self) -> dict[str, int]:
        return {"read": self.read, "opened": self.opened, "extended": self.extended, "ignored": self.ignored,
                "skipped": self.skipped, "cursor": self.cursor}


def incident_id(node: str, part_key: str, cls: str, ts: float, ref: str) -> str:
    return "r" + hashlib.sha1(f"{node}|{part_key}|{cls}|{ts:.3f}|{ref}".encode()).hexdigest()[:10]


def _source_of(check_id: str) -> str:
    if check_id == "bmc-recover":
        return "bmc-recover"
    if check_id.startswith("bmc-"):
        return "bmc"
    if check_id.startswith("burnin-"):
        return "burnin"
    if check_id.startswith("alert-"):
        return "webhook"
    return "health"


def _pos_column(source) -> str:
    return "seq" if getattr(source, "central", False) else "id"


def _origin(source) -> str:
    origin = getattr(source, "origin", None)
    return origin if isinstance(origin, str) else "''"


def _cursor_name(source) -> str:
    return "events:central" if getattr(source, "central", False) else "events:local"


def get_cursor(store, source=None) -> int:
    row = store.db.execute("SELECT value FROM repair_cursor WHERE name=?", (_cursor_name(source or store),)).fetchone()
    return int(row["value"]) if row else 0


def _inventory(source, node: str, kind: str, cache: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the node's health runs keep of its parts' identity: GPUs (list of dicts) or HCAs
    ([{"hca", "guid"}])."""
    if (node, kind) not in cache:
        key = {"gpu": GPU_INVENTORY_KEY, "hca": HCA_INVENTORY_KEY, "bmc": BMC_INVENTORY_KEY}[kind]
        rows = source.query("SELECT value FROM node_state WHERE node=? AND `key`=? ORDER BY ts DESC LIMIT 1",
                            (node, key))
        text = rows[0]["value"] if rows else ""
        if kind == "bmc":
            try:
                inv = [json.loads(text)] if text else []
            except ValueError:
                inv = []
        elif kind == "hca":
            inv: Any = [{"hca": h, "guid": g} for h, _, g in (w.partition("=") for w in text.split()) if g]
        else:
            try:
                inv = json.loads(text) if text else []
            except ValueError:
                inv = []
        cache[(node, kind)] = [g for g in inv if isinstance(g, dict)] if isinstance(inv, list) else []
    return cache[(node, kind)]


def gpu_inventory(source, node: str) -> list[dict[str, Any]]:
    """The node's GPUs as its health runs last saw them (node_state `health.gpus`)."""
    return _inventory(source, node, "gpu", {})


def _pci_tail(bus_id: str) -> str:
    """`00000000:1B:00.0` (NVML) / `0000:1b:00.0` / `0000:1b:00` (the kernel's `NVRM: Xid
    (PCI:0000:1b:00)`: domain, bus, device, no function) -> `1b:00`, the part every spelling
    shares (a GPU is function 0 of its device)."""
    parts = bus_id.strip().lower().split(":")
    tail = ":".join(parts[-2:]) if len(parts) >= 2 else parts[0]
    return tail.split(".", 1)[0]


def gpu_identity(inventory: list[dict[str, Any]], slot: str, pci: str, *, lost: bool = False) -> dict[str, str]:
    """The GPU the node's inventory has at `pci`, else in `slot` (its index as NVML enumerates
    them now), else (`lost`: a GPU that fell off the bus) the one GPU no longer present: index,
    bus_id, serial, uuid."""
    def ident(g: dict[str, Any]) -> dict[str, str]:
        return {k: str(g.get(k) if g.get(k) is not None else "") for k in ("index", "bus_id", "serial", "uuid")}

    if pci:
        for g in inventory:
            if g.get("bus_id") and _pci_tail(str(g["bus_id"])) == _pci_tail(pci):
                return ident(g)
    if slot != "":
        for g in sorted(inventory, key=lambda g: not g.get("present", True)):
            if str(g.get("index")) == slot:
                return ident(g)
    if lost:
        gone = [g for g in inventory if g.get("present") is False]
        if len(gone) == 1:
            return ident(gone[0])
    return {"index": slot, "bus_id": pci, "serial": "", "uuid": ""}


def part_of(node: str, fault: classes.Fault, inventory: list[dict[str, Any]]) -> tuple[str, str, dict[str, str]]:
    """(part_key, slot, identity) of a fault on `node`."""
    if fault.part_kind == "gpu":
        ident = gpu_identity(inventory, fault.slot, fault.pci, lost=fault.cls == "GPU_LOST")
        slot = ident["index"] or fault.slot
        key = ident["serial"] or ident["uuid"] or (f"slot:{slot}" if slot else f"pci:{fault.pci}" if fault.pci
                                                   else "gpu:unknown")
        if not ident["serial"] and not ident["uuid"]:
            key = f"{node}/{key}"  # without an identity the key is only good on this node
        return key, slot, ident
    if fault.part_kind == "hca":
        dev, _, port = fault.slot.partition("/")
        guid = next((h["guid"] for h in inventory if h.get("hca") == dev), "") if dev else ""
        if guid:
            return f"{guid}:{port or '1'}", fault.slot, {"hca": dev, "guid": guid, "port": port or "1"}
        return f"{node}/hca:{fault.slot or 'unknown'}", fault.slot, {}
    bmc = inventory[0] if fault.part_kind in BMC_PARTS and inventory and isinstance(inventory[0], dict) else {}
    if fault.part_kind in ("psu", "fan"):
        fru = _fru_named(bmc.get("psus" if fault.part_kind == "psu" else "fans"), fault.slot)
        if fru.get("serial"):
            return str(fru["serial"]), fault.slot, {k: str(v) for k, v in fru.items() if v not in (None, "")}
        return f"{node}/{fault.part_kind}:{fault.slot or 'unknown'}", fault.slot, {}
    if fault.part_kind == "board":
        serial = str(bmc.get("board_serial") or bmc.get("serial") or "")
        if serial:  # the board's FRU serial, as the parts inventory keys it (parts.parse_bmc)
            return serial, "", {k: str(bmc[k]) for k in ("board_serial", "serial", "model", "board", "manufacturer")
                                if bmc.get(k)}
        return f"{node}/board", "", {}
    return node, "", {}


def _fru_named(frus: Any, slot: str) -> dict[str, Any]:
    """The FRU among a BMC's PSUs or fans that a sensor name means: the same name (`PS1`), else the
    only one with its number (`PSU2` the sensor, `PS2` or `Power Supply 2` the FRU); {} if none."""
    frus = [f for f in frus or [] if isinstance(f, dict) and f.get("name")]
    def norm(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())
    for f in frus:
        if norm(str(f["name"])) == norm(slot):
            return f
    number = re.findall(r"\d+", slot)
    if not number:
        return {}
    same = [f for f in frus if re.findall(r"\d+", str(f["name"]))[-1:] == number[-1:]]
    return same[0] if len(same) == 1 else {}


def _signals(source, row: dict[str, Any]) -> list[tuple[str, str]]:
    """(check id, detail) of every failing verdict behind one drain event."""
    reason = str(row["reason"] or "")
    action = str(row["action"])
    if action.startswith("bmc.recover."):
        return [("bmc-recover", reason)]
    if not reason.startswith(OWNER_PREFIX):
        return []
    check_id = reason_check_id(reason) or ""
    if check_id == "repair":  # repair's own re-reasoning of a drain it holds
        return []
    try:
        detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else (row["detail"] or {})
    except ValueError:
        detail = {}
    run_id = detail.get("run_id") if isinstance(detail, dict) else None
    if run_id:
        results = source.query("SELECT check_id, detail FROM check_results WHERE run_id=? AND node=? "
                               "AND status IN ('fail', 'error') ORDER BY id", (run_id, row["target"]))
        if results:
            return [(str(r["check_id"]), str(r["detail"])) for r in results]
    text = reason_detail(reason)
    if text.endswith(" more)") and " (+" in text:
        text = text[: text.rindex(" (+")]
    return [(check_id, text)]


def ingest(store, source=None, *, now: float | None = None, settings=None, limit: int | None = None) -> IngestResult:
    """Read the drain events past the cursor from `source` (a store/read.py Reader, the central
    store's; default: this store itself) and open or extend incidents in `store`."""
    from . import ladder

    source = store if source is None else source
    settings = settings or ladder.defaults()
    now = time.time() if now is None else now
    out = IngestResult()
    name = _cursor_name(source)
    cursor = get_cursor(store, source)
    pos = _pos_column(source)
    inventories: dict[tuple[str, str], list[dict[str, Any]]] = {}
    marks = ",".join("?" * len(DRAIN_ACTIONS))
    # a node's account's records about another node do not count (store/read.py Reader.trusted)
    trusted = source.trusted("target") if hasattr(source, "trusted") else "1=1"
    opened_audit: list[tuple[str, str, str, dict[str, Any]]] = []
    start = cursor
    # central: arrival numbers are handed out at insert, so a shipment that commits late can land
    # below rows already read; look back over the last LOOKBACK drains (their refs dedupe them)
    cursor = max(0, cursor - LOOKBACK) if getattr(source, "central", False) else cursor
    while True:
        rows = source.query(f"SELECT {_origin(source)} AS host, {pos} AS pos, id, ts, action, target, reason, detail "
                            f"FROM events WHERE {pos} > ? AND action IN ({marks}) AND {trusted} "
                            f"ORDER BY {pos} LIMIT ?",
                            (cursor, *DRAIN_ACTIONS, BATCH))
        if not rows:
            break
        with store.transaction() as db:
            for row in rows:
                cursor = max(cursor, int(row["pos"]))
                out.read += int(row["pos"]) > start
                ref = f"{row['host']}:{row['id']}"
                node = str(row["target"])
                for check_id, detail in _signals(source, row):
                    for fault in classes.classify(check_id, detail):
                        if not fault.opens_incident:
                            out.ignored += 1
                            continue
                        inv = _inventory(source, node, "bmc" if fault.part_kind in BMC_PARTS else fault.part_kind,
                                         inventories) if fault.part_kind in ("gpu", "hca", *BMC_PARTS) else []
                        fref = f"{ref}/{fault.cls}/{fault.slot or fault.pci}"
                        if db.execute("SELECT 1 FROM incident_events WHERE ref=? LIMIT 1", (fref,)).fetchone():
                            out.skipped += 1
                            continue
                        kind, inc = _take(db, node, fault, inv, float(row["ts"]), fref, settings,
                                          _source_of(check_id), str(row["reason"]))
                        if kind == "opened":
                            out.opened += 1
                            opened_audit.append(("repair.open", node, f"{inc.cls} on {inc.part_kind} {inc.part_key}",
                                                 {"incident": inc.id, "class": inc.cls, "part": inc.part_key,
                                                  "rung": inc.rung, "source": inc.source}))
                        else:
                            out.extended += 1
            db.execute("INSERT INTO repair_cursor (name, value, ts) VALUES (?,?,?) ON CONFLICT(name) DO UPDATE "
                       "SET value=excluded.value, ts=excluded.ts", (name, str(max(cursor, start)), now))
        if len(rows) < BATCH or (limit is not None and out.read >= limit):
            break
    cursor = max(cursor, start)
    out.cursor = cursor
    if opened_audit:
        store.audit_many(opened_audit)
    return out


def _take(db, node: str, fault: classes.Fault, inventory: list[dict[str, Any]], ts: float, ref: str, settings,
          source: str, reason: str) -> tuple[str, Incident]:
    """Open an incident for a fault, or extend the open one of the same node, part and class."""
    from . import ladder

    part_key, slot, ident = part_of(node, fault, inventory)
    evidence = {"ts": ts, "kind": "signal", "source": source, "check": fault.check_id, "line": fault.line,
                "reason": reason, "ref": ref}
    if fault.xid is not None:
        evidence["xid"] = fault.xid
    if ident:
        evidence[fault.part_kind] = ident
    row = db.execute("SELECT * FROM incidents WHERE node=? AND part_key=? AND class=? AND state != 'closed' "
                     "ORDER BY opened_ts DESC LIMIT 1", (node, part_key, fault.cls)).fetchone()
    if row is not None:
        inc = Incident.from_row(dict(row))
        inc.evidence = _trim([*inc.evidence, evidence])
        inc.count += 1
        inc.updated_ts = max(inc.updated_ts, ts)
        db.execute("UPDATE incidents SET count=?, evidence=?, updated_ts=? WHERE id=?",
                   (inc.count, json.dumps(inc.evidence, default=str), inc.updated_ts, inc.id))
        _event(db, inc, "extended", ts, why=fault.line, ref=ref)
        return "extended", inc
    prior = [Incident.from_row(dict(r)) for r in db.execute(
        "SELECT * FROM incidents WHERE part_key=? AND class=? AND opened_ts < ? ORDER BY opened_ts",
        (part_key, fault.cls, ts))]
    rung = ladder.start_rung(fault.cls, prior, ts, settings)
    inc = Incident(id=incident_id(node, part_key, fault.cls, ts, ref), node=node, part_kind=fault.part_kind,
                   part_key=part_key, slot=slot, cls=fault.cls, state="open", rung=rung, opened_ts=ts,
                   updated_ts=ts, evidence=[evidence], source=source, serial=ident.get("serial", "") or ident.get("guid", ""),
                   uuid=ident.get("uuid", ""), why=f"opened from {fault.check_id}: {fault.line}")
    db.execute("INSERT INTO incidents (id, node, part_kind, part_key, slot, serial, uuid, class, state, step, outcome, "
               "rung, opened_ts, updated_ts, closed_ts, count, evidence, source, why) "
               "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
               (inc.id, node, inc.part_kind, part_key, slot, inc.serial, inc.uuid, inc.cls, "open", "", "", rung, ts, ts,
                None, 1, json.dumps(inc.evidence, default=str), source, inc.why))
    _event(db, inc, "opened", ts, why=inc.why, ref=ref)
    return "opened", inc


def _trim(evidence: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(evidence) <= EVIDENCE_MAX:
        return evidence
    return evidence[:HISTORY_KEEP] + evidence[-(EVIDENCE_MAX - HISTORY_KEEP):]


def _event(db, inc: Incident, kind: str, ts: float, *, step: str = "", why: str = "", ref: str = "",
           detail: dict[str, Any] | None = None) -> None:
    db.execute("INSERT INTO incident_events (incident_id, ts, kind, state, step, why, detail, ref) VALUES (?,?,?,?,?,?,?,?)",
               (inc.id, ts, kind, inc.state, step, why, json.dumps(detail or {}, default=str), ref))


# ------------------------------------------------------------------------------------ reads

def list_incidents(store, *, node: str | None = None, part_key: str | None = None, since: float | None = None,
                   states: tuple[str, ...] | list[str] | None = None, cls: str | None = None,
                   serial: str | None = None) -> list[Incident]:
    """Incidents, oldest first. `since`: opened at or after; `serial`: by GPU serial or part key."""
    sql, args = "SELECT * FROM incidents WHERE 1=1", []
    for col, val in (("node", node), ("part_key", part_key), ("class", cls)):
        if val is not None:
            sql += f" AND {col} = ?"
            args.append(val)
    if serial is not None:
        sql += " AND (serial = ? OR part_key = ? OR uuid = ?)"
        args += [serial, serial, serial]
    if since is not None:
        sql += " AND opened_ts >= ?"
        args.append(since)
    if states:
        sql += f" AND state IN ({','.join('?' * len(states))})"
        args += list(states)
    sql += " ORDER BY opened_ts, id"
    return [Incident.from_row(r) for r in store.query(sql, args)]


LADDER_RUN_CURSOR = "ladder:last-run"  # repair_cursor row: when an acting `repair run` last began


def mark_ladder_run(store, now: float | None = None) -> None:
    """Note that the ladder runs (an acting `repair run` began): burn-in leaves the drained nodes
    with open incidents to it while this is recent (`ladder_running`)."""
    now = time.time() if now is None else now
    with store.transaction() as db:
        db.execute("INSERT INTO repair_cursor (name, value, ts) VALUES (?,?,?) ON CONFLICT(name) DO UPDATE "
                   "SET value=excluded.value, ts=excluded.ts", (LADDER_RUN_CURSOR, "", now))


def ladder_running(store, within_s: float, now: float | None = None) -> bool:
    """Whether an acting `repair run` began in the last `within_s` seconds (a site that runs
    repair's timer; a site that never does, or whose timer stopped, is not waited for)."""
    now = time.time() if now is None else now
    row = store.db.execute("SELECT ts FROM repair_cursor WHERE name=?", (LADDER_RUN_CURSOR,)).fetchone()
    return row is not None and now - float(row["ts"]) <= within_s


def open_by_node(store) -> dict[str, str]:
    """Node -> its incidents not closed, as one short text (`r1a2b3c4d5e GPU_LOST on GPU0, open`)."""
    from .model import ACTIVE, HELD

    out: dict[str, list[str]] = {}
    for inc in list_incidents(store, states=list(ACTIVE) + list(HELD)):
        where = f"GPU{inc.slot}" if inc.part_kind == "gpu" and inc.slot else inc.part_kind if inc.part_kind == "node" \
            else f"{inc.part_kind} {inc.slot or inc.part_key}"
        out.setdefault(inc.node, []).append(f"{inc.id} {inc.cls} on {where}, {inc.state}")
    return {node: "; ".join(items[:2]) + (f" (+{len(items) - 2} more)" if len(items) > 2 else "")
            for node, items in out.items()}


def get(store, incident_id: str) -> Incident:
    rows = store.query("SELECT * FROM incidents WHERE id=?", (incident_id,))
    if not rows:
        raise UsageError(f"no incident {incident_id!r}")
    return Incident.from_row(rows[0])


def history(store, node: str | None = None, serial: str | None = None) -> list[Incident]:
    """A node's incidents (every part), or a part's across every node it was in (by serial,
    UUID or part key), oldest first."""
    if node is None and serial is None:
        raise UsageError("history: give a node or a serial")
    return list_incidents(store, node=node, serial=serial)


def part_history(store, inc: Incident) -> list[Incident]:
    """What the ladder weighs for one incident: the other incidents of its node and its part."""
    rows = store.query("SELECT * FROM incidents WHERE (node=? OR part_key=?) AND id != ? ORDER BY opened_ts",
                       (inc.node, inc.part_key, inc.id))
    return [Incident.from_row(r) for r in rows]


def events(store, incident_id: str) -> list[dict[str, Any]]:
    out = store.query("SELECT * FROM incident_events WHERE incident_id=? ORDER BY id", (incident_id,))
    for e in out:
        try:
            e["detail"] = json.loads(e["detail"])
        except ValueError:
            pass
    return out


def known_node(store, node: str) -> bool:
    return bool(store.query("SELECT 1 FROM incidents WHERE node=? LIMIT 1", (node,)))


# ------------------------------------------------------------------------------------ writes

def advance(store, incident_id: str, state: str, step: str, *, outcome: str = "", evidence: list[dict[str, Any]] |
            dict[str, Any] | None = None, why: str = "", rung: int | None = None, now: float | None = None) -> Incident:
    """Record that a step was taken (or finished) on an incident: its new state, the step, how it
    went, evidence to keep, why. One incident_events row and one audit event (`repair.<step>`).
    Idempotent for a repeat of the same (state, step, outcome) with no new evidence."""
    if state not in STATES:
        raise UsageError(f"incident state {state!r} is not one of {', '.join(STATES)}")
    now = time.time() if now is None else now
    new = [evidence] if isinstance(evidence, dict) else list(evidence or [])
    with store.transaction() as db:
        row = db.execute("SELECT * FROM incidents WHERE id=?", (incident_id,)).fetchone()
        if row is None:
            raise UsageError(f"no incident {incident_id!r}")
        inc = Incident.from_row(dict(row))
        if (inc.state, inc.step, inc.outcome) == (state, step, outcome) and not new and (rung is None or rung == inc.rung):
            return inc
        entry = {"ts": now, "kind": "step", "step": step, "state": state, "outcome": outcome, "why": why}
        inc.evidence = _trim([*inc.evidence, entry, *new])
        inc.state, inc.step, inc.outcome, inc.updated_ts, inc.why = state, step, outcome, now, why or inc.why
        if rung is not None:
            inc.rung = rung
        if state == "closed" and inc.closed_ts is None:
            inc.closed_ts = now
        db.execute("UPDATE incidents SET state=?, step=?, outcome=?, rung=?, updated_ts=?, closed_ts=?, evidence=?, why=? "
                   "WHERE id=?", (inc.state, inc.step, inc.outcome, inc.rung, now, inc.closed_ts,
                                  json.dumps(inc.evidence, default=str), inc.why, inc.id))
        _event(db, inc, "step", now, step=step, why=why, detail={"outcome": outcome, "rung": inc.rung})
    store.audit(f"repair.{step or state}", inc.node, why or f"{step} {outcome}".strip(), incident=inc.id,
                state=state, step=step, outcome=outcome, rung=inc.rung)
    return inc


def clear(store, node: str, reason: str, *, dry_run: bool = False, now: float | None = None) -> list[Incident]:
    """An admin's manual repair (`repair clear NODE --reason`): every incident of the node not
    closed is closed (step `clear`), audited. Returns those incidents (as they were, for
    --dry-run; as closed, otherwise). The node's drain is the caller's."""
    if not reason.strip():
        raise UsageError("repair clear: --reason is required")
    now = time.time() if now is None else now
    todo = list_incidents(store, node=node, states=[s for s in STATES if s != "closed"])
    if dry_run or not todo:
        return todo
    done: list[Incident] = []
    with store.transaction() as db:
        for inc in todo:
            inc.evidence = _trim([*inc.evidence, {"ts": now, "kind": "cleared", "why": reason}])
            inc.state, inc.step, inc.outcome, inc.closed_ts, inc.updated_ts = "closed", "clear", "ok", now, now
            inc.why = f"cleared: {reason}"
            db.execute("UPDATE incidents SET state='closed', step='clear', outcome='ok', closed_ts=?, updated_ts=?, "
                       "evidence=?, why=? WHERE id=?", (now, now, json.dumps(inc.evidence, default=str), inc.why, inc.id))
            _event(db, inc, "cleared", now, step="clear", why=reason)
            done.append(inc)
    store.audit_many([("repair.clear", node, reason, {"incident": i.id, "class": i.cls, "part": i.part_key})
                      for i in done])
    return done


def record_qualification(store, incident_id: str, node: str, *, job_id: str = "", status: str = "running",
                         evidence: list[dict[str, Any]] | None = None, now: float | None = None,
                         qual_id: str | None = None) -> str:
    """Insert or update one qualification run (`<incident>-q<n>`); returns its id."""
    now = time.time() if now is None else now
    with store.transaction() as db:
        if qual_id is None:
            n = db.execute("SELECT count(*) FROM qualifications WHERE incident_id=?", (incident_id,)).fetchone()[0]
            qual_id = f"{incident_id}-q{int(n) + 1}"
            db.execute("INSERT INTO qualifications (id, incident_id, node, job_id, started, finished, status, evidence) "
                       "VALUES (?,?,?,?,?,?,?,?)", (qual_id, incident_id, node, job_id, now,
                                                     None if status == "running" else now, status,
                                                     json.dumps(evidence or [], default=str)))
        else:
            db.execute("UPDATE qualifications SET status=?, finished=?, job_id=COALESCE(NULLIF(?, ''), job_id), "
                       "evidence=? WHERE id=?", (status, None if status == "running" else now, job_id,
                                                 json.dumps(evidence or [], default=str), qual_id))
    return qual_id


def replaced_at(evidence: list[dict[str, Any]]) -> float | None:
    """When the incident's part was replaced under an RMA (`rma replaced`: a step entry, then
    {"rma", "new_part"}), from its evidence; None when it was not."""
    when = None
    last_ts = None
    for e in evidence:
        if isinstance(e, dict) and "ts" in e:
            try:
                last_ts = float(e["ts"])
            except (TypeError, ValueError):
                pass
        if isinstance(e, dict) and e.get("new_part") is not None and last_ts is not None:
            when = last_ts
    return when


# SQL over `qualifications q JOIN incidents i`: the qualification started after the last `repair
# clear` of its node (an admin's manual repair is a fresh start for what failed before it)
SINCE_CLEAR_SQL = ("q.started >= COALESCE((SELECT MAX(c.closed_ts) FROM incidents c WHERE c.node = i.node "
                   "AND c.step = 'clear'), 0)")


def failed_qualifications(store, *, node: str | None = None, part_key: str | None = None) -> int:
    """Failed qualifications (of `node`'s or `part_key`'s incidents, any window) that still speak
    against it: not those of a part replaced under an RMA after them (they were the old part's,
    now at the vendor), nor those before the node's last `repair clear`."""
    sql = ("SELECT q.started AS started, i.evidence AS evidence FROM qualifications q "
           f"JOIN incidents i ON q.incident_id = i.id WHERE q.status = 'failed' AND {SINCE_CLEAR_SQL}")
    args: list[Any] = []
    if node is not None:
        sql += " AND i.node = ?"
        args.append(node)
    if part_key is not None:
        sql += " AND i.part_key = ?"
        args.append(part_key)
    n = 0
    for r in store.query(sql, args):
        try:
            evidence = json.loads(r["evidence"] or "[]")
        except ValueError:
            evidence = []
        gone = replaced_at(evidence if isinstance(evidence, list) else [])
        if gone is not None and float(r["started"]) < gone:
            continue
        n += 1
    return n


# ---- burn-in passes: what one proves (read by `repair run`'s close step and `repair status`)

def burnin_passes(store, nodes) -> dict[str, tuple[float, str]]:
    """Node -> (when it began, id) of the latest burn-in sweep that passed it (the head's store,
    where `burnin run` records its sweeps)."""
    wanted = sorted(set(nodes))
    if not wanted:
        return {}
    rows = store.query("SELECT n.node AS node, s.started AS started, s.id AS id FROM burnin_nodes n "
                       "JOIN burnin_sweeps s ON s.id = n.sweep_id WHERE n.verdict = 'pass' "
                       f"AND n.node IN ({','.join('?' * len(wanted))})", tuple(wanted))
    out: dict[str, tuple[float, str]] = {}
    for r in rows:
        began = float(r["started"])
        if r["node"] not in out or began > out[r["node"]][0]:
            out[str(r["node"])] = (began, str(r["id"]))
    return out


def burnin_closable(incs: list, passed: tuple[float, str] | None) -> list:
    """The incidents of one node that a burn-in pass closes: open, not acted on by the ladder yet
    (no step), of a class burn-in's tests prove (classes.toml `burnin_closes`), and whose last
    signal came before the passing sweep began."""
    if passed is None:
        return []
    known = classes.classes()
    began = passed[0]
    return [i for i in incs if i.state == "open" and not i.step and getattr(known.get(i.cls), "burnin_closes", False)
            and float(i.updated_ts) < began]


def close_why(closable: list, passed: tuple[float, str]) -> str:
    what = ", ".join(f"{i.cls} {i.id}" for i in closable)
    return f"passed burn-in sweep {passed[1]}, begun after the last signal of {what}"
