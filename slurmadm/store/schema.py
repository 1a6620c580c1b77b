"""The store's schema: one explicit, versioned list of tables (no import side effects).

Every table slurmadm keeps is one `Table` entry in `TABLES` below, written as SQLite DDL (the
local store on every host). The central store (MariaDB, or a shared SQLite file) gets the same
tables with an `origin` column (the host the record came from), an arrival `seq`, and a unique key
on (origin, the row's local key), so a record shipped twice is stored once; its DDL is derived from
the SQLite DDL (`central_ddl`), never written twice.

To add a table: append one `Table(...)` with `since=` the next version (SCHEMA_VERSION follows).
To change one: add a `Migration` for the next version with the statements for each dialect.
The local store migrates itself when opened; the central store with `slurmadm store migrate`.
A store whose version is newer than this slurmadm's is refused with a clear message.
"""

from __future__ import annotations

import sqlite3
from dataclasses import field

from ..record import record

# ------------------------------------------------------------------------------------ tables


@record(frozen=True)
class Table:
    """One table of the store: its SQLite DDL and how it ships."""

    name: str
    ddl: str                      # SQLite: CREATE TABLE IF NOT EXISTS ...; CREATE INDEX IF NOT EXISTS ...
    since: int = 1                # the schema version that added it
    where: str = "both"           # both | local | central
    # Natural key of a row, for the central upsert. A row updated locally (an upsert, a finished
    # sweep) is shipped again and replaces its central copy. () = an append-only table keyed by
    # its local row id (its INTEGER PRIMARY KEY column, else a `local_id` column centrally) and
    # the local store's `store_id`, so a node whose store file was recreated (ids from 1 again)
    # never overwrites what it shipped before.
    key: tuple[str, ...] = ()
    retain: str | None = None     # timestamp column: shipped rows older than store.keep_days are pruned locally
    # Rows are never changed once written (audit events): shipped with INSERT IGNORE, and the
    # central store refuses an UPDATE of one (only the head's prune may DELETE).
    append_only: bool = False

    @property
    def shipped(self) -> bool:
        return self.where == "both"

    @property
    def insert_only(self) -> bool:
        """Shipped with INSERT IGNORE (a row shipped again stays as it is): audit events, and
        the tables keyed by local row id, whose rows are never changed once written."""
        return self.append_only or not self.key


