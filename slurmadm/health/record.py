"""Where results go: JSON lines (site.health.results_log), syslog, and the store's
`check_results` table; small per-node state (NVLink counters, clean-run counts) in `node_state`.

Every sink is best effort on its own: a full disk or a busy store must not turn a healthy node's
prolog into a failure. The store is shared by concurrent writers (WAL, busy timeout).
"""

from __future__ import annotations

import json
import os
import syslog
import time

from .runner import Result

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any

SYSLOG_IDENT = "slurmadm-health"
_PRIORITY = {"fail": syslog.LOG_ERR, "error": syslog.LOG_ERR, "warn": syslog.LOG_WARNING}
STATE_PREFIX = "health."


def open_store(path: str, audit_log: str | None, timeout_s: float, ship: bool | None = None):
    """The store, or None (with the reason) when it cannot be opened in time."""
    from ..store import Store

    try:
        return Store(path, audit_log=audit_log, timeout_s=timeout_s, ship=ship), ""
    except Exception as exc:  # noqa: BLE001 - UsageError, sqlite3.OperationalError (locked)
        return None, f"store {path}: {exc}"


class NodeState:
    """`node_state` rows under the `health.` prefix for one node, read once in the main thread.

    Checks run in worker threads and never touch the store (an SQLite connection belongs to its
    thread, and a check may be abandoned mid-call): they read this snapshot and `set` into it;
    `flush()` writes the changes from the main thread after the checks.
    """

    def __init__(self, store, node: str):
        self.store = store
        self.node = node
        rows = store.db.execute("SELECT key, value FROM node_state WHERE node=? AND key LIKE ?",
                                (node, STATE_PREFIX + "%")).fetchall()
        self.values = {r["key"][len(STATE_PREFIX):]: r["value"] for r in rows}
        self.pending: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.pending.get(key, self.values.get(key))

    def set(self, key: str, value: str) -> None:
        if self.get(key) != value:
            self.pending[key] = value

    def flush(self) -> None:
        if not self.pending:
            return
        self.store.set_node_states(self.node, {STATE_PREFIX + k: v for k, v in self.pending.items()})
        self.values.update(self.pending)
        self.pending.clear()


class Recorder:
    def __init__(self, *, node: str, context: str, run_id: str, results_log: str, store, use_syslog: bool = True):
        self.node = node
        self.context = context
        self.run_id = run_id
        self.results_log = results_log
        self.store = store
        self.problems: list[str] = []
        self.use_syslog = use_syslog
        if use_syslog:
            syslog.openlog(SYSLOG_IDENT, syslog.LOG_PID, syslog.LOG_DAEMON)

    def _jsonl(self, rows: list[dict[str, Any]]) -> None:
        if not self.results_log:
            return
        data = "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows).encode()
        try:
            os.makedirs(os.path.dirname(self.results_log) or ".", exist_ok=True)
            fd = os.open(self.results_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)  # one write: lines of concurrent runs do not interleave
            finally:
                os.close(fd)
        except OSError as exc:
            self.problems.append(f"results log {self.results_log}: {exc.strerror or exc}")

    def _syslog(self, priority: int, text: str) -> None:
        if self.use_syslog:
            syslog.syslog(priority, f"{self.node} [{self.context}] {text}")

    def results(self, results: list[Result]) -> None:
        ts = time.time()
        base = {"ts": ts, "run_id": self.run_id, "node": self.node, "context": self.context}
        self._jsonl([{**base, **r.to_dict()} for r in results])
        for r in results:
            if r.status in _PRIORITY:
                self._syslog(_PRIORITY[r.status], f"{r.check_id}: {r.status}: {r.detail} (action: {r.action})")
        bad = [r.check_id for r in results if r.status in ("fail", "error")]
        self._syslog(syslog.LOG_INFO, f"{len(results)} checks, {len(bad)} failed or could not run"
                     + (f": {', '.join(bad)}" if bad else ""))
        if self.store is None:
            return
        try:
            with self.store.transaction() as db:
                db.executemany(
                    "INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                    " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [(ts, self.run_id, self.node, self.context, r.check_id, r.status, r.severity, r.detail,
                      r.value, r.duration_ms) for r in results],
                )
        except Exception as exc:  # noqa: BLE001 - sqlite3.OperationalError: database is locked
            self.problems.append(f"store: {exc}")

    def event(self, kind: str, reason: str, **detail: Any) -> None:
        """A drain, resume or alert: JSON line, syslog, and an audit event in the store."""
        priority = syslog.LOG_ALERT if kind == "alert" else syslog.LOG_NOTICE
        self._syslog(priority, f"{kind}: {reason}")
        self._jsonl([{"ts": time.time(), "run_id": self.run_id, "node": self.node, "context": self.context,
                      "event": kind, "reason": reason, **detail}])
        if self.store is None:
            return
        action = {"drain": "node.drain", "resume": "node.resume"}.get(kind, f"health.{kind}")
        try:
            self.store.audit(action, self.node, reason, context=self.context, run_id=self.run_id, **detail)
        except Exception as exc:  # noqa: BLE001
            self.problems.append(f"store: {exc}")


def last_pass(store, node: str, check_id: str) -> float | None:
    row = store.db.execute(
        "SELECT MAX(ts) AS ts FROM check_results WHERE node=? AND check_id=? AND status='pass'",
        (node, check_id),
    ).fetchone()
    return row["ts"] if row and row["ts"] is not None else None
