"""The head exporter's repair series: open incidents by class and state, time in repair."""

from __future__ import annotations

import pytest

from slurmadm.exporter.head import HeadCollector
from slurmadm.exporter.storefacts import LocalStoreFacts
from slurmadm.repair import incidents
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain, inventory, xid_line

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


def test_open_incidents_and_time_in_repair(tmp_path):
    path = tmp_path / "store.db"
    with Store(path) as store:
        inventory(store, "b200-001", [f"s{i}" for i in range(8)])
        health_drain(store, "b200-001", [("xid", xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"))],
                     ts=NOW, run_id="a")
        health_drain(store, "b200-002", [("row-remap", "GPU1 row remapping failed (corrected=0 uncorrected=1)")],
                     ts=NOW + 5, run_id="b")
        health_drain(store, "b200-003", [("xid", xid_line(0, 79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                                                          "RESTART_BM"))], ts=NOW + 9, run_id="c")
        incidents.ingest(store, now=NOW + 10)
        done = incidents.list_incidents(store, node="b200-003")[0]
        incidents.advance(store, done.id, "closed", "resume", outcome="ok", now=NOW + 20)
        reset = incidents.list_incidents(store, node="b200-001")[0]
        incidents.advance(store, reset.id, "resetting", "reset", outcome="running", now=NOW + 30)
        incidents.advance(store, reset.id, "qualifying", "reset", outcome="ok", now=NOW + 31)
        incidents.advance(store, reset.id, "open", "qualify", outcome="failed", now=NOW + 32)
    facts = LocalStoreFacts(str(path)).read()
    assert facts["repair"] == {"open": {("RESET_GPU", "open"): 1, ("RMA", "open"): 1},
                               "since": {"b200-001": NOW, "b200-002": NOW + 5},
                               "steps": {("resume", "ok"): 1, ("reset", "ok"): 1, ("qualify", "failed"): 1},
                               "lemons": []}
    col = HeadCollector.__new__(HeadCollector)
    metrics = {m.name: m for m in col._extra(facts)}
    got = {tuple(s.labels.values()): s.value for s in metrics["slurmadm_repair_incidents"].samples}
    assert got == {("RESET_GPU", "open"): 1, ("RMA", "open"): 1}
    assert [s.value for s in metrics["slurmadm_repair_nodes"].samples] == [2]
    steps = {tuple(s.labels.values()): s.value for s in metrics["slurmadm_repair_steps"].samples
             if s.name == "slurmadm_repair_steps_total"}
    assert steps == {("reset", "ok"): 1, ("qualify", "failed"): 1, ("resume", "ok"): 1}  # a start is no step taken


def test_a_lemon_by_count_has_its_series(tmp_path):
    """Three incidents on one GPU serial within the window: a lemon by count, not yet held; the
    site's threshold decides (four would not be)."""
    from slurmadm.exporter.storefacts import facts
    from slurmadm.repair import ladder
    from slurmadm.store import read

    path = tmp_path / "store.db"
    line = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
    with Store(path) as store:
        inventory(store, "b200-001", [f"s{i}" for i in range(8)])
        for k in range(3):
            health_drain(store, "b200-001", [("xid", line)], ts=NOW + k * 3600, run_id=f"r{k}")
            incidents.ingest(store, now=NOW + k * 3600 + 1)
            for inc in incidents.list_incidents(store, node="b200-001", states=["open"]):
                incidents.advance(store, inc.id, "closed", "resume", outcome="ok", now=NOW + k * 3600 + 60)
    got = LocalStoreFacts(str(path)).read()["repair"]["lemons"]
    assert {(d["kind"], d["name"], d["held"]) for d in got} >= {("gpu", "s2", False)}, got
    col = HeadCollector.__new__(HeadCollector)
    metrics = {m.name: m for m in col._extra(LocalStoreFacts(str(path)).read())}
    per = {tuple(s.labels.values()): s.value for s in metrics["slurmadm_repair_lemon"].samples}
    assert per[("gpu", "s2", "no")] == 1
    counts = {s.labels["kind"]: s.value for s in metrics["slurmadm_repair_lemons"].samples}
    assert counts["gpu"] == 1
    stricter = ladder.settings(None).__class__(**{**ladder.settings(None).__dict__, "lemon_incidents": 4})
    with Store(path) as store:
        src = read.Reader(store, central=False, host="head")
        assert facts(src, lemon_settings=stricter, now=NOW + 4 * 3600)["repair"]["lemons"] == []


def test_an_old_store_without_the_tables_has_no_repair_series(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE check_results (id INTEGER PRIMARY KEY, ts REAL, run_id TEXT, node TEXT, context TEXT, "
               "check_id TEXT, status TEXT, severity TEXT, detail TEXT, value REAL, duration_ms REAL)")
    db.execute("CREATE TABLE burnin_nodes (sweep_id TEXT, node TEXT, ts REAL, verdict TEXT)")
    db.commit()
    db.close()
    assert LocalStoreFacts(str(path)).read()["repair"] is None
