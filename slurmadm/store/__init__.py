"""slurmadm's store: one SQLite file for audit events, check results and burn-in history.

WAL mode, a busy timeout so concurrent writers (prologs on many nodes sharing one store file,
a sweep, an admin's apply) wait instead of failing. The shared tables are SCHEMA below; a
capability appends its own to EXTRA_SCHEMA (burnin/history.py); the store creates what is missing
on open.
"""

from __future__ import annotations

import getpass
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY,
    ts      REAL NOT NULL,
    actor   TEXT NOT NULL,      -- who: the real user behind sudo, or the daemon context
    action  TEXT NOT NULL,      -- what: e.g. node.drain, accounts.add-account, config.apply
    target  TEXT NOT NULL,      -- on what: a node, an account, a file
    reason  TEXT NOT NULL,      -- why
    detail  TEXT NOT NULL       -- JSON
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_target ON events(target, ts);

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

CREATE TABLE IF NOT EXISTS node_state (
    node  TEXT NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    ts    REAL NOT NULL,
    PRIMARY KEY (node, key)
);
""" + """
-- fleet (slurmadm/fleet/): each node's latest software facts, and rollouts with per-node progress
CREATE TABLE IF NOT EXISTS fleet_facts (
    node  TEXT NOT NULL,
    fact  TEXT NOT NULL,      -- driver, nccl, file:/etc/slurm/slurm.conf, pkg:<name>, ...
    value TEXT NOT NULL,
    ts    REAL NOT NULL,      -- when it was collected
    PRIMARY KEY (node, fact)
);
CREATE TABLE IF NOT EXISTS fleet_rollouts (
    id       TEXT PRIMARY KEY,   -- the plan's name
    plan_sha TEXT NOT NULL,      -- sha256 of the plan: a changed plan is a new rollout
    plan     TEXT NOT NULL,      -- JSON
    state    TEXT NOT NULL,      -- running | stopped | done | failed
    detail   TEXT NOT NULL,
    started  REAL NOT NULL,
    updated  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS fleet_rollout_nodes (
    rollout TEXT NOT NULL,
    node    TEXT NOT NULL,
    wave    INTEGER NOT NULL,    -- 0: canary
    phase   TEXT NOT NULL,       -- pending, draining, steps, rebooting, verifying, done, failed, skipped
    detail  TEXT NOT NULL,
    ts      REAL NOT NULL,
    PRIMARY KEY (rollout, node)
);
"""

# Capabilities append their own DDL here at import time (CREATE ... IF NOT EXISTS only).
EXTRA_SCHEMA: list[str] = []


def actor() -> str:
    """Who is acting: the human behind sudo when there is one."""
    for var in ("SLURMADM_ACTOR", "SUDO_USER"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return f"uid:{os.getuid()}"


@dataclass(frozen=True)
class Event:
    id: int
    ts: float
    actor: str
    action: str
    target: str
    reason: str
    detail: dict[str, Any]


class Store:
    def __init__(self, path: str | os.PathLike, *, audit_log: str | None = None, timeout_s: float = 30.0):
        self.path = Path(path)
        self.audit_log = audit_log
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"store {self.path}: cannot open ({exc})") from None
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout = %d" % int(timeout_s * 1000))
        try:
            self._db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            pass  # another process is switching it right now; it will be WAL either way
        self._db.execute("PRAGMA synchronous = NORMAL")
        # one script, one write transaction: concurrent first opens queue on the lock
        self._db.executescript("BEGIN IMMEDIATE;\n" + SCHEMA + "\n".join(EXTRA_SCHEMA) + "\nCOMMIT;")

    @classmethod
    def for_site(cls, site) -> "Store":
        return cls(site.store.path, audit_log=site.store.audit_log)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so two writers queue, not deadlock."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    # ---- audit events ----

    def audit(self, action: str, target: str, reason: str, **detail: Any) -> int:
        """Record who did what to which target and why. Returns the event id."""
        return self.audit_many([(action, target, reason, detail)])[0]

    def audit_many(self, events: list[tuple[str, str, str, dict[str, Any]]]) -> list[int]:
        """Several events (action, target, reason, detail) in one transaction: one row each,
        the same as audit() would write, for a change that touched many targets at once."""
        ts = time.time()
        who = actor()
        ids: list[int] = []
        with self.transaction() as db:
            for action, target, reason, detail in events:
                cur = db.execute(
                    "INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (?,?,?,?,?,?)",
                    (ts, who, action, target, reason, json.dumps(detail, sort_keys=True, default=str)),
                )
                ids.append(int(cur.lastrowid))
        if self.audit_log and events:
            lines = "".join(
                json.dumps({"id": event_id, "ts": ts, "actor": who, "action": action, "target": target,
                            "reason": reason, "detail": detail}, sort_keys=True, default=str) + "\n"
                for event_id, (action, target, reason, detail) in zip(ids, events)
            )
            try:
                Path(self.audit_log).parent.mkdir(parents=True, exist_ok=True)
                with open(self.audit_log, "a", encoding="utf-8") as fh:
                    fh.write(lines)
            except OSError:
                pass  # the store rows are the record; the JSON-lines copy is best effort
        return ids

    def events(self, *, since: float | None = None, action: str | None = None,
               target: str | None = None, limit: int = 1000) -> list[Event]:
        sql = "SELECT * FROM events WHERE 1=1"
        args: list[Any] = []
        if since is not None:
            sql += " AND ts >= ?"
            args.append(since)
        if action is not None:
            sql += " AND action LIKE ?"
            args.append(action.replace("*", "%"))
        if target is not None:
            sql += " AND target = ?"
            args.append(target)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        return [
            Event(r["id"], r["ts"], r["actor"], r["action"], r["target"], r["reason"], json.loads(r["detail"]))
            for r in self._db.execute(sql, args)
        ]

    # ---- small per-node state (counters, last-pass timestamps) ----

    def get_node_state(self, node: str, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM node_state WHERE node=? AND key=?", (node, key)).fetchone()
        return None if row is None else row["value"]

    def set_node_state(self, node: str, key: str, value: str) -> None:
        self.set_node_states(node, {key: value})

    def set_node_states(self, node: str, values: dict[str, str]) -> None:
        """Several keys of one node in one transaction."""
        now = time.time()
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO node_state (node, key, value, ts) VALUES (?,?,?,?) "
                "ON CONFLICT(node, key) DO UPDATE SET value=excluded.value, ts=excluded.ts",
                [(node, key, value, now) for key, value in values.items()],
            )

    def delete_node_state(self, node: str, key: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM node_state WHERE node=? AND key=?", (node, key))