TABLES: list[Table] = [
    # ---- audit events (Store.audit) ----
    Table("events", """
CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY,
    ts      REAL NOT NULL,
    actor   TEXT NOT NULL,      -- who: the real user behind sudo, or the daemon context
    action  TEXT NOT NULL,      -- what: e.g. node.drain, accounts.add-account, config.apply
    target  TEXT NOT NULL,      -- on what: a node, an account, a file
    reason  TEXT NOT NULL,      -- why
    detail  TEXT NOT NULL,      -- JSON
    prev_hash TEXT NOT NULL DEFAULT '',  -- version 4: the hash of this store's previous event
    hash    TEXT NOT NULL DEFAULT ''     -- sha256 over prev_hash and this event (store/chain.py)
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_target ON events(target, ts);
""", retain="ts", append_only=True),
    # ---- health check results (health/record.py) ----
    Table("check_results", """
CREATE TABLE IF NOT EXISTS check_results (
    id       INTEGER PRIMARY KEY,
    ts       REAL NOT NULL,
    run_id   TEXT NOT NULL,
    node     TEXT NOT NULL,
    context  TEXT NOT NULL,
    check_id TEXT NOT NULL,
    status   TEXT NOT NULL,     -- pass | fail | warn | error | skip
    severity TEXT NOT NULL,
    detail   TEXT NOT NULL,
    value    REAL,
    duration_ms REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS check_results_node ON check_results(node, check_id, ts);
""", retain="ts"),
    # ---- small per-node state: counters, clean-run counts, last alerts ----
    Table("node_state", """
CREATE TABLE IF NOT EXISTS node_state (
    node  TEXT NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    ts    REAL NOT NULL,
    PRIMARY KEY (node, key)
);
""", key=("node", "key")),
    # ---- burn-in history (burnin/history.py): one row per sweep, per node tested, per pair run ----
    Table("burnin_sweeps", """
CREATE TABLE IF NOT EXISTS burnin_sweeps (
    id        TEXT PRIMARY KEY,     -- 20261129-013000
    started   REAL NOT NULL,
    finished  REAL,
    status    TEXT NOT NULL,        -- running | done | interrupted | timed-out | failed
    pid       INTEGER NOT NULL,
    host      TEXT NOT NULL,
    actor     TEXT NOT NULL,
    nodes     TEXT NOT NULL,        -- hostlist of the nodes tested
    passed    INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    skipped   INTEGER NOT NULL DEFAULT 0,
    report    TEXT NOT NULL DEFAULT '',
    summary   TEXT NOT NULL DEFAULT '{}'   -- the JSON summary
);
CREATE INDEX IF NOT EXISTS burnin_sweeps_started ON burnin_sweeps(started);
""", key=("id",)),
    Table("burnin_nodes", """
CREATE TABLE IF NOT EXISTS burnin_nodes (
    sweep_id  TEXT NOT NULL,
    node      TEXT NOT NULL,
    why       TEXT NOT NULL,        -- named | requalify | idle
    verdict   TEXT NOT NULL,        -- pass | fail | skipped
    job_id    TEXT NOT NULL DEFAULT '',
    busbw     REAL,                 -- single-node all-reduce bus bandwidth, GB/s
    action    TEXT NOT NULL DEFAULT '',
    reason    TEXT NOT NULL DEFAULT '',
    tests     TEXT NOT NULL DEFAULT '[]',
    ts        REAL NOT NULL,
    PRIMARY KEY (sweep_id, node)
);
CREATE INDEX IF NOT EXISTS burnin_nodes_node ON burnin_nodes(node, ts);
""", key=("sweep_id", "node")),
    Table("burnin_pairs", """
CREATE TABLE IF NOT EXISTS burnin_pairs (
    sweep_id  TEXT NOT NULL,
    round     INTEGER NOT NULL,
    kind      TEXT NOT NULL,
    node_a    TEXT NOT NULL,
    node_b    TEXT NOT NULL,
    status    TEXT NOT NULL,
    busbw     REAL,
    detail    TEXT NOT NULL DEFAULT '',
    job_id    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS burnin_pairs_sweep ON burnin_pairs(sweep_id);
"""),
    # ---- burn-in baselines per hardware profile (burnin/history.py, `burnin baseline`), version 4 ----
    Table("burnin_baselines", """
CREATE TABLE IF NOT EXISTS burnin_baselines (
    profile  TEXT NOT NULL,         -- hardware profile (nodes.profile of the site)
    metric   TEXT NOT NULL,         -- burnin/fleet.py METRICS id
    median   REAL NOT NULL,
    mad      REAL NOT NULL DEFAULT 0,
    nodes    INTEGER NOT NULL DEFAULT 0,
    source   TEXT NOT NULL,         -- sweep <id> | file <path> | set by hand
    ts       REAL NOT NULL,
    PRIMARY KEY (profile, metric)
);
""", since=4, key=("profile", "metric")),
    # ---- shipping (store/ship.py), version 2 ----
    # Local: what is still to ship, in order (filled by triggers while store.url is set).
    Table("outbox", """
CREATE TABLE IF NOT EXISTS outbox (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl  TEXT NOT NULL,
    rid  INTEGER NOT NULL            -- rowid of the row in tbl
);
""", since=2, where="local"),
    # Local: this store file's identity (store_id: random, made with the file).
    Table("store_info", """
CREATE TABLE IF NOT EXISTS store_info (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
""", since=2, where="local"),
    # Central: one row per host that ships; a host silent for longer than store.stale_after_minutes
    # is reported by `store status` and `health status`.
    Table("hosts", """
CREATE TABLE IF NOT EXISTS hosts (
    host         TEXT PRIMARY KEY,
    last_arrival REAL NOT NULL,      -- when its last shipment (or heartbeat) landed
    last_record  REAL,               -- newest record timestamp it shipped
    records      INTEGER NOT NULL DEFAULT 0,
    version      TEXT NOT NULL DEFAULT ''
);
""", since=2, where="central"),
    # fleet (slurmadm/fleet/): each node's latest software facts, and rollouts with per-node progress
    Table("fleet_facts", """
CREATE TABLE IF NOT EXISTS fleet_facts (
    node  TEXT NOT NULL,
    fact  TEXT NOT NULL,      -- driver, nccl, file:/etc/slurm/slurm.conf, pkg:<name>, ...
    value TEXT NOT NULL,
    ts    REAL NOT NULL,      -- when it was collected
    PRIMARY KEY (node, fact)
);
""", since=3, key=("node", "fact")),
    Table("fleet_rollouts", """
CREATE TABLE IF NOT EXISTS fleet_rollouts (
    id       TEXT PRIMARY KEY,   -- the plan's name
    plan_sha TEXT NOT NULL,      -- sha256 of the plan: a changed plan is a new rollout
    plan     TEXT NOT NULL,      -- JSON
    state    TEXT NOT NULL,      -- running | stopped | done | failed
    detail   TEXT NOT NULL,
    started  REAL NOT NULL,
    updated  REAL NOT NULL
);
""", since=3, key=("id",)),
    Table("fleet_rollout_nodes", """
CREATE TABLE IF NOT EXISTS fleet_rollout_nodes (
    rollout TEXT NOT NULL,
    node    TEXT NOT NULL,
    wave    INTEGER NOT NULL,    -- 0: canary
    phase   TEXT NOT NULL,       -- pending, draining, steps, rebooting, verifying, done, failed, skipped
    detail  TEXT NOT NULL,
    ts      REAL NOT NULL,
    PRIMARY KEY (rollout, node)
);
""", since=3, key=("rollout", "node")),
    # Central, version 4 (least privilege): each compute node's own account and the origin
    # MariaDB records on every row that account inserts (triggers; `slurmadm store grants`).
    Table("store_accounts", """
CREATE TABLE IF NOT EXISTS store_accounts (
    account TEXT PRIMARY KEY,        -- the MariaDB user name
    origin  TEXT NOT NULL            -- the node it is
);
""", since=4, where="central"),
    # Central, version 4: where `store prune` cut each audit chain (its newest removed event), so
    # `audit verify` tells a prune from events removed by someone else.
    Table("event_anchors", """
CREATE TABLE IF NOT EXISTS event_anchors (
    origin   TEXT NOT NULL,
    store_id TEXT NOT NULL,
    id       INTEGER NOT NULL,      -- the newest event removed
    hash     TEXT NOT NULL,         -- its hash: the next event's prev_hash
    ts       REAL NOT NULL,         -- when it was pruned
    PRIMARY KEY (origin, store_id)
);
""", since=4, where="central"),
    # ---- repair (slurmadm/repair/, issue 34), version 5: incidents kept by node and part ----
    # One row per fault of one part, from its first signal to its end; changed as the ladder
    # moves it (shipped again and replaced centrally: keyed by its id, made by the head).
    Table("incidents", """
CREATE TABLE IF NOT EXISTS incidents (
    id         TEXT PRIMARY KEY,    -- r<10 hex>: made once, from node, part, class and open time
    node       TEXT NOT NULL,
    part_kind  TEXT NOT NULL,       -- gpu | hca | board | psu | fan | node | leaf
    part_key   TEXT NOT NULL,       -- GPU serial (else uuid, else slot:<i>); hca dev/port; FRU serial; sensor
    slot       TEXT NOT NULL DEFAULT '',
    serial     TEXT NOT NULL DEFAULT '',
    uuid       TEXT NOT NULL DEFAULT '',
    class      TEXT NOT NULL,       -- repair/data/classes.toml
    state      TEXT NOT NULL,       -- open | resetting | rebooting | qualifying | rma | lemon | closed
    step       TEXT NOT NULL DEFAULT '',
    outcome    TEXT NOT NULL DEFAULT '',  -- of the last step: '' | running | ok | failed
    rung       INTEGER NOT NULL DEFAULT 0,
    opened_ts  REAL NOT NULL,
    updated_ts REAL NOT NULL,
    closed_ts  REAL,
    count      INTEGER NOT NULL DEFAULT 1,  -- signals seen (the first and its repeats)
    evidence   TEXT NOT NULL DEFAULT '[]',  -- JSON list
    source     TEXT NOT NULL DEFAULT '',    -- health | bmc | burnin | bmc-recover | webhook | admin
    why        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS incidents_node ON incidents(node, opened_ts);
CREATE INDEX IF NOT EXISTS incidents_part ON incidents(part_key, class, opened_ts);
CREATE INDEX IF NOT EXISTS incidents_state ON incidents(state);
""", since=5, key=("id",)),
    # What happened to an incident, in order (opened, extended, each step, cleared); `ref` names
    # the source record an ingested signal came from, so a second ingest adds nothing.
    Table("incident_events", """
CREATE TABLE IF NOT EXISTS incident_events (
    id          INTEGER PRIMARY KEY,
    incident_id TEXT NOT NULL,
    ts          REAL NOT NULL,
    kind        TEXT NOT NULL,      -- opened | extended | step | cleared
    state       TEXT NOT NULL,
    step        TEXT NOT NULL DEFAULT '',
    why         TEXT NOT NULL DEFAULT '',
    detail      TEXT NOT NULL DEFAULT '{}',
    ref         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS incident_events_incident ON incident_events(incident_id, id);
CREATE INDEX IF NOT EXISTS incident_events_ref ON incident_events(ref);
""", since=5),
    # Qualification runs (the gate before a node returns; written by `repair run`).
    Table("qualifications", """
CREATE TABLE IF NOT EXISTS qualifications (
    id          TEXT PRIMARY KEY,   -- <incident id>-q<n>
    incident_id TEXT NOT NULL,
    node        TEXT NOT NULL,
    job_id      TEXT NOT NULL DEFAULT '',
    started     REAL NOT NULL,
    finished    REAL,
    status      TEXT NOT NULL,      -- running | passed | failed
    evidence    TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS qualifications_node ON qualifications(node, started);
""", since=5, key=("id",)),
    # Local: how far ingest has read each source (audit events by id locally, by seq centrally).
    Table("repair_cursor", """
CREATE TABLE IF NOT EXISTS repair_cursor (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    ts    REAL NOT NULL
);
""", since=5, where="local"),
    # ---- end of repair (v5); v6 (parts) and v7 (cost) append below ----
    # ---- version 6: parts and RMA cases (slurmadm/repair/parts.py, rma.py) ----
    # Which part sat in which slot of which node, and when: one row per stay. Derived on the head
    # from what health runs (node_state health.gpus / health.hcas), `bmc inventory`
    # (node_state bmc.inventory) and fleet facts recorded; a changed serial in a slot closes
    # the row (removed) and opens another (an audited `repair.part.swapped`).
    Table("parts", """
CREATE TABLE IF NOT EXISTS parts (
    id        INTEGER PRIMARY KEY,
    node      TEXT NOT NULL,
    kind      TEXT NOT NULL,        -- gpu | hca | board | psu | fan
    slot      TEXT NOT NULL,        -- gpu: index; hca: device (mlx5_0); board: board; psu/fan: FRU/Redfish name
    part_key  TEXT NOT NULL,        -- GPU NVML serial (else UUID); HCA node GUID; board/psu/fan serial (else node:slot)
    attrs     TEXT NOT NULL DEFAULT '{}',  -- JSON: uuid, bus_id, board_part, vbios, firmware, psid, model, ...
    source    TEXT NOT NULL,        -- health | bmc | fleet
    installed REAL NOT NULL,        -- first seen in this slot
    seen      REAL NOT NULL,        -- last seen there
    removed   REAL                  -- when another part was seen in its place (NULL: still there)
);
CREATE INDEX IF NOT EXISTS parts_slot ON parts(node, kind, slot, removed);
CREATE INDEX IF NOT EXISTS parts_key ON parts(part_key);
""", since=6, key=("node", "kind", "slot", "installed")),
    # One vendor RMA case per part (`repair rma open`): its state and when it entered each.
    Table("rma_cases", """
CREATE TABLE IF NOT EXISTS rma_cases (
    ticket    TEXT PRIMARY KEY,     -- the vendor's case id
    node      TEXT NOT NULL,
    kind      TEXT NOT NULL,        -- gpu | hca | board | psu | fan
    slot      TEXT NOT NULL,
    part_key  TEXT NOT NULL,        -- the failed part
    model     TEXT NOT NULL DEFAULT '',   -- e.g. NVIDIA B200 (board part number when known)
    class     TEXT NOT NULL DEFAULT '',   -- the incident class that sent it (RMA, ECC, ...)
    state     TEXT NOT NULL,        -- open | shipped | replaced | qualifying | closed
    fault_ts  REAL,                 -- the part's first incident (or first failing check)
    opened    REAL NOT NULL,
    updated   REAL NOT NULL,
    closed    REAL,
    new_key   TEXT NOT NULL DEFAULT '',   -- the replacement part
    bundle    TEXT NOT NULL DEFAULT '',   -- evidence bundle path
    times     TEXT NOT NULL DEFAULT '{}', -- JSON: state -> [entered ts, left ts or null]
    note      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS rma_cases_part ON rma_cases(part_key, state);
""", since=6, key=("ticket",)),
    # ---- cost (issue 36), version 7: which GPUs each job held on each node (the prolog's GPU ->
    # job map, kept past the job's end), so `jobs failures` blames a run only for its own GPUs ----
    Table("job_gpus", """
CREATE TABLE IF NOT EXISTS job_gpus (
    node   TEXT NOT NULL,
    job_id TEXT NOT NULL,
    gpus   TEXT NOT NULL,   -- JSON list of GPU indexes (SLURM_JOB_GPUS)
    ts     REAL NOT NULL,   -- when the prolog recorded it
    PRIMARY KEY (node, job_id)
);
CREATE INDEX IF NOT EXISTS job_gpus_ts ON job_gpus(ts);
""", since=7, key=("node", "job_id"), retain="ts"),
    # ---- end of cost (v7) ----
]


