"""slurmadm's store: one SQLite file per host for audit events, check results, node state and
burn-in history, and optionally a central store (MariaDB) that every host ships its records to.

WAL mode, a busy timeout so concurrent writers (prologs on many nodes sharing one store file,
a sweep, an admin's apply) wait instead of failing. The tables are the explicit, versioned list
in `schema.py`; a local store migrates itself on open (PRAGMA user_version) and refuses one that
a newer slurmadm wrote. With `store.url` set, triggers queue every new or changed row in the
`outbox` and `ship.py` copies them to the central store in the background (`central.py`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

from ..errors import UnreachableError, UsageError
from ..record import record
from . import schema

# Store files this process opened: a database error met later (a corrupt page read by some
# query) is reported naming them (slurmadm.cli.common).
OPENED: list[str] = []


def store_error(exc: Exception, path: str | None = None) -> UnreachableError:
    """One line for an SQLite error: a corrupt file or a store that stays locked (exit 3)."""
    where = path or ", ".join(dict.fromkeys(OPENED)) or "(unknown file)"
    hint = "" if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc) else \
        " (corrupt? move it aside or restore it from a backup)"
    return UnreachableError(f"store {where}: {exc}{hint}")


def actor() -> str:
    """Who is acting: the human behind sudo when there is one."""
    for var in ("SLURMADM_ACTOR", "SUDO_USER"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        import getpass  # only here: it pulls in termios, a prolog's milliseconds

        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return f"uid:{os.getuid()}"


@record(frozen=True)
class Event:
    """One audit event."""

    id: int
    ts: float
    actor: str
    action: str
    target: str
    reason: str
    detail: dict[str, Any]


class Store:
    """The local store. `ship`: True queues rows for the central store (store.url set), False
    stops queueing, None (default) leaves it as the file says."""

    def __init__(self, path: str | os.PathLike, *, audit_log: str | None = None, timeout_s: float = 30.0,
                 ship: bool | None = None):
        self._path = os.fspath(path)  # a str: pathlib stays out of the prolog's imports
        self.audit_log = audit_log
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self._path)), exist_ok=True)
            self._db = sqlite3.connect(self._path, timeout=timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"store {self._path}: cannot open ({exc})") from None
        self._db.row_factory = sqlite3.Row
        OPENED.append(self._path)
        try:
            self._db.execute("PRAGMA busy_timeout = %d" % int(timeout_s * 1000))
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                pass  # another process is switching it right now; it will be WAL either way
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate(ship)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise store_error(exc, self._path) from None
        except BaseException:
            self._db.close()
            raise

    @property
    def path(self) -> "Path":
        from pathlib import Path

        return Path(self._path)

    def _migrate(self, ship: bool | None) -> None:
        """Bring the file to this slurmadm's schema version (and shipping mode) in one write
        transaction; a store at the current version with the right triggers costs two reads."""
        def version() -> int:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

        def triggers() -> int:
            return int(self._db.execute("SELECT count(*) FROM sqlite_master WHERE type='trigger' AND name LIKE ?",
                                        (schema.SHIP_TRIGGER_PREFIX + "%",)).fetchone()[0])

        found = version()
        if found > schema.SCHEMA_VERSION:
            raise UsageError(schema.newer_error(f"store {self._path}", found))
        if found == schema.SCHEMA_VERSION and (ship is None or bool(triggers()) == ship):
            return
        # concurrent first opens queue on the write lock; the second finds the work done
        self._db.execute("BEGIN IMMEDIATE")
        try:
            found = version()
            if found > schema.SCHEMA_VERSION:
                raise UsageError(schema.newer_error(f"store {self._path}", found))
            for step in schema.local_steps(found) if found < schema.SCHEMA_VERSION else []:
                for statement in _statements(step):
                    try:
                        self._db.execute(statement)
                    except sqlite3.OperationalError as exc:
                        if not schema.is_duplicate_column(statement, exc):
                            raise
            self._db.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
            if ship is not None:
                schema.ship_triggers(self._db, ship)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @classmethod
    def for_site(cls, site, *, node: str | None = None) -> "Store":
        """This host's store (`node`: the Slurm node it acts as, for a `{node}` in store.path)."""
        return cls(site.store.local_path(node), audit_log=site.store.audit_log, ship=site.store.url is not None)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        return self._db

    def query(self, sql: str, args=()) -> list[dict[str, Any]]:
        """Rows as dicts (the same call a central store answers: store/read.py)."""
        return [dict(r) for r in self._db.execute(sql, tuple(args))]

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
        with self.transaction() as db:  # the write lock: the chain's tail cannot move meanwhile
            ids, ts, who = self.insert_events(db, events)
        self.copy_to_audit_log(events, ids, ts, who)
        return ids

    def insert_events(self, db: sqlite3.Connection, events: list[tuple[str, str, str, dict[str, Any]]]
                      ) -> tuple[list[int], float, str]:
        """audit_many's rows inside the caller's transaction (`transaction()`: it holds the write
        lock, so the chain's tail cannot move): (ids, ts, actor). The caller copies them to the
        audit log after its commit (`copy_to_audit_log`)."""
        from .chain import event_hash

        ts = time.time()
        who = actor()
        ids: list[int] = []
        last = db.execute("SELECT id, hash FROM events ORDER BY id DESC LIMIT 1").fetchone()
        next_id, prev = (int(last["id"]) + 1, last["hash"]) if last is not None else (1, "")
        for action, target, reason, detail in events:
            text = json.dumps(detail, sort_keys=True, default=str)
            digest = event_hash(prev, next_id, ts, who, action, target, reason, text)
            db.execute(
                "INSERT INTO events (id, ts, actor, action, target, reason, detail, prev_hash, hash) "
                "VALUES (?,?,?,?,?,?,?,?,?)", (next_id, ts, who, action, target, reason, text, prev, digest))
            ids.append(next_id)
            next_id, prev = next_id + 1, digest
        return ids, ts, who

    def copy_to_audit_log(self, events: list[tuple[str, str, str, dict[str, Any]]], ids: list[int], ts: float,
                          who: str) -> None:
        """The JSON-lines copy of committed events (store.audit_log), in one append; best effort."""
        if not self.audit_log or not events:
            return
        lines = "".join(
            json.dumps({"id": event_id, "ts": ts, "actor": who, "action": action, "target": target,
                        "reason": reason, "detail": detail}, sort_keys=True, default=str) + "\n"
            for event_id, (action, target, reason, detail) in zip(ids, events)
        )
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.audit_log)), exist_ok=True)
            with open(self.audit_log, "a", encoding="utf-8") as fh:
                fh.write(lines)
        except OSError:
            pass  # the store rows are the record; the JSON-lines copy is best effort

    def update_events(self, ids: list[int], **detail: Any) -> None:
        """Follow events already written (an intent recorded before a change, marked done or
        refused after it) with one new event each, `detail` merged in and `follows` naming the
        original: events are append-only (a changed one would break the hash chain)."""
        rows = []
        for event_id in ids:
            row = self._db.execute("SELECT action, target, reason, detail FROM events WHERE id=?",
                                   (event_id,)).fetchone()
            if row is not None:
                rows.append((row["action"], row["target"], row["reason"],
                             {**json.loads(row["detail"]), **detail, "follows": event_id}))
        if rows:
            self.audit_many(rows)

    def events(self, *, since: float | None = None, action: str | None = None,
               target: str | None = None, limit: int = 1000) -> list[Event]:
        from .read import Reader, events

        rows = events(Reader(self, central=False, host=""), since=since, action=action, target=target, limit=limit)
        return [Event(r["id"], r["ts"], r["actor"], r["action"], r["target"], r["reason"], r["detail"]) for r in rows]

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


def _statements(script: str) -> list[str]:
    """Split DDL into statements (sqlite3.complete_statement knows where each one ends); one
    execute() each keeps them inside the caller's transaction (executescript would commit)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
