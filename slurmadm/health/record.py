"""Where a run's record goes: JSON lines (site.health.results_log), syslog, and the node's store
(`check_results`, the audit `events`, small per-node state in `node_state`).

One way, once: a run collects what it observed (check results), what it decided and did (drain,
resume and alert events) and its per-node state changes in its `Recorder`, acts, and then writes
all of it with `Recorder.commit()`: one JSON-lines append, one store transaction (one audit-log
append when `store.audit_log` is set), its syslog lines. Nothing is written while a run acts.

A run cut at its hard limit still leaves what it had: `Recorder.salvage()` (the in-process
watchdog, from its own thread with its own store connection) writes the collected record with the
limit's alert as that one record; a run whose Python is stuck holding the GIL cannot do that, so
before it calls Slurm it hands what it collected to the hook's supervisor process
(`Recorder.journal`), which writes it with its alert when it has to kill the run
(`replay_journal`).

Every sink is best effort on its own: a full disk or a busy store must not turn a healthy node's
prolog into a failure. The store is shared by concurrent writers (WAL, busy timeout).
"""

from __future__ import annotations

import json
import os
import syslog
import threading
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any

    from .runner import Result

SYSLOG_IDENT = "slurmadm-health"
_PRIORITY = {"fail": syslog.LOG_ERR, "error": syslog.LOG_ERR, "warn": syslog.LOG_WARNING}
STATE_PREFIX = "health."
_ACTIONS = {"drain": "node.drain", "resume": "node.resume"}  # other kinds: health.<kind>


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
    the run's `Recorder.commit()` writes the changes (`pending`) with the rest of its record.
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

    def written(self, changes: dict[str, str]) -> None:
        """`changes` are in the store now."""
        self.values.update(changes)
        for key, value in changes.items():
            if self.pending.get(key) == value:
                del self.pending[key]

    def flush(self) -> None:
        """Write the pending changes now, on their own (for callers outside a run's record)."""
        if not self.pending:
            return
        changes = dict(self.pending)
        self.store.set_node_states(self.node, {STATE_PREFIX + k: v for k, v in changes.items()})
        self.written(changes)


