"""Issue 24: the hash-chained audit trail, append-only events in the central store, the grants
for the nodes' accounts (no password shown), and secrets files refused when others can read
them. tests/integration/test_security.py runs the grants and triggers on the dev cluster's MariaDB."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

from slurmadm.errors import UsageError
from slurmadm.site.store import StoreSection
from slurmadm.store import Store, central, chain, grants, read, schema
from slurmadm.store.ship import ship

pytestmark = pytest.mark.unit


def local_chain(path):
    with Store(path) as s:
        return chain.verify(read.Reader(s, central=False, host="n1"))


def test_every_event_is_chained_and_verify_finds_an_edit_and_a_gap(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        s.audit("node.drain", "n1", "one", n=1)
        s.audit_many([("node.drain", "n2", "two", {}), ("node.drain", "n3", "three", {})])
        s.audit("node.resume", "n1", "four")
    out = local_chain(path)
    assert out["ok"] and out["chains"][0]["events"] == 4 and out["chains"][0]["first_id"] == 1
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET reason = 'nothing happened' WHERE id = 2")
    db.commit()
    out = local_chain(path)
    assert not out["ok"] and [(p["id"], p["kind"]) for p in out["chains"][0]["problems"]] == [(2, "edited")]
    db.execute("UPDATE events SET reason = 'two' WHERE id = 2")
    db.execute("DELETE FROM events WHERE id = 3")
    db.commit()
    out = local_chain(path)
    assert [(p["id"], p["kind"]) for p in out["chains"][0]["problems"]] == [(4, "gap")]


def test_an_edit_that_rehashes_the_event_still_shows_as_a_gap(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        for i in range(3):
            s.audit("a", f"t{i}", "r")
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    row = dict(db.execute("SELECT * FROM events WHERE id = 2").fetchone())
    row["reason"] = "forged"
    db.execute("UPDATE events SET reason = ?, hash = ? WHERE id = 2", ("forged", chain.row_hash(row)))
    db.commit()
    assert [(p["id"], p["kind"]) for p in local_chain(path)["chains"][0]["problems"]] == [(3, "gap")]


def test_update_events_appends_instead_of_editing(tmp_path):
    with Store(tmp_path / "s.db") as s:
        (i,) = s.audit_many([("accounts.add-user", "u", "r", {"status": "started"})])
        s.update_events([i], status="done")
        events = s.events()
    assert [(e.detail["status"], e.detail.get("follows")) for e in reversed(events)] == [("started", None), ("done", i)]
    assert local_chain(tmp_path / "s.db")["ok"]


def test_a_store_of_version_3_gets_the_hash_columns_and_keeps_its_events(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for t in schema.TABLES:  # version 3's local store: events without the hash columns
        if t.where != "central" and t.since <= 3:
            db.executescript(t.ddl if t.name != "events" else
                             "CREATE TABLE events (id INTEGER PRIMARY KEY, ts REAL NOT NULL, actor TEXT NOT NULL, "
                             "action TEXT NOT NULL, target TEXT NOT NULL, reason TEXT NOT NULL, detail TEXT NOT NULL)")
    assert "hash" not in [r[1] for r in db.execute("PRAGMA table_info(events)")]
    db.execute("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (1, 'a', 'x', 't', 'r', '{}')")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    with Store(path) as s:
        s.audit("y", "t", "r")
    out = local_chain(path)["chains"][0]
    assert (out["events"], out["unchained"], out["first_id"], out["problems"]) == (2, 1, 2, [])


def test_central_events_are_append_only_and_a_reshipped_event_stays_as_it_was(tmp_path):
    sec = StoreSection(path=str(tmp_path / "{node}.db"), url=f"sqlite://{tmp_path}/central.db")
    c = central.connect(sec)
    central.migrate(c)
    local = sec.local_path("n1")
    with Store(local, ship=True) as s:
        s.audit("node.drain", "n1", "r")
        assert ship(sec, host="n1", local_path=local, central=c).shipped == 1
        with s.transaction() as db:  # queue it again, as a shipper killed before its local cleanup would
            db.execute("INSERT INTO outbox (tbl, rid) SELECT 'events', id FROM events")
    assert ship(sec, host="n1", local_path=local, central=c).shipped == 1
    assert c.query("SELECT count(*) AS n FROM events")[0]["n"] == 1
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        c.execute("UPDATE events SET reason = 'nothing'")
    out = chain.verify(read.Reader(c, central=True, host="head"))
    assert out["ok"] and out["chains"][0]["origin"] == "n1"


def test_the_site_refuses_a_node_user_without_a_node_mark():
    with pytest.raises(ValueError, match="must contain"):
        StoreSection(node_user="slurmadm-nodes")
    with pytest.raises(ValueError, match="in the file name"):
        StoreSection(node_user="s-{node}", node_password_file="/etc/slurmadm/store.password")
    with pytest.raises(ValueError, match="host pattern"):
        StoreSection(node_account_host="10.0.0.1' OR 1")
    assert StoreSection(node_user="s-{node}").node_account("b200-001") == "s-b200-001"


def test_grants_are_least_privilege_and_never_show_a_password(tmp_path):
    sec = StoreSection(url="mysql://slurmadm@head/slurmadm", node_user="sa-{node}",
                       node_password_file=str(tmp_path / "pw" / "{node}.password"), node_account_host="10.1.%")
    site = SimpleNamespace(store=sec, node_names=["b200-001", "b200-002"])
    planned = grants.plan(site)
    shown = "\n".join(s.shown(sec) for s in planned)
    assert f"IDENTIFIED BY '<the password in {tmp_path}/pw/b200-001.password>'" in shown
    assert "GRANT INSERT ON `slurmadm`.`events` TO 'sa-b200-001'@'10.1.%'" in shown
    assert "GRANT INSERT ON `slurmadm`.`check_results` TO 'sa-b200-001'@'10.1.%'" in shown
    assert "DELETE" not in shown and "ALL PRIVILEGES ON" not in shown and " ON *.*" not in shown
    sql, args = planned[0].real({"b200-001": "pw'?%"})
    assert args == ["pw'?%"] and "pw'" not in sql and sql.endswith("IDENTIFIED BY ?")
    passwords, made = grants.ensure_passwords(site, ["b200-001"])
    assert made == [f"{tmp_path}/pw/b200-001.password"] and len(passwords["b200-001"]) >= 24
    assert (tmp_path / "pw" / "b200-001.password").stat().st_mode & 0o777 == 0o600
    assert grants.ensure_passwords(site, ["b200-001"]) == (passwords, [])


def test_grants_need_mariadb_and_node_user():
    with pytest.raises(UsageError, match="node_user"):
        grants.plan(SimpleNamespace(store=StoreSection(url="mysql://u@h/d"), node_names=["n1"]))
    with pytest.raises(UsageError, match="MariaDB"):
        grants.plan(SimpleNamespace(store=StoreSection(url="sqlite:////tmp/x.db", node_user="s-{node}"),
                                    node_names=["n1"]))


def test_excess_names_what_a_nodes_account_should_not_have():
    ok = ["GRANT USAGE ON *.* TO `s-n1`@`%` IDENTIFIED BY PASSWORD '*AB'",
          "GRANT INSERT ON `slurmadm`.`events` TO `s-n1`@`%`",
          "GRANT SELECT, INSERT, UPDATE ON `slurmadm`.`node_state` TO `s-n1`@`%`"]
    assert grants.excess(ok, "slurmadm") == []
    assert grants.excess(["GRANT ALL PRIVILEGES ON `slurmadm`.* TO `slurmadm`@`%` WITH GRANT OPTION"],
                         "slurmadm") == ["ALL PRIVILEGES on slurmadm.*", "GRANT OPTION"]
    assert grants.excess(["GRANT INSERT, DELETE, UPDATE ON `slurmadm`.`events` TO `s-n1`@`%`"],
                         "slurmadm") == ["DELETE, UPDATE on slurmadm.events"]


def test_mysql_triggers_take_the_origin_from_the_account():
    sql = "\n".join(schema.guard_triggers(schema.by_name("check_results"), "mysql"))
    assert "SET NEW.`origin` = COALESCE((SELECT a.origin FROM store_accounts a WHERE a.account = " \
           "SUBSTRING_INDEX(USER(), '@', 1)), NEW.`origin`)" in sql
    hosts = "\n".join(schema.guard_triggers(schema.by_name("hosts"), "mysql"))
    assert "SET NEW.`host` = COALESCE(" in hosts
    events = "\n".join(schema.guard_triggers(schema.by_name("events"), "mysql"))
    assert "append-only" in events


def central_with_results(tmp_path, rows):
    """A central SQLite store holding check_results rows (origin, node, run_id, status, ts)."""
    sec = StoreSection(path=str(tmp_path / "{node}.db"), url=f"sqlite://{tmp_path}/central.db")
    c = central.connect(sec)
    central.migrate(c)
    c.executemany("INSERT INTO check_results (origin, store_id, id, ts, run_id, node, context, check_id, status, "
                  "severity, detail, value, duration_ms) VALUES (?, 's', ?, ?, ?, ?, 'periodic', 'gpu-count', ?, "
                  "'critical', '', NULL, 1)",
                  [(o, i, ts, run, node, st) for i, (o, node, run, st, ts) in enumerate(rows)])
    c.execute("INSERT INTO store_accounts (account, origin) VALUES ('sa-n1', 'n1'), ('sa-n2', 'n2')")
    c.commit()
    return sec, c


def test_the_webhooks_clean_runs_count_only_the_nodes_own_rows(tmp_path):
    from contextlib import contextmanager

    from slurmadm.monitor.webhook import Isolator

    # n2 failed its last own run; n1 ships three "clean" runs in n2's name after it
    sec, c = central_with_results(tmp_path, [("n2", "n2", "a", "fail", 10.0), ("n1", "n2", "f1", "pass", 11.0),
                                             ("n1", "n2", "f2", "pass", 12.0), ("n1", "n2", "f3", "pass", 13.0),
                                             ("n2", "n2", "b", "pass", 14.0)])

    @contextmanager
    def results():
        yield read.Reader(c, central=True, host="head")

    site = SimpleNamespace(monitor=SimpleNamespace(actions={}), node_names=["n1", "n2"],
                           health=SimpleNamespace(resume_after_clean_runs=3))
    iso = Isolator(site=site, backend=None, store_factory=None, results_factory=results)
    assert iso.clean_runs_since("n2", 0.0) == 1
    r = read.Reader(c, central=True, host="head")
    assert {(x["host"], x["run_id"]) for x in read.history(r, node="n2")} == {("n2", "a"), ("n2", "b")}
    assert [(x["host"], x["status"]) for x in read.latest_results(r)] == [("n2", "pass")]


@pytest.mark.parametrize("secret", ["store", "node", "bmc", "webhook", "ssh"])
def test_every_secret_file_is_refused_in_one_line_when_others_can_read_it(tmp_path, monkeypatch, secret):
    """Issue 24: the store password, a node's store password, the BMC password, the webhook
    token and the fleet's SSH key, each refused when group or others may read it."""
    from slurmadm.bmc.creds import load_credentials
    from slurmadm.fleet.ssh import ParamikoRemote
    from slurmadm.monitor.webhook import read_token
    from slurmadm.site.fleet import FleetSection

    monkeypatch.delenv("SLURMADM_STORE_PASSWORD", raising=False)
    monkeypatch.delenv("SLURMADM_BMC_PASSWORD", raising=False)
    path = tmp_path / "secret"
    path.write_text("a-secret-of-some-length-1234\n")
    load = {
        "store": lambda: central.password(StoreSection(url="mysql://u@h/d", password_file=str(path))),
        "node": lambda: central.node_password(StoreSection(url="mysql://u@h/d", node_user="s-{node}",
                                                           node_password_file=str(tmp_path / "{node}")), "secret"),
        "bmc": lambda: load_credentials("admin", str(path), env={}),
        "webhook": lambda: read_token(str(path)),
        "ssh": lambda: ParamikoRemote(FleetSection(key_file=str(path), known_hosts=str(tmp_path / "kh"))),
    }[secret]
    (tmp_path / "kh").write_text("")
    for mode in (0o640, 0o604):
        path.chmod(mode)
        with pytest.raises(UsageError) as exc:
            load()
        msg = str(exc.value)
        assert "readable by others" in msg and "\n" not in msg and "a-secret" not in msg


