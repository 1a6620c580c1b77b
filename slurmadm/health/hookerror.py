"""A hook that cannot run leaves a trace where admins look (issue 25).

When the site file cannot be loaded (a non-UTF-8 byte, a TOML syntax error, an unsafe owner),
the prolog/epilog/periodic hook lets every job run (an admin's error, not the node's), and so
health enforcement is off on that node. That used to go only to stderr and syslog: on a node
without /dev/log and with slurmd not logging a hook that exits 0, nothing showed it. So the
hook also records it, on the error path only (a healthy prolog never imports this module):

- a JSON line in the results log: `{"event": "hook_error", "reason": <the error>, "error_kind": ...}`;
- in the node's store: an audit event `health.hook_error`, and two `node_state` keys:
  `health.hook-error` (the last one, JSON) and `health.hook-errors.<reason>` (a count);
- from the store the node exporter serves `slurmadm_hook_errors_total{node,reason}` and
  `slurmadm_health_enforcement_off{node}`, an alert rule says "health enforcement off on N
  nodes", and `health status` / `doctor` name the nodes and the error.

Where to write, with no site to say it: the node's last good settings (the newest settings
cache of this node, see config.py), else the site model's defaults where their directories
exist (none is created for it). The error "is current" while
no check result newer than it was recorded for the node (the next good run ends it; nothing is
written on the healthy path for that).
"""

from __future__ import annotations

import json
import os
import time

from ..store.read import COUNT_PREFIX, STATE_KEY, counts, current  # noqa: F401  (their reader's; named here too)

AUDIT_ACTION = "health.hook_error"
# the site model's defaults (site/health.py results_log, site/store.py path), for a node that
# never loaded its site
DEFAULT_RESULTS_LOG = "/var/log/slurmadm/health.jsonl"
DEFAULT_STORE = "/var/lib/slurmadm/slurmadm.db"
REASONS = ("site-invalid", "site-untrusted", "site-unreadable", "node-not-in-site", "unexpected")


def reason_of(exc: BaseException) -> str:
    """A short, stable label for why the site could not be loaded (the counter's `reason`)."""
    from ..errors import SiteError, SlurmadmError

    text = str(exc)
    if isinstance(exc, SiteError):
        return "site-invalid"  # not UTF-8, TOML syntax, a value the model refuses
    if "refusing it as root" in text:
        return "site-untrusted"
    if "is not one of the site's nodes" in text:
        return "node-not-in-site"
    if isinstance(exc, SlurmadmError):
        return "site-unreadable"
    return "unexpected"


def last_good_paths(node: str) -> tuple[str, str, str | None]:
    """(results log, store path, audit log) of the node's newest settings cache, else the defaults.
    Run as root, a cache file another user could change is not followed."""
    from . import config

    best: tuple[float, str] | None = None
    prefix = f"health-{node}-"
    try:
        names = os.listdir(config.cache_dir())
    except OSError:
        names = []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        path = os.path.join(config.cache_dir(), name)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        if best is None or mtime > best[0]:
            best = (mtime, path)
    if best is not None and (os.geteuid() != 0 or not config.untrusted(best[1])):
        try:
            with open(best[1], encoding="utf-8") as fh:
                data = json.load(fh)
            return str(data["results_log"]), str(data["store_path"]), data.get("audit_log")
        except (OSError, ValueError, KeyError, TypeError):
            pass
    # the defaults only where slurmadm's directories exist: never create system directories for it
    return (DEFAULT_RESULTS_LOG if os.path.isdir(os.path.dirname(DEFAULT_RESULTS_LOG)) else "",
            DEFAULT_STORE if os.path.isdir(os.path.dirname(DEFAULT_STORE)) else "", None)


def record(node: str, context: str, reason: str, error: str, *, timeout_s: float = 2.0) -> list[str]:
    """Record one hook error (best effort, each sink on its own); returns what could not be written."""
    from .record import Recorder, open_store

    results_log, store_path, audit_log = last_good_paths(node)
    problems: list[str] = []
    if not results_log:
        problems.append("no results log known for this node (it never loaded its site)")
    store, why = None, "no store known for this node (it never loaded its site)"
    if store_path:
        store, why = open_store(store_path, audit_log, timeout_s=timeout_s)
    if why:
        problems.append(why)
    rec = Recorder(node=node, context=context, run_id="hook-error", results_log=results_log, store=store,
                   use_syslog=False)  # the hook's own alert went to syslog already
    rec.event("hook_error", error, error_kind=reason)
    rec.counters.append(COUNT_PREFIX + reason)
    rec.node_state[STATE_KEY] = json.dumps({"ts": time.time(), "context": context, "reason": reason, "error": error},
                                           sort_keys=True)
    rec.commit()  # one JSON line, one store transaction (the event, the count, the last error)
    problems += rec.problems
    if store is not None:
        store.close()
    return problems
