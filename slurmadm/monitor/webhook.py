"""`slurmadm monitor webhook`: an Alertmanager webhook receiver that isolates nodes.

Alertmanager POSTs its webhook payload (version 4: {"status", "alerts": [{"status", "labels",
"annotations", "startsAt", "endsAt", "fingerprint"}], ...}). The receiver:
- answers 401 without `Authorization: Bearer <token>` (the site's root-only token file), 413 past
  monitor.webhook_max_bytes (read no further), 400 for a payload that is not Alertmanager's shape
  (logged, one line), 200 otherwise;
- for each alert whose name the site maps to "drain" (monitor.actions) and whose `node` label is
  a site node: on `firing`, drains the node with reason `slurmadm: alert-<name>: <summary>
  [alert]` under the same ownership rules and breaker as health (`may_drain`, `breaker`); on
  `resolved`, resumes the node only if slurmadm drained it for that same alert, nobody changed the
  state meanwhile (`may_resume`), and health's own rule holds: health.resume_after_clean_runs
  consecutive clean periodic health runs since the resolve (a resolved alert alone does not prove
  the node good). Alertmanager sends `resolved` once, so the pending resume is kept in the store
  and `sweep()` (every monitor.resume_check_s) finishes it;
- records an audit event per action and per refusal.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ..errors import UsageError
from ..health.actions import breaker
from ..slurm.model import NodeInfo
from ..slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id

log = logging.getLogger("slurmadm.monitor.webhook")
CONTEXT = "alert"
PENDING_KEY = "monitor.resume-pending"  # node_state: {"check_id", "ts"} of a resolved alert awaiting the health rule
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class BadPayload(ValueError):
    pass


@dataclass(frozen=True)
class Alert:
    name: str
    status: str  # firing | resolved
    node: str
    summary: str
    fingerprint: str


def parse_payload(body: bytes) -> list[Alert]:
    """Alertmanager's webhook JSON -> alerts; BadPayload naming what is wrong."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadPayload(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadPayload("top level is not an object")
    alerts = data.get("alerts")
    if not isinstance(alerts, list):
        raise BadPayload("'alerts' is missing or not a list")
    out = []
    for i, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise BadPayload(f"alerts[{i}] is not an object")
        labels = a.get("labels")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise BadPayload(f"alerts[{i}].labels is missing or not string -> string")
        status = a.get("status")
        if status not in ("firing", "resolved"):
            raise BadPayload(f"alerts[{i}].status is {status!r}, not firing or resolved")
        name = labels.get("alertname", "")
        if not _NAME.match(name):
            raise BadPayload(f"alerts[{i}].labels.alertname {name[:40]!r} is not an alert name")
        annotations = a.get("annotations") if isinstance(a.get("annotations"), dict) else {}
        summary = str(annotations.get("summary") or annotations.get("description") or name)
        out.append(Alert(name, status, labels.get("node", ""), summary, str(a.get("fingerprint", ""))[:32]))
    return out


class Slurm(Protocol):
    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]: ...

    def drain(self, nodes: list[str], reason: str) -> None: ...

    def resume(self, nodes: list[str]) -> None: ...


