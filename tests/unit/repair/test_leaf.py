"""Leaf incidents (slurmadm/repair/leaf.py): port faults on k nodes under one leaf -> one incident."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from slurmadm.repair import leaf
from slurmadm.store import Store

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
SITE = SimpleNamespace(scalable_units=[("su1", [f"b200-{i:03d}" for i in range(1, 9)]),
                                       ("su2", [f"b200-{i:03d}" for i in range(9, 17)])])
INCIDENTS = """CREATE TABLE incidents (id TEXT PRIMARY KEY, node TEXT NOT NULL, part_kind TEXT NOT NULL,
 part_key TEXT NOT NULL, slot TEXT NOT NULL DEFAULT '', serial TEXT NOT NULL DEFAULT '', uuid TEXT NOT NULL DEFAULT '',
 class TEXT NOT NULL, state TEXT NOT NULL, step TEXT NOT NULL DEFAULT '', outcome TEXT NOT NULL DEFAULT '',
 rung INTEGER NOT NULL DEFAULT 0, opened_ts REAL NOT NULL, updated_ts REAL NOT NULL, closed_ts REAL,
 count INTEGER NOT NULL DEFAULT 1, evidence TEXT NOT NULL DEFAULT '[]', source TEXT NOT NULL DEFAULT '',
 why TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS incident_events (id INTEGER PRIMARY KEY, incident_id TEXT NOT NULL, ts REAL NOT NULL,
 kind TEXT NOT NULL, state TEXT NOT NULL, step TEXT NOT NULL DEFAULT '', why TEXT NOT NULL DEFAULT '',
 detail TEXT NOT NULL DEFAULT '{}', ref TEXT NOT NULL DEFAULT '');"""


def flap(store, node, ts, detail="mlx5_0:1 link_downed rose by 4 (> 1)"):
    store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                     " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (ts, "r", node, "periodic", "infiniband", "fail", "drain", detail, None, 1.0))
    store.db.commit()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as s:
        if not s.db.execute("SELECT 1 FROM sqlite_master WHERE name='incidents'").fetchone():
            s.db.executescript(INCIDENTS)
        yield s


def test_a_leaf_with_4_flapping_nodes_is_one_leaf_incident_and_no_drains(store):
    for i, n in enumerate(("b200-001", "b200-003", "b200-004", "b200-007")):
        flap(store, n, NOW - 300 + i)
    flap(store, "b200-009", NOW - 100)  # one node under su2: no suspect
    got = leaf.scan(store, SITE, now=NOW)
    assert [s.line for s in got] == ["suspect leaf su1: 4 nodes, link_downed"]
    rows = store.query("SELECT * FROM incidents")
    assert len(rows) == 1 and rows[0]["part_kind"] == "leaf" and rows[0]["part_key"] == "su1"
    assert rows[0]["class"] == "LEAF" and rows[0]["state"] == "open"
    assert json.loads(rows[0]["evidence"])[0]["nodes"] == ["b200-001", "b200-003", "b200-004", "b200-007"]
    actions = [e["action"] for e in store.query("SELECT action FROM events")]
    assert actions == ["repair.leaf"] and "node.drain" not in actions
    # a second scan in the same window extends the incident, it opens no second one
    leaf.scan(store, SITE, now=NOW + 60)
    rows = store.query("SELECT * FROM incidents")
    assert len(rows) == 1 and rows[0]["count"] == 2


def test_below_k_or_outside_the_window_is_no_suspect(store):
    for n in ("b200-001", "b200-002"):
        flap(store, n, NOW - 60)
    flap(store, "b200-003", NOW - 2000)
    assert leaf.scan(store, SITE, now=NOW) == []
    assert store.query("SELECT * FROM incidents") == []
    assert leaf.find(store, SITE.scalable_units, now=NOW, k=2)[0].nodes == ["b200-001", "b200-002"]


def test_flaps_and_mixed_counters_name_the_commonest_first(store):
    flap(store, "b200-010", NOW - 10, "mlx5_1 link flapped 3 times in 6 h")
    flap(store, "b200-011", NOW - 10, "mlx5_0:1 symbol_error rose by 40 (> 10); mlx5_0 link flapped 2 times in 6 h")
    flap(store, "b200-012", NOW - 10, "mlx5_0:1 symbol_error rose by 12 (> 10)")
    got = leaf.find(store, SITE.scalable_units, now=NOW)
    assert got[0].line == "suspect leaf su2: 3 nodes, flapped, symbol_error"