@record(frozen=True)
class Migration:
    """Changes to existing tables at `version` (new tables need only a Table entry)."""
    version: int
    why: str
    local: list[str] = field(default_factory=list)            # SQLite, the local store
    central_sqlite: list[str] = field(default_factory=list)   # a central SQLite store
    central_mysql: list[str] = field(default_factory=list)    # a central MariaDB/MySQL store
    # (table, column, SQLite type and default): added where missing, locally and centrally
    columns: list[tuple[str, str, str]] = field(default_factory=list)


MIGRATIONS: list[Migration] = [
    Migration(2, "shipping: the local store's identity", local=[
        "INSERT OR IGNORE INTO store_info (name, value) VALUES ('store_id', lower(hex(randomblob(8))))"]),
    Migration(4, "tamper-evident audit: each event chained to the previous one by hash", columns=[
        ("events", "prev_hash", "TEXT NOT NULL DEFAULT ''"), ("events", "hash", "TEXT NOT NULL DEFAULT ''")]),
]
ORIGIN_VERSION = 4  # from this version the central store records the origin of a node account's rows

SCHEMA_VERSION = max([t.since for t in TABLES] + [m.version for m in MIGRATIONS])


def by_name(name: str) -> Table:
    return next(t for t in TABLES if t.name == name)