class Isolator:
    """What an alert does to a node: pure rules over Slurm's view, acting through the adapter."""

    def __init__(self, *, site, backend: Slurm, store_factory, results_factory=None):
        self.site = site
        self.backend = backend
        self.store_factory = store_factory  # a Store per request: an SQLite handle stays in its thread
        # where the clean runs are counted (store/read.trusted: the central store by origin when
        # the site has one); default: the store the audit events go to
        self.results_factory = results_factory
        self.store = None
        self.actions = dict(site.monitor.actions)
        self.nodes = set(site.node_names)
        self.resume_after = site.health.resume_after_clean_runs
        self.lock = threading.Lock()

    def clean_runs_since(self, node: str, since: float) -> int:
        """Consecutive clean periodic health runs on the node since `since`, counted back from the
        latest (a run with a failing or erroring check resets the count), as health counts them."""
        from ..store.read import Reader

        sql = ("SELECT run_id, MIN(ts) AS t, MAX(CASE WHEN status IN ('fail', 'error') THEN 1 ELSE 0 END) AS bad "
               "FROM check_results WHERE node=? AND context='periodic' AND ts > ? AND {trusted} GROUP BY run_id "
               "ORDER BY t")
        if self.results_factory is None:
            r = Reader(self.store, central=False, host="")
            rows = r.query(sql.format(trusted=r.trusted()), (node, since))
        else:
            with self.results_factory() as r:  # only the node's own runs count (issue 24)
                rows = r.query(sql.format(trusted="origin = node" if r.central else "1=1"), (node, since))
        count = 0
        for r in rows:
            count = 0 if r["bad"] else count + 1
        return count

    def handle(self, alerts: list[Alert]) -> list[dict[str, str]]:
        results = []
        with self.lock, self.store_factory() as store:
            self.store = store
            try:
                for a in alerts:
                    results.append({"alert": a.name, "node": a.node, "status": a.status, **self._one(a)})
            finally:
                self.store = None
        return results

    def _audit(self, action: str, node: str, reason: str, **detail: Any) -> None:
        self.store.audit(action, node, reason, context=CONTEXT, **detail)

    def _one(self, a: Alert) -> dict[str, str]:
        if self.actions.get(a.name) != "drain":
            return {"action": "none", "why": "the site maps no action to this alert"}
        if a.node not in self.nodes:
            return {"action": "none", "why": f"node label {a.node[:64]!r} is not a site node"}
        check_id = f"alert-{a.name}"
        everyone = self.backend.nodes()
        node = next((n for n in everyone if n.name == a.node), None)
        if node is None:
            return {"action": "none", "why": "Slurm does not know the node"}
        if a.status == "firing":
            if is_ours(node) and reason_check_id(node.reason) == check_id:
                self.store.delete_node_state(a.node, PENDING_KEY)  # firing again: no resume pending
            verdict = may_drain(node)
            if not verdict.act:
                return {"action": "none", "why": verdict.why}
            why = breaker(node, everyone, self.site.health.drain_cap_fraction)
            reason = format_reason(check_id, a.summary, CONTEXT)
            if why:
                self._audit("monitor.alert", a.node, f"breaker: not draining ({reason}): {why}", alert=a.name)
                return {"action": "alert", "why": f"breaker: {why}"}
            self.backend.drain([a.node], reason)
            self._audit("node.drain", a.node, reason, alert=a.name, fingerprint=a.fingerprint)
            return {"action": "drain", "why": reason}
        # resolved: wait for the health rule (resume_after_clean_runs clean periodic runs since)
        if not is_ours(node) or reason_check_id(node.reason) != check_id:
            return {"action": "none", "why": f"not drained by slurmadm for {check_id}"}
        verdict = may_resume(node)
        if not verdict.act:
            return {"action": "none", "why": verdict.why}
        if self.store.get_node_state(a.node, PENDING_KEY) is None:
            self.store.set_node_state(a.node, PENDING_KEY, json.dumps({"check_id": check_id, "ts": time.time()}))
            self._audit("monitor.alert-resolved", a.node, f"{check_id} resolved; resume after {self.resume_after} "
                        "clean periodic health runs", alert=a.name)
        return {"action": "pending-resume", "why": self._try_resume(node)}

    def _try_resume(self, node: NodeInfo) -> str:
        raw = self.store.get_node_state(node.name, PENDING_KEY)
        try:
            pending = json.loads(raw or "")
            check_id, since = str(pending["check_id"]), float(pending["ts"])
        except (ValueError, KeyError, TypeError):
            self.store.delete_node_state(node.name, PENDING_KEY)
            return "no pending resume"
        if not is_ours(node) or reason_check_id(node.reason) != check_id or not may_resume(node).act:
            self.store.delete_node_state(node.name, PENDING_KEY)  # someone else took the node over
            return "the node is no longer drained by slurmadm for this alert: nothing to resume"
        clean = self.clean_runs_since(node.name, since)
        if clean < self.resume_after:
            return f"clean periodic health runs since the resolve: {clean} of {self.resume_after}"
        self.backend.resume([node.name])
        self.store.delete_node_state(node.name, PENDING_KEY)
        self._audit("node.resume", node.name, f"{check_id} resolved and {clean} clean periodic health runs since "
                    f"(was: {node.reason})", alert=check_id[len("alert-"):])
        return "resumed"

    def sweep(self) -> list[dict[str, str]]:
        """Resume the nodes whose alert resolved once the health rule is met (the server calls
        this every monitor.resume_check_s; a resolved alert arrives only once)."""
        out = []
        with self.lock, self.store_factory() as store:
            self.store = store
            try:
                names = [r[0] for r in store.db.execute("SELECT node FROM node_state WHERE key=?", (PENDING_KEY,))]
                if not names:
                    return out
                view = {n.name: n for n in self.backend.nodes()}
                for name in names:
                    if name in view:
                        out.append({"node": name, "why": self._try_resume(view[name])})
                    else:
                        store.delete_node_state(name, PENDING_KEY)
            finally:
                self.store = None
        return out


