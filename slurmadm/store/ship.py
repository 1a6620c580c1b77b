"""Ship this host's records to the central store, in the background, exactly once.

While store.url is set, triggers in the local store queue every inserted or updated row of a
shipped table in `outbox` (in order). A shipment takes the oldest `ship_batch` entries, copies
their rows to the central store with an upsert on (origin, local key) in one transaction, and
only then deletes those entries locally. A shipper killed between the two ships the same rows
again next time and the unique key keeps one copy: nothing lost, nothing doubled.

Hooks never wait for this: the periodic run (HealthCheckProgram) starts `python -m
slurmadm.store.ship` detached (`spawn`), one shipper per local store at a time (a lock file),
and `slurmadm store ship` runs it by hand or from cron. Shipped rows older than store.keep_days
are pruned locally; at most store.max_unshipped rows wait for a central store that is down.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from . import schema

LOCK_SUFFIX = ".ship.lock"
DEADLINE_S = 300.0  # a detached shipper never lingers longer than this


@dataclass
class Shipment:
    host: str
    shipped: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    remaining: int = 0
    pruned: int = 0
    dropped: int = 0
    skipped: str = ""   # why nothing was tried (another shipper holds the lock)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_name(node: str | None = None) -> str:
    import socket

    return node or socket.gethostname().split(".")[0]


def _upsert_sql(table: schema.Table, dialect: str) -> str:
    cols = [schema.ORIGIN, *schema.central_columns(table)]
    key = set(schema.central_key(table))
    q = (lambda c: f"`{c}`") if dialect == "mysql" else (lambda c: f'"{c}"')
    head = f"INSERT INTO {table.name} ({', '.join(q(c) for c in cols)}) VALUES ({', '.join('?' for _ in cols)})"
    if table.insert_only:  # shipped again after a lost acknowledgement: the copy there stays as it is
        return head.replace("INSERT INTO", "INSERT IGNORE INTO" if dialect == "mysql" else "INSERT OR IGNORE INTO", 1)
    rest = [c for c in cols if c not in key]
    if dialect == "mysql":
        return head + " ON DUPLICATE KEY UPDATE " + ", ".join(f"{q(c)} = VALUES({q(c)})" for c in rest)
    return (head + f" ON CONFLICT({', '.join(q(c) for c in schema.central_key(table))}) DO UPDATE SET "
            + ", ".join(f"{q(c)} = excluded.{q(c)}" for c in rest))


def _hosts_sql(dialect: str) -> str:
    if dialect == "mysql":
        return ("INSERT INTO hosts (host, last_arrival, last_record, records, version) VALUES (?, ?, ?, ?, ?) "
                "ON DUPLICATE KEY UPDATE last_arrival = VALUES(last_arrival), "
                "last_record = GREATEST(COALESCE(last_record, 0), COALESCE(VALUES(last_record), 0)), "
                "records = records + VALUES(records), version = VALUES(version)")
    return ("INSERT INTO hosts (host, last_arrival, last_record, records, version) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(host) DO UPDATE SET last_arrival = excluded.last_arrival, "
            "last_record = MAX(COALESCE(last_record, 0), COALESCE(excluded.last_record, 0)), "
            "records = records + excluded.records, version = excluded.version")


class Lock:
    """flock on `<local store>.ship.lock`, not waiting: a second shipper just leaves."""

    def __init__(self, local_path: str):
        self.path = local_path + LOCK_SUFFIX
        self.fd: int | None = None

    def acquire(self) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            return False

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _bound_queue(local, section, out: Shipment) -> None:
    """Past max_unshipped queued rows, drop the oldest entries (the rows stay locally until
    keep_days) and say so in an audit event, which itself ships once the store is back."""
    (count,) = local.db.execute("SELECT count(*) FROM outbox").fetchone()
    over = count - section.max_unshipped
    if over <= 0:
        return
    with local.transaction() as db:
        db.execute("DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?)", (over,))
    out.dropped = over
    local.audit("store.ship.dropped", out.host, f"central store unreachable: {over} oldest unshipped records "
                f"left out of shipping (store.max_unshipped = {section.max_unshipped})", dropped=over)


def _prune(local, section, out: Shipment, now: float) -> None:
    """Shipped rows older than keep_days leave the local store (unshipped ones stay). The
    newest row of a table always stays: SQLite gives the next row max(rowid) + 1, so row ids,
    part of the central key, are never handed out twice."""
    cutoff = now - section.keep_days * 86400
    with local.transaction() as db:
        for t in schema.shipped_tables():
            if t.retain:
                cur = db.execute(f"DELETE FROM {t.name} WHERE {t.retain} < ? AND rowid < (SELECT MAX(rowid) FROM "
                                 f"{t.name}) AND rowid NOT IN (SELECT rid FROM outbox WHERE tbl = ?)",
                                 (cutoff, t.name))
                out.pruned += cur.rowcount


def _batch(local, table_rows: list[tuple[int, str, int]], store_id: str) -> tuple[dict[str, list[tuple]], float | None]:
    """The rows behind one batch of outbox entries, per table, in queue order (a row queued
    twice, inserted then updated, ships once with its current values)."""
    order: dict[str, list[int]] = {}
    for _seq, tbl, rid in table_rows:
        rids = order.setdefault(tbl, [])
        if rid in rids:
            rids.remove(rid)
        rids.append(rid)
    out: dict[str, list[tuple]] = {}
    newest: float | None = None
    for tbl, rids in order.items():
        try:
            table = schema.by_name(tbl)
        except StopIteration:
            continue  # a table this slurmadm no longer ships
        names = [c.name for c in schema.columns(table)]
        found: dict[int, tuple] = {}
        for i in range(0, len(rids), 500):
            chunk = rids[i:i + 500]
            cols = ", ".join(f'"{n}"' for n in names)
            sql = f"SELECT rowid AS _rid, {cols} FROM {tbl} WHERE rowid IN ({', '.join('?' for _ in chunk)})"
            for r in local.db.execute(sql, chunk):
                found[r["_rid"]] = tuple(r[n] for n in names)
                if "ts" in names and r["ts"] is not None:
                    newest = r["ts"] if newest is None else max(newest, r["ts"])
        extra = () if table.key else (store_id,) if schema.rowid_column(table) else None
        rows = []
        for rid in rids:
            if rid in found:  # a row pruned or replaced since it was queued has nothing to ship
                rows.append((*extra, *found[rid]) if extra is not None else (store_id, rid, *found[rid]))
        out[tbl] = rows
    return out, newest


def ship(section, *, host: str, local_path: str, audit_log: str | None = None, central=None,
         deadline: float | None = None, as_node: bool = False) -> Shipment:
    """Ship everything queued in `local_path` to the central store of `section` (a site's
    `[store]`). `central`: an open connection to reuse. `as_node`: connect as this compute
    node's own account (store.node_user), whose rows MariaDB itself marks with its origin.
    Raises UnreachableError / UsageError when the central store cannot be used; what was
    committed before stays committed."""
    from . import Store
    from . import central as central_mod
    from .. import __version__

    started = time.monotonic()
    deadline = deadline if deadline is not None else started + DEADLINE_S
    out = Shipment(host=host)
    lock = Lock(local_path)
    if not lock.acquire():
        out.skipped = f"another shipper holds {lock.path}"
        return out
    own = central is None
    local = None
    try:
        local = Store(local_path, audit_log=audit_log, ship=True, timeout_s=10.0)
        _bound_queue(local, section, out)
        if own:
            central = central_mod.connect(section, node=host if as_node else None)
        central_mod.require_current(central)
        sql = {t.name: _upsert_sql(t, central.dialect) for t in schema.shipped_tables()}
        (store_id,) = local.db.execute("SELECT value FROM store_info WHERE name = 'store_id'").fetchone()
        while time.monotonic() < deadline:
            entries = [(r["seq"], r["tbl"], r["rid"]) for r in
                       local.db.execute("SELECT seq, tbl, rid FROM outbox ORDER BY seq LIMIT ?", (section.ship_batch,))]
            rows, newest = _batch(local, entries, store_id)
            n = sum(len(v) for v in rows.values())
            try:
                for tbl, values in rows.items():
                    if values:
                        central.executemany(sql[tbl], [(host, *v) for v in values])
                central.execute(_hosts_sql(central.dialect), (host, time.time(), newest, n, __version__))
                central.commit()
            except BaseException:
                central.rollback()
                raise
            if entries:
                with local.transaction() as db:
                    db.execute("DELETE FROM outbox WHERE seq <= ?", (entries[-1][0],))
            out.batches += 1
            out.shipped += n
            for tbl, values in rows.items():
                out.tables[tbl] = out.tables.get(tbl, 0) + len(values)
            if len(entries) < section.ship_batch:
                break
        _prune(local, section, out, time.time())
        (out.remaining,) = local.db.execute("SELECT count(*) FROM outbox").fetchone()
    finally:
        if own and central is not None:
            central.close()
        if local is not None:
            local.close()
        lock.release()
        out.seconds = round(time.monotonic() - started, 3)
    return out


def ships_as_node(site, host: str) -> bool:
    """A compute node of the site ships as its own account once store.node_user is set."""
    return site.store.node_user is not None and host in site.node_names


def spawn(site_file: str, node: str) -> None:
    """Start a detached shipper for this node and return at once (the periodic hook calls it):
    its own session, no inherited descriptors (slurmd waits on none of them), no secret in argv."""
    try:
        subprocess.Popen([sys.executable, "-I", "-m", "slurmadm.store.ship", "--node", node, "--site", site_file,
                          "--quiet"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, cwd="/")
    except OSError:
        pass  # nothing to ship with: the records wait locally for the next run


def main(argv: list[str] | None = None) -> int:
    """`python -I -m slurmadm.store.ship --node N --site FILE`: one shipment, for cron or the
    periodic hook. Exit 0 shipped (or another shipper is at it), 2 site/usage, 3 unreachable."""
    import argparse
    import json
    import syslog
    import threading

    ap = argparse.ArgumentParser(prog="python -m slurmadm.store.ship", description=main.__doc__.splitlines()[0])
    ap.add_argument("--node", help="ship as this Slurm node (default: $SLURMD_NODENAME, then the host name)")
    ap.add_argument("--site", help="site file (default: $SLURMADM_SITE, then /etc/slurmadm/site.toml)")
    ap.add_argument("--quiet", action="store_true", help="report problems to syslog only")
    args = ap.parse_args(argv)

    def expire() -> None:
        syslog.syslog(syslog.LOG_WARNING, f"gave up after {DEADLINE_S:g} s; the rest ships next time")
        os._exit(3)

    timer = threading.Timer(DEADLINE_S + 30, expire)  # a hung network call must not keep it alive
    timer.daemon = True
    timer.start()
    syslog.openlog("slurmadm-ship", syslog.LOG_PID, syslog.LOG_DAEMON)
    from ..errors import SlurmadmError
    from ..site import load_site

    node = args.node or os.environ.get("SLURMD_NODENAME")
    try:
        site = load_site(args.site)
        if site.store.url is None:
            return 0
        host = host_name(node)
        out = ship(site.store, host=host, local_path=site.store.local_path(node),
                   audit_log=site.store.audit_log, as_node=ships_as_node(site, host))
    except SlurmadmError as exc:
        syslog.syslog(syslog.LOG_WARNING, f"not shipped: {exc}")
        if not args.quiet:
            print(f"slurmadm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if not args.quiet:
        print(json.dumps(out.to_dict(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