def shipped_tables() -> list[Table]:
    return [t for t in TABLES if t.shipped]


def newer_error(what: str, found: int) -> str:
    from .. import __version__

    return (f"{what}: schema version {found} is newer than this slurmadm ({__version__}) understands "
            f"(version {SCHEMA_VERSION}); upgrade slurmadm on this host")


# --------------------------------------------------------------------------- the local store

SHIP_TRIGGER_PREFIX = "ship_"


def local_steps(found: int) -> list[str]:
    """SQLite statements that bring a local store from version `found` to SCHEMA_VERSION.
    Version 0 is a store made before versions existed (or a new file): every CREATE runs (they
    are IF NOT EXISTS), which is exactly version 1's tables plus what came later."""
    out = [t.ddl for t in TABLES if t.where in ("both", "local") and (found == 0 or t.since > found)]
    out += [s for m in MIGRATIONS if m.version > found for s in m.local]
    out += [add_column(t, c, decl, "sqlite") for m in MIGRATIONS if m.version > found for t, c, decl in m.columns
            if by_name(t).where != "central"]
    return out


ADD_COLUMN = " ADD COLUMN "


def add_column(table: str, column: str, decl: str, dialect: str) -> str:
    """ALTER TABLE ... ADD COLUMN (MariaDB: IF NOT EXISTS; SQLite: the caller skips a
    `duplicate column` error, the column being there already)."""
    if dialect == "mysql":
        typ, _, rest = decl.partition(" ")
        typ = {"TEXT": "LONGTEXT", "INTEGER": "BIGINT", "REAL": "DOUBLE"}.get(typ, typ)
        return f"ALTER TABLE {table}{ADD_COLUMN}IF NOT EXISTS `{column}` {typ} {rest}".rstrip()
    return f'ALTER TABLE {table}{ADD_COLUMN}"{column}" {decl}'