def read_token(path: str) -> str:
    import os
    import stat

    try:
        st = os.stat(path)
        with open(path) as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise UsageError(f"monitor.webhook_token_file: {path}: {exc.strerror or exc}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"monitor.webhook_token_file: {path} is readable by others (chmod 600 it)")
    if len(token) < 16:
        raise UsageError(f"monitor.webhook_token_file: {path}: the token is shorter than 16 characters")
    return token


def make_server(listen: str, *, token: str, max_bytes: int, isolator: Isolator, web=None) -> ThreadingHTTPServer:
    from ..exporter.server import listen_http

    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "slurmadm-webhook"

        def _reply(self, code: int, data: dict) -> None:
            body = (json.dumps(data, sort_keys=True) + "\n").encode()
            if code >= 400:
                self.close_connection = True  # an unread request body must not be taken for the next request
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            got = (self.headers.get("Authorization") or "").encode()
            if not hmac.compare_digest(got, expected):
                log.warning("webhook: 401 from %s (missing or wrong token)", self.client_address[0])
                self._reply(401, {"error": "missing or wrong bearer token"})
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._reply(411, {"error": "Content-Length required"})
                return
            if length < 0 or length > max_bytes:
                log.warning("webhook: 413 from %s (%d bytes > %d)", self.client_address[0], length, max_bytes)
                self.close_connection = True
                self._reply(413, {"error": f"request larger than {max_bytes} bytes"})
                return
            body = self.rfile.read(length)
            try:
                alerts = parse_payload(body)
            except BadPayload as exc:
                log.warning("webhook: 400 from %s: %s", self.client_address[0], exc)
                self._reply(400, {"error": str(exc)})
                return
            try:
                results = isolator.handle(alerts)
            except Exception as exc:  # noqa: BLE001 - Slurm unreachable etc.: Alertmanager retries on 5xx
                log.error("webhook: 503: %s", exc)
                self._reply(503, {"error": f"{type(exc).__name__}: {exc}"[:300]})
                return
            for r in results:
                if r["action"] != "none":
                    log.warning("webhook: %s %s %s: %s", r["alert"], r["node"], r["action"], r["why"])
            self._reply(200, {"results": results})

        def do_GET(self) -> None:  # noqa: N802
            self._reply(200 if self.path == "/healthz" else 404, {"ok": self.path == "/healthz"})

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            pass

    # web: TLS from the site's web config; the bearer token stays the webhook's credential
    return listen_http(Handler, listen, "monitor.webhook_listen", web=web, basic_auth=False)
