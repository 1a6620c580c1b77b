"""The store records audit events and tolerates concurrent writers."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from slurmadm.store import Store

pytestmark = pytest.mark.unit


def test_audit_event_records_who_what_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    log = tmp_path / "audit.jsonl"
    with Store(tmp_path / "s.db", audit_log=str(log)) as store:
        eid = store.audit("node.drain", "b200-003", "prolog found ECC", check="ecc-uncorrected")
        ev = store.events()[0]
    assert (ev.id, ev.actor, ev.action, ev.target, ev.reason) == (eid, "alice", "node.drain", "b200-003",
                                                                  "prolog found ECC")
    assert ev.detail == {"check": "ecc-uncorrected"}
    line = json.loads(log.read_text().splitlines()[0])
    assert line["actor"] == "alice" and line["target"] == "b200-003"


def _writer(path, n, worker):
    with Store(path) as store:
        for i in range(n):
            store.audit("test.write", f"w{worker}", f"event {i}")
            store.set_node_state(f"w{worker}", "count", str(i))


def test_concurrent_writers_all_land(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    procs = [multiprocessing.Process(target=_writer, args=(path, 50, w)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(path) as store:
        assert len(store.events(limit=10000)) == 300
        assert all(store.get_node_state(f"w{w}", "count") == "49" for w in range(6))


def test_filters(tmp_path):
    with Store(tmp_path / "s.db") as store:
        store.audit("node.drain", "a", "x")
        store.audit("node.resume", "a", "y")
        store.audit("accounts.add", "p1", "z")
        assert [e.action for e in store.events(action="node.*")] == ["node.resume", "node.drain"]
        assert [e.target for e in store.events(target="p1")] == ["p1"]


def test_audit_many_is_one_event_per_target(tmp_path):
    log = tmp_path / "audit.jsonl"
    with Store(tmp_path / "s.db", audit_log=str(log)) as store:
        ids = store.audit_many([("accounts.add-user", f"user:u{i}@p", "site", {"n": i}) for i in range(3)])
        events = store.events(action="accounts.*")
    assert len(ids) == 3 and sorted(e.id for e in events) == ids
    assert {e.target: e.detail["n"] for e in events} == {"user:u0@p": 0, "user:u1@p": 1, "user:u2@p": 2}
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["id"] for line in lines] == ids and lines[2]["target"] == "user:u2@p"