def is_duplicate_column(sql: str, exc: Exception) -> bool:
    return ADD_COLUMN in sql and "duplicate column" in str(exc).lower()


def ship_triggers(db: sqlite3.Connection, on: bool) -> bool:
    """Make the outbox triggers exist (on) or not (off). Returns True when something changed.
    Turning them on queues every row already there, so nothing recorded before is left behind."""
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND name LIKE ?",
                                     (SHIP_TRIGGER_PREFIX + "%",))}
    want = {f"{SHIP_TRIGGER_PREFIX}{t.name}_{op}" for t in shipped_tables() for op in ("ins", "upd")}
    if on and have == want:
        return False
    if not on and not have:
        return False
    for name in have:
        db.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    if on:
        for t in shipped_tables():
            for op, event in (("ins", "INSERT"), ("upd", "UPDATE")):
                db.execute(f"CREATE TRIGGER {SHIP_TRIGGER_PREFIX}{t.name}_{op} AFTER {event} ON {t.name} "
                           f"BEGIN INSERT INTO outbox (tbl, rid) VALUES ('{t.name}', NEW.rowid); END")
            if not {f"{SHIP_TRIGGER_PREFIX}{t.name}_ins"} & have:
                db.execute(f"INSERT INTO outbox (tbl, rid) SELECT '{t.name}', rowid FROM {t.name} ORDER BY rowid")
    return True


