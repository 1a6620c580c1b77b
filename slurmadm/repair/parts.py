"""The parts inventory: which GPU, HCA, board, PSU or fan sat in which slot of which node, and when.

Nothing here reads hardware. The inventory is derived on the head from what is already recorded:

- health runs keep each node's GPU identity (`node_state` `health.gpus`: index, PCI bus id, NVML
  serial, UUID; the gpu-count check) and HCA identity (`health.hca-ids`:
  node GUID, firmware, PSID from sysfs `board_id`; the infiniband check writes `health.hca-ids`);
- `bmc inventory` keeps each BMC's answer (`node_state` `bmc.inventory`: the board's FRU serial,
  PSUs and fans from the IPMI FRU locators or Redfish PowerSupplies/Fans).

Each stay of a part in a slot is one `parts` row (installed, seen, removed). When a slot shows a
different serial, the old stay ends and a new one starts: an audited `repair.part.swapped` with
both serials (`refresh`, idempotent: a second call finds nothing new). A serial that shows up
in another node ends its stay in the first (`repair.part.moved`): its history (stays, incidents,
RMA cases) follows the serial, not the node.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UsageError

KINDS = ("gpu", "hca", "board", "psu", "fan")
GPU_STATE = "health.gpus"      # slurmadm/health/checks.py GPU_IDS under NodeState's prefix
HCA_STATE = "health.hca-ids"   # slurmadm/health/nodechecks.py HCA_IDS (health.hcas: repair-core's GUIDs)
BMC_STATE = "bmc.inventory"    # slurmadm/bmc/ops.py INVENTORY_KEY


@dataclass(frozen=True)
class Seen:
    """One part seen in one slot (an observation read back from the store)."""

    node: str
    kind: str
    slot: str
    part_key: str
    attrs: dict = field(default_factory=dict, compare=False, hash=False)
    source: str = ""
    ts: float = 0.0
    keyed: bool = True  # the key is a serial/UUID/GUID (a swap can be told); else node:slot


@dataclass
class Change:
    """A swap (another part in a slot) or a move (a part seen in another node's slot)."""

    what: str           # swapped | moved
    node: str
    kind: str
    slot: str
    old: str            # the part that left (swapped), or the node it left (moved)
    new: str            # the part now there (swapped), or the node it went to (moved)
    ts: float
    attrs: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------ reading observations


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def parse_gpus(node: str, text: str, ts: float) -> list[Seen]:
    """The GPUs of a `health.gpus` record (or fleet fact `gpus`). The slot is the PCI bus id (NVML
    renumbers the indexes when a GPU falls off the bus; the index is kept as an attribute), else
    `index:<n>`. A GPU not enumerated now (`present` false) tells nothing about its slot."""
    out = []
    for g in _loads(text) or []:
        if not isinstance(g, dict) or "index" not in g or g.get("present") is False:
            continue
        key = str(g.get("serial") or g.get("uuid") or "")
        if not key:
            continue  # a GPU without identity (lost handle): nothing to tell a swap by
        attrs = {k: g[k] for k in ("index", "uuid", "serial", "bus_id", "board_part", "vbios", "name")
                 if g.get(k) not in (None, "")}
        slot = str(g.get("bus_id") or f"index:{g['index']}").lower()
        out.append(Seen(node, "gpu", slot, key, attrs, "health", ts))
    return out


def parse_hcas(node: str, text: str, ts: float) -> list[Seen]:
    out = []
    for h in _loads(text) or []:
        if not isinstance(h, dict) or not h.get("hca") or not h.get("guid"):
            continue
        attrs = {k: h[k] for k in ("guid", "firmware", "psid", "port") if h.get(k) not in (None, "")}
        out.append(Seen(node, "hca", str(h["hca"]), str(h["guid"]), attrs, "health", ts))
    return out


def parse_bmc(node: str, text: str, ts: float) -> list[Seen]:
    inv = _loads(text)
    if not isinstance(inv, dict):
        return []
    out = []
    serial = str(inv.get("board_serial") or inv.get("serial") or "")
    if serial:
        attrs = {k: str(inv[k]) for k in ("model", "manufacturer", "board", "serial", "bmc_firmware",
                                          "bios_firmware") if inv.get(k)}
        out.append(Seen(node, "board", "board", serial, attrs, "bmc", ts))
    for plural, kind in (("psus", "psu"), ("fans", "fan")):
        for p in inv.get(plural) or []:
            if not isinstance(p, dict) or not p.get("name"):
                continue
            name = str(p["name"])
            slot = str(p.get("id") or name)
            serial = str(p.get("serial") or "")
            attrs = {k: str(v) for k, v in p.items() if k not in ("serial",) and v not in (None, "")}
            if serial:
                attrs["serial"] = serial
            out.append(Seen(node, kind, slot, serial or f"{node}:{slot}", attrs, "bmc", ts, keyed=bool(serial)))
    return out


_PARSERS = {GPU_STATE: parse_gpus, HCA_STATE: parse_hcas, BMC_STATE: parse_bmc}


def observations(source, nodes: list[str] | None = None) -> list[Seen]:
    """Every part the store's records show, oldest record first. `source`: a local Store or a
    store.read Reader (the central store: only rows a node shipped about itself, or the head's)."""
    from ..store.read import trusted_sql

    keys = tuple(_PARSERS)
    sql = (f"SELECT node, key, value, ts FROM node_state WHERE key IN ({','.join('?' * len(keys))}) "
           f"AND {trusted_sql(source)}")
    args: list[Any] = list(keys)
    if nodes:
        sql += f" AND node IN ({','.join('?' * len(nodes))})"
        args += nodes
    out: list[Seen] = []
    for r in source.query(sql + " ORDER BY ts", args):
        out += _PARSERS[r["key"]](r["node"], r["value"], float(r["ts"]))
    # fleet facts: the GPUs as `nvidia-smi -q` listed them (fleet/collector.py parse_smi_gpus)
    sql = f"SELECT node, value, ts FROM fleet_facts WHERE fact='gpus' AND {trusted_sql(source)}"
    args = []
    if nodes:
        sql += f" AND node IN ({','.join('?' * len(nodes))})"
        args += nodes
    for r in source.query(sql, args):
        out += [Seen(o.node, o.kind, o.slot, o.part_key, o.attrs, "fleet", o.ts, o.keyed)
                for o in parse_gpus(r["node"], r["value"], float(r["ts"]))]
    return sorted(out, key=lambda o: o.ts)


# ------------------------------------------------------------------------------- the inventory


def refresh(store, source=None, *, nodes: list[str] | None = None) -> list[Change]:
    """Bring the `parts` table up to what the records show; audit each swap and move. Returns
    the changes found (none on a second call). `source`: where the records are (default: store)."""
    seen = observations(source if source is not None else store, nodes)
    if not seen:
        return []
    changes: list[Change] = []
    with store.transaction() as db:
        current = {(r["node"], r["kind"], r["slot"]): dict(r) for r in db.execute(
            "SELECT * FROM parts WHERE removed IS NULL")}
        where = {}  # part_key -> (node, kind, slot) of its open stay (keyed parts only)
        for k, r in current.items():
            where.setdefault(r["part_key"], k)
        last_closed = {}
        for r in db.execute("SELECT node, kind, slot, part_key, removed FROM parts WHERE removed IS NOT NULL "
                            "ORDER BY removed"):
            last_closed[(r["node"], r["kind"], r["slot"], r["part_key"])] = r["removed"]
        for o in seen:
            slot = (o.node, o.kind, o.slot)
            cur = current.get(slot)
            attrs = json.dumps(o.attrs, sort_keys=True)
            if cur is not None and cur["part_key"] == o.part_key:
                attrs = json.dumps({**(_loads(cur["attrs"]) or {}), **o.attrs}, sort_keys=True)  # both sources
                if o.ts > cur["seen"] or attrs != cur["attrs"]:
                    db.execute("UPDATE parts SET seen=?, attrs=?, source=? WHERE id=?",
                               (max(o.ts, cur["seen"]), attrs, o.source, cur["id"]))
                    cur.update(seen=max(o.ts, cur["seen"]), attrs=attrs)
                continue
            # a record older than what is known: this part left this slot (or the node) since
            if o.ts <= last_closed.get((o.node, o.kind, o.slot, o.part_key), float("-inf")):
                continue
            if cur is not None and o.ts < cur["installed"]:
                continue
            other = where.get(o.part_key) if o.keyed else None
            if other is not None and other != slot and current[other]["installed"] >= o.ts:
                continue  # it sits elsewhere since after this record
            if cur is not None:
                db.execute("UPDATE parts SET removed=? WHERE id=?", (o.ts, cur["id"]))
                last_closed[(o.node, o.kind, o.slot, cur["part_key"])] = o.ts
                where.pop(cur["part_key"], None)
                if o.keyed:
                    changes.append(Change("swapped", o.node, o.kind, o.slot, cur["part_key"], o.part_key, o.ts,
                                          {"old": _loads(cur["attrs"]) or {}, "new": o.attrs}))
            if other is not None and other != slot:
                moved = current.pop(other)
                db.execute("UPDATE parts SET removed=? WHERE id=?", (o.ts, moved["id"]))
                last_closed[(*other, o.part_key)] = o.ts
                changes.append(Change("moved", o.node, o.kind, o.slot, other[0], o.node, o.ts,
                                      {"part_key": o.part_key, "from_slot": other[2]}))
            rid = db.execute("INSERT INTO parts (node, kind, slot, part_key, attrs, source, installed, seen) "
                             "VALUES (?,?,?,?,?,?,?,?)",
                             (o.node, o.kind, o.slot, o.part_key, attrs, o.source, o.ts, o.ts)).lastrowid
            current[slot] = {"id": rid, "node": o.node, "kind": o.kind, "slot": o.slot, "part_key": o.part_key,
                             "attrs": attrs, "installed": o.ts, "seen": o.ts}
            if o.keyed:
                where[o.part_key] = slot
    events = []
    for c in changes:
        if c.what == "swapped":
            events.append(("repair.part.swapped", c.node, f"{c.kind} {c.attrs.get('new', {}).get('index', c.slot)}: {c.old} -> {c.new}",
                           {"kind": c.kind, "slot": c.slot, "old": c.old, "new": c.new, "seen": c.ts,
                            "old_attrs": c.attrs.get("old", {}), "new_attrs": c.attrs.get("new", {})}))
        else:
            events.append(("repair.part.moved", c.new, f"{c.kind} {c.attrs['part_key']}: {c.old} -> {c.new}",
                           {"kind": c.kind, "part_key": c.attrs["part_key"], "from_node": c.old,
                            "from_slot": c.attrs["from_slot"], "slot": c.slot, "seen": c.ts}))
    if events:
        store.audit_many(events)
    return changes


def _row(r: dict) -> dict:
    return {"node": r["node"], "kind": r["kind"], "slot": r["slot"], "part_key": r["part_key"],
            "attrs": _loads(r["attrs"]) or {}, "source": r["source"], "installed": r["installed"],
            "seen": r["seen"], "removed": r["removed"]}


def _slot_order(r: dict) -> tuple:
    slot = str(r["attrs"].get("index", r["slot"]))
    return (r["node"], KINDS.index(r["kind"]) if r["kind"] in KINDS else 9,
            (0, int(slot), "") if slot.isdigit() else (1, 0, slot), r["installed"])


def inventory(store, node: str | None = None, *, history: bool = False) -> list[dict]:
    """The parts in each slot now (history: every stay, removed ones too), by node and slot."""
    sql = "SELECT * FROM parts WHERE 1=1"
    args: list[Any] = []
    if node:
        sql += " AND node=?"
        args.append(node)
    if not history:
        sql += " AND removed IS NULL"
    return sorted((_row(r) for r in store.query(sql, args)), key=_slot_order)


def known_node(store, node: str) -> bool:
    return bool(store.query("SELECT 1 FROM parts WHERE node=? LIMIT 1", (node,)))


def stays(store, part_key: str) -> list[dict]:
    """Every slot the part sat in, oldest first."""
    return [_row(r) for r in store.query("SELECT * FROM parts WHERE part_key=? ORDER BY installed", (part_key,))]


def current(store, node: str, kind: str, slot: str) -> dict | None:
    rows = store.query("SELECT * FROM parts WHERE node=? AND kind=? AND slot=? AND removed IS NULL",
                       (node, kind, str(slot)))
    return _row(rows[0]) if rows else None


def find_part(store, part_key: str) -> dict | None:
    """The part's current stay (else its last one)."""
    rows = store.query("SELECT * FROM parts WHERE part_key=? ORDER BY removed IS NULL DESC, installed DESC LIMIT 1",
                       (part_key,))
    return _row(rows[0]) if rows else None


def incidents_of(store, part_key: str, node: str | None = None, slot: str | None = None) -> list[dict]:
    """The part's incidents (repair-core's incident model), on whichever node it sat. Empty when
    the incident model is not installed. Matched by part key (GPU serial, else UUID) and, for a
    GPU whose incidents were keyed by UUID or slot, by those on the nodes it sat in."""
    try:
        from . import incidents as incmod
    except ImportError:
        return []
    keys = {part_key}
    for s in stays(store, part_key):
        if s["attrs"].get("uuid"):
            keys.add(s["attrs"]["uuid"])
        if s["attrs"].get("guid"):
            keys.add(s["attrs"]["guid"])
            keys.add(f"{s['attrs']['guid']}:{s['attrs'].get('port', 1)}")  # repair-core's HCA port key
    out: dict[Any, dict] = {}
    for k in keys:
        for inc in incmod.list_incidents(store, part_key=k):
            d = _as_dict(inc)
            out[d.get("id", id(inc))] = d
    for s in stays(store, part_key):  # keyed by slot while the part sat there (no serial at the time)
        for inc in incmod.list_incidents(store, node=s["node"]):
            d = _as_dict(inc)
            if d.get("part_key") == f"slot:{s['attrs'].get('index', s['slot'])}" and _during(d, s):
                out[d.get("id", id(inc))] = d
    return sorted(out.values(), key=lambda d: d.get("opened_ts") or 0)


def _during(inc: dict, stay: dict) -> bool:
    t = inc.get("opened_ts") or 0
    return stay["installed"] <= t and (stay["removed"] is None or t <= stay["removed"])


def _as_dict(obj: Any) -> dict:
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "to_json"):
        return obj.to_json()
    try:
        return asdict(obj)
    except TypeError:
        return dict(vars(obj))


def resolve(store, node: str, *, gpu: int | None = None, part: str | None = None) -> dict:
    """The part an RMA names: GPU N of NODE, a serial (or UUID/GUID) on NODE, or the node's
    board. One-line UsageError for an unknown node, GPU or serial."""
    if not known_node(store, node):
        raise UsageError(f"{node}: no parts recorded for this node (unknown node, or no health run or "
                         "`bmc inventory` recorded yet)")
    if gpu is not None:
        row = next((r for r in inventory(store, node) if r["kind"] == "gpu" and r["attrs"].get("index") == gpu), None)
        if row is None:
            raise UsageError(f"{node}: no GPU {gpu} recorded")
        return row
    if part:
        for r in inventory(store, node):
            if part in (r["part_key"], r["attrs"].get("uuid"), r["attrs"].get("serial"), r["attrs"].get("guid")):
                return r
        raise UsageError(f"{node}: no part {part} recorded in this node")
    row = current(store, node, "board", "board")
    if row is None:
        raise UsageError(f"{node}: name the part (--gpu N or --part SERIAL)")
    return row
