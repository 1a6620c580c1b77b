"""The explicit schema, its versions, and shipping to a central store (a central SQLite file
here: the same code path as MariaDB but for the driver; tests/integration/test_store_central.py
runs it against the dev cluster's MariaDB)."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3

import pytest

from slurmadm.errors import UnreachableError, UsageError
from slurmadm.site.store import StoreSection, parse_url
from slurmadm.store import Store, central, read, schema
from slurmadm.store.ship import Lock, ship

pytestmark = pytest.mark.unit


def section(tmp_path, **kw) -> StoreSection:
    return StoreSection(path=str(tmp_path / "stores" / "{node}.db"), url=f"sqlite://{tmp_path}/central.db", **kw)


def migrated(sec: StoreSection):
    c = central.connect(sec)
    central.migrate(c)
    return c


def count(c, table: str, **where) -> int:
    sql = f"SELECT count(*) AS n FROM {table}" + (" WHERE " + " AND ".join(f"{k} = ?" for k in where) if where else "")
    return c.query(sql, tuple(where.values()))[0]["n"]


def write_results(path: str, node: str, n: int, ts: float = 1_000.0) -> None:
    with Store(path, ship=True) as s, s.transaction() as db:
        db.executemany(
            "INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value, "
            "duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [(ts + i, f"r{i}", node, "periodic", "gpu-count", "pass", "critical", "", None, 1.0) for i in range(n)])


# ------------------------------------------------------------------------------------ schema

def test_no_table_uses_a_column_name_the_central_store_adds():
    for t in schema.TABLES:
        names = {c.name for c in schema.columns(t)}
        if t.shipped:
            assert not names & {schema.ORIGIN, schema.STORE_ID, "seq", "local_id"}, t.name
            assert set(t.key) <= names, t.name
        if t.retain:
            assert t.retain in names


def test_schema_version_follows_the_tables_and_migrations():
    assert schema.SCHEMA_VERSION == max([t.since for t in schema.TABLES] + [m.version for m in schema.MIGRATIONS])


def test_a_store_made_before_versions_is_migrated_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)  # what slurmadm wrote before the schema had versions
    db.executescript(schema.by_name("events").ddl + schema.by_name("check_results").ddl)
    db.execute("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (1, 'a', 'x', 't', 'r', '{}')")
    db.commit()
    db.close()
    with Store(path) as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert [e.action for e in s.events()] == ["x"]
        assert {r["name"] for r in s.query("SELECT name FROM sqlite_master WHERE type='table'")} >= {
            "burnin_sweeps", "node_state", "outbox"}


def test_an_older_slurmadm_refuses_a_newer_local_store(tmp_path):
    path = tmp_path / "new.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(UsageError, match=rf"schema version {schema.SCHEMA_VERSION + 1} is newer than this slurmadm .* upgrade slurmadm"):
        Store(path)


def test_an_explicit_migration_runs_once_locally_and_centrally(tmp_path, monkeypatch):
    sec = section(tmp_path)
    local = sec.local_path("n1")
    Store(local).close()
    migrated(sec).close()
    now = schema.SCHEMA_VERSION
    step = schema.Migration(now + 1, "a note per event", local=["ALTER TABLE events ADD COLUMN note TEXT"],
                            central_sqlite=["ALTER TABLE events ADD COLUMN note TEXT"])
    monkeypatch.setattr(schema, "MIGRATIONS", [step])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    with Store(local) as s:
        assert "note" in {r["name"] for r in s.query("PRAGMA table_info(events)")}
    Store(local).close()  # a second open finds the new version and changes nothing
    c = central.connect(sec)
    with pytest.raises(UsageError, match=f"schema version {now}, this slurmadm needs {now + 1}: run `slurmadm store migrate`"):
        central.require_current(c)
    found, steps = central.migrate(c)
    assert found == now and steps[1:] == ["ALTER TABLE events ADD COLUMN note TEXT"]
    assert central.migrate(c) == (now + 1, [])
    central.require_current(c)
    c.close()


def test_an_older_slurmadm_refuses_a_newer_central_store(tmp_path):
    sec = section(tmp_path)
    c = migrated(sec)
    c.execute("UPDATE schema_info SET value = '9' WHERE name = 'version'")
    c.commit()
    with pytest.raises(UsageError, match="central store .* schema version 9 is newer than this slurmadm"):
        central.require_current(c)
    with pytest.raises(UsageError, match="newer"):
        central.plan(c)
    with pytest.raises(UsageError, match="newer"):
        ship(sec, host="n1", local_path=sec.local_path("n1"), central=c)
    c.close()


def test_central_ddl_for_mysql_keys_text_columns_it_indexes():
    ddl = "\n".join(schema.central_ddl(schema.by_name("check_results"), "mysql"))
    assert "`node` VARCHAR(191) NOT NULL" in ddl and "`detail` LONGTEXT NOT NULL" in ddl
    assert "UNIQUE KEY check_results_origin_key (`origin`, `store_id`, `id`)" in ddl
    assert "seq BIGINT AUTO_INCREMENT PRIMARY KEY" in ddl and "ENGINE=InnoDB" in ddl


# ---------------------------------------------------------------------------------- shipping

def test_records_ship_once_in_order_with_their_host(tmp_path):
    sec = section(tmp_path)
    c = migrated(sec)
    write_results(sec.local_path("b200-001"), "b200-001", 25)
    first = ship(sec, host="b200-001", local_path=sec.local_path("b200-001"), central=c)
    again = ship(sec, host="b200-001", local_path=sec.local_path("b200-001"), central=c)
    assert (first.shipped, first.remaining, again.shipped) == (25, 0, 0)
    rows = c.query("SELECT origin, id, run_id FROM check_results ORDER BY seq")
    assert [r["id"] for r in rows] == list(range(1, 26)) and {r["origin"] for r in rows} == {"b200-001"}
    host = c.query("SELECT * FROM hosts")[0]
    assert host["host"] == "b200-001" and host["records"] == 25 and host["last_record"] == 1024.0
    c.close()


def test_a_store_that_had_rows_before_shipping_was_turned_on_ships_them_too(tmp_path):
    sec = section(tmp_path)
    local = sec.local_path("n1")
    with Store(local) as s:
        s.audit("node.drain", "n1", "before")
    c = migrated(sec)
    assert ship(sec, host="n1", local_path=local, central=c).shipped == 1
    assert [e["reason"] for e in read.events(read.Reader(c, True, "head"))] == ["before"]


def test_a_row_changed_after_shipping_replaces_its_central_copy(tmp_path):
    sec = section(tmp_path)
    c = migrated(sec)
    local = sec.local_path("n1")
    with Store(local, ship=True) as s:
        s.set_node_state("n1", "health.clean_runs", "1")
        ship(sec, host="n1", local_path=local, central=c)
        s.set_node_state("n1", "health.clean_runs", "2")
        ship(sec, host="n1", local_path=local, central=c)
    assert c.query("SELECT origin, node, key, value FROM node_state") == [
        {"origin": "n1", "node": "n1", "key": "health.clean_runs", "value": "2"}]


def test_a_shipper_killed_between_central_commit_and_local_cleanup_duplicates_nothing(tmp_path, monkeypatch):
    sec = section(tmp_path, ship_batch=10)
    c = migrated(sec)
    local = sec.local_path("n1")
    write_results(local, "n1", 25)
    real = Store.transaction
    calls = {"n": 0}

    def dies_on_second_cleanup(self):
        calls["n"] += 1
        if calls["n"] == 2:  # the second batch is committed centrally, then the process "dies"
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(Store, "transaction", dies_on_second_cleanup)
    with pytest.raises(KeyboardInterrupt):
        ship(sec, host="n1", local_path=local, central=c)
    monkeypatch.setattr(Store, "transaction", real)
    assert count(c, "check_results") == 20
    with Store(local) as s:
        assert s.query("SELECT count(*) AS n FROM outbox")[0]["n"] == 15  # batch 2 still queued locally
    out = ship(sec, host="n1", local_path=local, central=c)
    assert out.shipped == 15 and out.remaining == 0
    assert count(c, "check_results") == 25
    assert len({r["id"] for r in c.query("SELECT id FROM check_results")}) == 25


def _ship_proc(tmp_path, node, n):
    sec = section(tmp_path, ship_batch=37)
    write_results(sec.local_path(node), node, n)
    ship(sec, host=node, local_path=sec.local_path(node))


def test_two_hosts_shipping_at_once_lose_and_duplicate_nothing(tmp_path):
    sec = section(tmp_path)
    migrated(sec).close()
    procs = [multiprocessing.Process(target=_ship_proc, args=(tmp_path, f"n{i}", 300)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    c = central.connect(sec)
    assert count(c, "check_results", origin="n0") == count(c, "check_results", origin="n1") == 300
    assert {r["host"]: r["records"] for r in c.query("SELECT host, records FROM hosts")} == {"n0": 300, "n1": 300}


def test_a_second_shipper_on_the_same_store_leaves_at_once(tmp_path):
    sec = section(tmp_path)
    local = sec.local_path("n1")
    Store(local).close()
    held = Lock(local)
    assert held.acquire()
    try:
        out = ship(sec, host="n1", local_path=local)
    finally:
        held.release()
    assert out.skipped.startswith("another shipper holds") and out.shipped == 0


def test_central_store_down_keeps_records_queued_and_bounded(tmp_path):
    sec = StoreSection(path=str(tmp_path / "n1.db"), url="mysql://slurmadm@127.0.0.1:9/slurmadm",
                       connect_timeout_s=1, max_unshipped=1000)
    os.environ["SLURMADM_STORE_PASSWORD"] = "pw-very-secret"
    try:
        write_results(sec.local_path("n1"), "n1", 1200)
        with pytest.raises(UnreachableError) as exc:
            ship(sec, host="n1", local_path=sec.local_path("n1"))
    finally:
        del os.environ["SLURMADM_STORE_PASSWORD"]
    assert "pw-very-secret" not in str(exc.value) and "127.0.0.1" in str(exc.value)
    with Store(sec.local_path("n1")) as s:
        queued = s.query("SELECT count(*) AS n FROM outbox")[0]["n"]
        dropped = s.events(action="store.ship.dropped")
    assert queued <= 1001 and dropped and dropped[0].detail["dropped"] == 200


def test_a_server_that_accepts_and_never_speaks_costs_the_connect_timeout(tmp_path):
    """A hung MariaDB (or a firewall that accepts): the greeting is waited for connect_timeout_s,
    not the 30 s a query may take, so `slurmadm audit log` on the head fails within it."""
    import socket
    import time

    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(8)
    sec = StoreSection(path=str(tmp_path / "n1.db"), url=f"mysql://slurmadm@127.0.0.1:{hole.getsockname()[1]}/slurmadm",
                       connect_timeout_s=1)
    os.environ["SLURMADM_STORE_PASSWORD"] = "pw-very-secret"
    started = time.monotonic()
    try:
        with pytest.raises(UnreachableError) as exc:
            central.connect(sec)
    finally:
        del os.environ["SLURMADM_STORE_PASSWORD"]
        hole.close()
    # the old wait was the 30 s read timeout: 20 s leaves a loaded machine 19 s of slack
    assert time.monotonic() - started < 20
    assert "timed out" in str(exc.value) and "pw-very-secret" not in str(exc.value)


def test_shipped_rows_past_keep_days_are_pruned_unshipped_ones_stay(tmp_path):
    sec = section(tmp_path, keep_days=1)
    c = migrated(sec)
    local = sec.local_path("n1")
    write_results(local, "n1", 5, ts=1.0)                 # ancient: shipped, then pruned (but the newest)
    assert ship(sec, host="n1", local_path=local, central=c).pruned == 4
    with Store(local, ship=True) as s:
        s.db.execute("DROP TRIGGER ship_check_results_ins")  # one more ancient row, never queued...
        s.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                     " duration_ms) VALUES (2, 'x', 'n1', 'periodic', 'c', 'pass', 'info', '', 1)")
        s.db.execute("INSERT INTO outbox (tbl, rid) VALUES ('check_results', last_insert_rowid())")  # ...by hand
    c.execute("UPDATE schema_info SET value = '9' WHERE name = 'version'")  # central refuses: nothing ships
    c.commit()
    with pytest.raises(UsageError):
        ship(sec, host="n1", local_path=local, central=c)
    with Store(local) as s:
        assert s.query("SELECT count(*) AS n FROM check_results")[0]["n"] == 2  # the newest, and the unshipped
    c.execute("UPDATE schema_info SET value = ? WHERE name = 'version'", (str(schema.SCHEMA_VERSION),))
    c.commit()
    out = ship(sec, host="n1", local_path=local, central=c)
    assert out.shipped == 1 and out.pruned == 1  # shipped first, then pruned
    assert count(c, "check_results") == 6 and len({r["id"] for r in c.query("SELECT id FROM check_results")}) == 6


def test_a_recreated_local_store_never_overwrites_what_the_host_shipped_before(tmp_path):
    sec = section(tmp_path)
    c = migrated(sec)
    local = sec.local_path("n1")
    write_results(local, "n1", 3)
    ship(sec, host="n1", local_path=local, central=c)
    os.unlink(local)  # the node was reinstalled: a new store, ids from 1 again
    write_results(local, "n1", 3, ts=5_000.0)
    ship(sec, host="n1", local_path=local, central=c)
    assert count(c, "check_results", origin="n1") == 6
    assert len({r["store_id"] for r in c.query("SELECT store_id FROM check_results")}) == 2


# ------------------------------------------------------------------------------ credentials

def test_url_refuses_a_password_and_names_what_is_wrong():
    for url in ("mysql://slurmadm:hunter2@db/slurmadm", "postgres://u:hunter2@db/x", "mysql://u:hunter2@db:99999/x"):
        with pytest.raises(ValueError, match="no password in the URL") as exc:
            parse_url(url)
        assert "hunter2" not in str(exc.value)
    with pytest.raises(ValueError, match="scheme must be"):
        parse_url("postgres://u@h/d")
    with pytest.raises(ValueError, match="database name"):
        parse_url("mysql://u@h/")
    u = parse_url("mariadb://slurmadm@head-01:3307/slurmadm?unix_socket=/run/mysqld/mysqld.sock")
    assert (u.user, u.host, u.port, u.database, u.unix_socket, u.dialect) == (
        "slurmadm", "head-01", 3307, "slurmadm", "/run/mysqld/mysqld.sock", "mysql")


def test_password_file_must_be_root_only(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMADM_STORE_PASSWORD", raising=False)
    pw = tmp_path / "store.password"
    sec = StoreSection(url="mysql://u@h/d", password_file=str(pw))
    with pytest.raises(UsageError, match="missing"):
        central.password(sec)
    pw.write_text("s3cret\n")
    pw.chmod(0o644)
    with pytest.raises(UsageError, match=r"readable by others \(mode 0644\); chmod 600"):
        central.password(sec)
    pw.chmod(0o600)
    assert central.password(sec) == "s3cret"
    monkeypatch.setenv("SLURMADM_STORE_PASSWORD", "from-env")
    assert central.password(sec) == "from-env"


def test_node_mark_only_in_the_file_name():
    assert StoreSection(path="/var/lib/slurmadm/{node}.db").local_path("b200-007") == "/var/lib/slurmadm/b200-007.db"
    with pytest.raises(ValueError, match="file name only"):
        StoreSection(path="/var/lib/{node}/slurmadm.db")


def test_the_site_refuses_slurmdbds_database(tmp_path):
    from slurmadm.errors import SiteError
    from slurmadm.site import parse_site
    from tests.unit.siteedit import edited, put

    with pytest.raises(SiteError) as exc:
        parse_site(edited(put("store.url", "mysql://slurmadm@head-01/slurm_acct_db")), source="site.toml")
    assert "store.url: database 'slurm_acct_db' is slurmdbd's" in str(exc.value)