class Recorder:
    """One run's record, collected while it runs and written once (`commit`).

    `items` (JSON-able, in order): {"results": [Result dicts], "ts": t} and {"event": kind,
    "reason": r, "detail": {...}, "ts": t}. `state`: the run's NodeState, whose pending changes
    the commit writes (None: no state to write, e.g. a dry run). `counters`: node_state keys the
    commit adds one to. `reopen`: () -> (store or None, why), a fresh connection for a salvage
    from another thread (an SQLite connection belongs to the thread that opened it).
    `journal_fd`: the hook supervisor's pipe (`journal()`)."""

    def __init__(self, *, node: str, context: str, run_id: str, results_log: str, store, use_syslog: bool = True,
                 reopen=None, journal_fd: int | None = None):
        self.node = node
        self.context = context
        self.run_id = run_id
        self.results_log = results_log
        self.store = store
        self.problems: list[str] = []
        self.use_syslog = use_syslog
        self.reopen = reopen
        self.items: list[dict[str, Any]] = []
        self.state: NodeState | None = None
        self.node_state: dict[str, str] = {}  # full keys (no prefix) written with the record
        self.counters: list[str] = []
        self._lock = threading.Lock()
        self._done = False
        self.journal_fd = journal_fd
        self._journal: int | None = None
        if use_syslog:
            syslog.openlog(SYSLOG_IDENT, syslog.LOG_PID, syslog.LOG_DAEMON)

    # ---- collecting (no I/O, but to the supervisor's journal once `journal()` was called) ----

    def results(self, results: list[Result]) -> None:
        self._add({"ts": time.time(), "results": [r.to_dict() for r in results]})

    def revise(self, result: Result) -> None:
        """A check judged again within the run (an admin's resume acknowledged what it found):
        the record keeps the judgement the run acted on, so what reads the run's results (repair's
        ingest opens incidents from them) sees no acknowledged fault; the first finding stays in
        the run's alert event."""
        with self._lock:
            if self._done:
                return
            for item in reversed(self.items):
                if "results" in item:
                    item["results"] = [result.to_dict() if r["check_id"] == result.check_id else r
                                       for r in item["results"]]
                    return

    def event(self, kind: str, reason: str, **detail: Any) -> None:
        """A drain, resume or alert: a JSON line, a syslog line and an audit event, at commit."""
        self._add({"ts": time.time(), "event": kind, "reason": reason, "detail": detail})

    def job_gpus(self, job_id: str, gpus: list[int]) -> None:
        """prolog: which GPUs the job holds, kept in the store's `job_gpus` past the job's end
        (`slurmadm jobs failures`), in the run's one transaction."""
        self._add({"ts": time.time(), "job_gpus": [job_id, list(gpus)]})

    def _add(self, item: dict[str, Any]) -> None:
        with self._lock:
            if self._done:  # a late item of a run whose record is written (the watchdog's salvage)
                return
            self.items.append(item)
            if self._journal is not None:
                self._send([item])

    def journal(self) -> None:
        """From now on, hand every item (those so far first) to the supervisor (`journal_fd`) as
        JSON lines: what it writes if it has to kill this run (`replay_journal`). Called just
        before a run calls Slurm, so a healthy prolog (which never does) sends nothing."""
        with self._lock:
            if self.journal_fd is None or self._journal is not None or self._done:
                return
            self._journal = self.journal_fd
            self._send([{"run_id": self.run_id}, *self.items])

    def _send(self, items: list[dict[str, Any]]) -> None:
        try:
            os.write(self._journal, "".join(json.dumps(i, sort_keys=True, default=str) + "\n"
                                            for i in items).encode())
        except (OSError, TypeError):
            self._journal = None  # the supervisor is gone: nothing to hand over

    # ---- writing: once ----

    def commit(self) -> bool:
        """Write the run's record: one JSON-lines append, one store transaction, its syslog
        lines. False when it was written already (by the watchdog's salvage)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            items, changes = list(self.items), self._state_changes()
        self._write(items, changes, self.store)
        if self.state is not None and not self.problems:
            self.state.written({k[len(STATE_PREFIX):]: v for k, v in changes.items() if k.startswith(STATE_PREFIX)})
        self._journal_done()
        return True

    def salvage(self, reason: str, **detail: Any) -> bool:
        """The watchdog's last word (any thread): the record collected so far with the alert
        `reason`, as the run's one record, through a fresh store connection. False when the run
        had already begun writing its own (then only the alert is for the caller to write)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            self.items.append({"ts": time.time(), "event": "alert", "reason": reason, "detail": detail})
            items, changes = list(self.items), self._state_changes()
        store, why = self.reopen() if self.reopen is not None else (None, "")
        if why:
            self.problems.append(why)
        try:
            self._write(items, changes, store)
        finally:
            if store is not None:
                store.close()
        return True

    def _state_changes(self) -> dict[str, str]:
        out = dict(self.node_state)
        if self.state is not None:
            out.update({STATE_PREFIX + k: v for k, v in dict(self.state.pending).items()})
        return out

    def _journal_done(self) -> None:
        if self._journal is not None:
            try:
                os.write(self._journal, b'{"committed": true}\n')
            except OSError:
                pass
            self._journal = None

    def _write(self, items: list[dict[str, Any]], changes: dict[str, str], store) -> None:
        base = {"run_id": self.run_id, "node": self.node, "context": self.context}
        lines: list[dict[str, Any]] = []
        check_rows: list[tuple] = []
        events: list[tuple[str, str, str, dict[str, Any]]] = []
        held: list[tuple] = []
        for item in items:
            if "results" in item:
                results = item["results"]
                ts = item["ts"]
                lines += [{"ts": ts, **base, **r} for r in results]
                check_rows += [(ts, self.run_id, self.node, self.context, r["check_id"], r["status"], r["severity"],
                                r["detail"], r["value"], r["duration_ms"]) for r in results]
                for r in results:
                    if r["status"] in _PRIORITY:
                        self._syslog(_PRIORITY[r["status"]],
                                     f"{r['check_id']}: {r['status']}: {r['detail']} (action: {r['action']})")
                bad = [r["check_id"] for r in results if r["status"] in ("fail", "error")]
                self._syslog(syslog.LOG_INFO, f"{len(results)} checks, {len(bad)} failed or could not run"
                             + (f": {', '.join(bad)}" if bad else ""))
            elif "job_gpus" in item:
                job, gpus = item["job_gpus"]
                held.append((self.node, str(job), json.dumps([int(g) for g in gpus]), item["ts"]))
            elif "event" in item:
                kind, reason, detail = item["event"], item["reason"], item.get("detail") or {}
                self._syslog(syslog.LOG_ALERT if kind == "alert" else syslog.LOG_NOTICE, f"{kind}: {reason}")
                lines.append({"ts": item["ts"], **base, "event": kind, "reason": reason, **detail})
                events.append((_ACTIONS.get(kind, f"health.{kind}"), self.node, reason,
                               {"context": self.context, "run_id": self.run_id, **detail}))
        self._jsonl(lines)
        if store is None or not (check_rows or events or changes or self.counters or held):
            return
        try:
            with store.transaction() as db:
                if check_rows:
                    db.executemany(
                        "INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                        " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)", check_rows)
                written = store.insert_events(db, events) if events else None
                if held:
                    db.executemany("INSERT OR REPLACE INTO job_gpus (node, job_id, gpus, ts) VALUES (?,?,?,?)", held)
                now = time.time()
                upsert = ("INSERT INTO node_state (node, key, value, ts) VALUES (?,?,?,?) "
                          "ON CONFLICT(node, key) DO UPDATE SET value=excluded.value, ts=excluded.ts")
                if changes:
                    db.executemany(upsert, [(self.node, k, v, now) for k, v in changes.items()])
                for key in self.counters:
                    row = db.execute("SELECT value FROM node_state WHERE node=? AND key=?", (self.node, key)).fetchone()
                    count = (int(row["value"]) if row and str(row["value"]).isdigit() else 0) + 1
                    db.execute(upsert, (self.node, key, str(count), now))
        except Exception as exc:  # noqa: BLE001 - sqlite3.OperationalError: database is locked
            self.problems.append(f"store: {exc}")
            return
        if written is not None:
            store.copy_to_audit_log(events, *written)

    def _jsonl(self, rows: list[dict[str, Any]]) -> None:
        if not self.results_log or not rows:
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


def replay_journal(data: bytes) -> tuple[str, list[dict[str, Any]]] | None:
    """(run id, items) a killed run handed its supervisor (complete lines only), or None when it
    handed nothing or had written its record itself."""
    run_id, items = "", []
    for line in data.split(b"\n"):
        try:
            item = json.loads(line)
        except ValueError:
            continue  # the torn last line of a run killed mid-write
        if not isinstance(item, dict):
            continue
        if item.get("committed"):
            return None
        if "run_id" in item and len(item) == 1:
            run_id = str(item["run_id"])
        else:
            items.append(item)
    return (run_id, items) if run_id else None


def last_pass(store, node: str, check_id: str) -> float | None:
    row = store.db.execute(
        "SELECT MAX(ts) AS ts FROM check_results WHERE node=? AND check_id=? AND status='pass'",
        (node, check_id),
    ).fetchone()
    return row["ts"] if row and row["ts"] is not None else None