def test_doctor_says_when_a_listener_is_on_all_interfaces_without_tls(tmp_path):
    import bcrypt
    import yaml

    from slurmadm.devcluster.redfish_emulator import make_certificate
    from slurmadm.doctor import Context
    from slurmadm.doctor.checks import listeners
    from slurmadm.site.monitor import MonitorSection

    def check(**kw):
        return listeners(Context(site_file=None, site=SimpleNamespace(monitor=MonitorSection(**kw))))

    f = check()
    assert f.status == "warn" and "monitor.node_listen = 0.0.0.0:9410" in f.summary
    assert "monitor.webhook_listen" not in f.data["all_interfaces"]  # 127.0.0.1 by default
    f = check(node_listen="10.0.0.5:9410", head_listen="127.0.0.1:9411")
    assert f.status == "ok"
    make_certificate(tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem")
    (tmp_path / "web.yml").write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "c.pem", "key_file": "k.pem"},
        "basic_auth_users": {"p": bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode()}}))
    f = check(web_config_file=str(tmp_path / "web.yml"), webhook_listen="0.0.0.0:9412")
    assert f.status == "ok" and f.data["tls"] and f.data["basic_auth"]


def test_store_prune_is_told_from_events_removed_by_someone_else(tmp_path):
    from slurmadm.store import prune

    sec = StoreSection(path=str(tmp_path / "{node}.db"), url=f"sqlite://{tmp_path}/central.db")
    c = central.connect(sec)
    central.migrate(c)
    local = sec.local_path("n1")
    with Store(local, ship=True) as s:
        for i in range(5):
            s.audit("a", f"t{i}", "r")
        s.db.execute("UPDATE events SET ts = 1000 + id WHERE id <= 2")  # two old ones (locally: no trigger)
    ship(sec, host="n1", local_path=local, central=c)
    r = read.Reader(c, central=True, host="head")
    p = prune.plan(c, 1)
    assert p["rows"]["events"] == 2 and [a["id"] for a in p["anchors"]] == [2]
    prune.apply(c, p)
    out = chain.verify(r)
    assert out["ok"] and out["chains"][0]["pruned_before"] and out["chains"][0]["first_id"] == 3
    c.execute("DELETE FROM events WHERE id = 3")  # the oldest left, removed by someone else
    c.commit()
    out = chain.verify(r)
    assert [(p["id"], p["kind"]) for p in out["chains"][0]["problems"]] == [(4, "gap")]


def test_bmc_recovers_first_health_run_is_the_nodes_own(tmp_path):
    from contextlib import contextmanager

    from slurmadm.bmc.recover import Recovery

    # after the power cycle (t=10) n1 ships a clean run in n2's name before n2's own failing one
    sec, c = central_with_results(tmp_path, [("n1", "n2", "forged", "pass", 11.0), ("n2", "n2", "own", "fail", 12.0)])

    @contextmanager
    def results():
        yield read.Reader(c, central=True, host="head")

    rec = Recovery.__new__(Recovery)
    rec.results_factory, rec.store = results, None
    rec.cfg = SimpleNamespace(health_checks=[])
    rec._drains = lambda node, check, status: True
    ok, detail = rec._health("n2", 10.0)
    assert not ok and detail.startswith("gpu-count")