# ------------------------------------------------------------------------- the central store

ORIGIN = "origin"  # the central column naming the host a record came from
STORE_ID = "store_id"  # the central column naming the local store file (append-only tables)


@record(frozen=True)
class Column:
    """A column as the DDL declares it."""

    name: str
    type: str          # INTEGER | REAL | TEXT
    notnull: bool
    default: str | None
    pk: int            # position in the primary key, 0 = not part of it


def columns(table: Table) -> list[Column]:
    """The table's columns, read back from SQLite itself (no DDL parsing by hand)."""
    return _described()[table.name][0]


def indexes(table: Table) -> list[tuple[str, list[str]]]:
    return _described()[table.name][1]


_DESCRIBED: dict[str, tuple[list[Column], list[tuple[str, list[str]]]]] = {}


def _described() -> dict[str, tuple[list[Column], list[tuple[str, list[str]]]]]:
    if set(_DESCRIBED) != {t.name for t in TABLES}:
        _DESCRIBED.clear()
        db = sqlite3.connect(":memory:")
        for t in TABLES:
            db.executescript(t.ddl)
            cols = [Column(r[1], (r[2] or "TEXT").upper(), bool(r[3]) or bool(r[5]), r[4], r[5])
                    for r in db.execute(f"PRAGMA table_info({t.name})")]
            idx = []
            for r in db.execute(f"PRAGMA index_list({t.name})"):
                if r[1].startswith("sqlite_autoindex"):
                    continue
                idx.append((r[1], [c[2] for c in db.execute(f"PRAGMA index_info({r[1]})")]))
            _DESCRIBED[t.name] = (cols, sorted(idx))
        db.close()
    return _DESCRIBED


def rowid_column(table: Table) -> str | None:
    """The INTEGER PRIMARY KEY column (SQLite's row id under a name), if the table has one."""
    pk = [c for c in columns(table) if c.pk]
    return pk[0].name if len(pk) == 1 and pk[0].type == "INTEGER" else None


def central_key(table: Table) -> list[str]:
    """The central unique key: origin plus the natural key, or origin, store id and local row id."""
    if table.key:
        return [ORIGIN, *table.key]
    return [ORIGIN, STORE_ID, rowid_column(table) or "local_id"]


def central_columns(table: Table) -> list[str]:
    """Columns a shipment writes (besides origin), in order: for append-only tables the store
    id, then the row id when the table has no column for it, then the table's own columns."""
    names = [c.name for c in columns(table)]
    if table.key:
        return names
    return [STORE_ID, *([] if rowid_column(table) else ["local_id"]), *names]


def _mysql_type(col: Column, keyed: bool) -> str:
    if col.type.startswith("INT"):
        return "BIGINT"
    if col.type in ("REAL", "FLOAT", "DOUBLE"):
        return "DOUBLE"
    return "VARCHAR(191)" if keyed else "LONGTEXT"


def central_ddl(table: Table, dialect: str) -> list[str]:
    """CREATE statements for `table` in the central store (`sqlite` or `mysql`)."""
    keyed = {*central_key(table), *(c for _, cols in indexes(table) for c in cols)}
    lines: list[str] = []
    cols = columns(table)
    if table.where != "central":
        lines.append("seq INTEGER PRIMARY KEY AUTOINCREMENT" if dialect == "sqlite"
                     else "seq BIGINT AUTO_INCREMENT PRIMARY KEY")
        own = {c.name: c for c in cols}
        cols = [Column(ORIGIN, "TEXT", True, None, 0)] + [
            Column(n, "TEXT" if n == STORE_ID else "INTEGER", True, None, 0) if n not in own
            else Column(n, own[n].type, own[n].notnull, own[n].default, 0) for n in central_columns(table)]
    for c in cols:
        typ = c.type if dialect == "sqlite" else _mysql_type(c, c.name in keyed or c.pk > 0)
        lines.append(f"{_q(c.name, dialect)} {typ}" + (" NOT NULL" if c.notnull else "")
                     + (f" DEFAULT {c.default}" if c.default is not None else ""))
    pk = [c.name for c in sorted(cols, key=lambda c: c.pk) if c.pk]
    if pk:
        lines.append(f"PRIMARY KEY ({', '.join(_q(c, dialect) for c in pk)})")
    if table.where != "central":
        key = ", ".join(_q(c, dialect) for c in central_key(table))
        lines.append(f"UNIQUE ({key})" if dialect == "sqlite" else f"UNIQUE KEY {table.name}_origin_key ({key})")
    tail = "" if dialect == "sqlite" else " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    out = [f"CREATE TABLE IF NOT EXISTS {table.name} (\n  " + ",\n  ".join(lines) + f"\n){tail}"]
    for name, icols in indexes(table):
        out.append(f"CREATE INDEX IF NOT EXISTS {name} ON {table.name} ({', '.join(_q(c, dialect) for c in icols)})")
    return out


def central_steps(found: int, dialect: str) -> list[str]:
    """Statements that bring a central store from version `found` to SCHEMA_VERSION."""
    out = [s for t in TABLES if t.where in ("both", "central") and t.since > found
           for s in central_ddl(t, dialect)]
    for m in MIGRATIONS:
        if m.version > found:
            out += m.central_mysql if dialect == "mysql" else m.central_sqlite
            out += [add_column(t, c, decl, dialect) for t, c, decl in m.columns]
    out += [s for t in TABLES if t.where in ("both", "central") and (found < ORIGIN_VERSION or t.since > found)
            for s in guard_triggers(t, dialect)]
    return out


ACCOUNT_ORIGIN = ("(SELECT a.origin FROM store_accounts a WHERE a.account = SUBSTRING_INDEX(USER(), '@', 1))")
APPEND_ONLY = "slurmadm: audit events are append-only"
OTHERS_ROWS = "slurmadm: a node account may change only its own rows"


def guard_triggers(table: Table, dialect: str) -> list[str]:
    """The central store's own guards. MariaDB: a row inserted by a node's account (listed in
    store_accounts) carries that node as its origin whatever the client sent; such an account
    may change only its own rows; audit events are never changed by anyone. A central SQLite
    file (anyone who can write it can do anything) gets only the append-only guard."""
    col = "host" if table.name == "hosts" else ORIGIN
    if table.name in ("store_accounts", "event_anchors"):
        return []
    if dialect != "mysql":
        return ([f"CREATE TRIGGER IF NOT EXISTS {table.name}_append_only BEFORE UPDATE ON {table.name} "
                 f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END"] if table.append_only else [])
    out = [f"CREATE TRIGGER IF NOT EXISTS {table.name}_origin_ins BEFORE INSERT ON {table.name} FOR EACH ROW "
           f"SET NEW.`{col}` = COALESCE({ACCOUNT_ORIGIN}, NEW.`{col}`)"]
    if table.append_only:
        out.append(f"CREATE TRIGGER IF NOT EXISTS {table.name}_append_only BEFORE UPDATE ON {table.name} "
                   f"FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{APPEND_ONLY}'")
    else:
        out.append(f"CREATE TRIGGER IF NOT EXISTS {table.name}_origin_upd BEFORE UPDATE ON {table.name} "
                   f"FOR EACH ROW IF {ACCOUNT_ORIGIN} IS NOT NULL AND ({ACCOUNT_ORIGIN} <> OLD.`{col}` OR "
                   f"{ACCOUNT_ORIGIN} <> NEW.`{col}`) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = "
                   f"'{OTHERS_ROWS}'; END IF")
    return out


def _q(name: str, dialect: str) -> str:
    return f"`{name}`" if dialect == "mysql" else f'"{name}"'
