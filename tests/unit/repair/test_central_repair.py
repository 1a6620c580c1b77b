"""Incidents with a central store: nodes ship their drains and results, the head ships its own and ingests from the
central store, and its incidents ship there too (a changed incident replaces its copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.repair import incidents, views
from slurmadm.site import parse_site
from slurmadm.site.store import StoreSection
from slurmadm.store import Store, central
from slurmadm.store.read import Reader
from slurmadm.store.ship import ship
from tests.unit.repair.helpers import health_drain, inventory, xid_line

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


def test_ingest_from_central_and_ship_incidents_back(tmp_path):
    sec = StoreSection(path=str(tmp_path / "stores" / "{node}.db"), url=f"sqlite://{tmp_path}/central.db")
    c = central.connect(sec)
    central.migrate(c)
    for k, node in enumerate(("b200-001", "b200-002")):
        with Store(sec.local_path(node), ship=True) as s:
            inventory(s, node, [f"{node}-s{i}" for i in range(8)])
            health_drain(s, node, [("xid", xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"))],
                         ts=NOW + k, run_id=f"run-{node}")
        ship(sec, host=node, local_path=sec.local_path(node), central=c)
    with Store(sec.local_path("head"), ship=True) as head:
        r = Reader(c, central=True, host="head")
        first = incidents.ingest(head, r, now=NOW + 10)
        again = incidents.ingest(head, r, now=NOW + 10)
        assert (first.opened, again.read) == (2, 0)
        assert {i.part_key for i in incidents.list_incidents(head)} == {"b200-001-s2", "b200-002-s2"}
        ship(sec, host="head", local_path=sec.local_path("head"), central=c)
        one = incidents.list_incidents(head, node="b200-001")[0]
        incidents.advance(head, one.id, "resetting", "reset", outcome="ok", now=NOW + 20)
        ship(sec, host="head", local_path=sec.local_path("head"), central=c)
    rows = c.query("SELECT origin, id, state FROM incidents ORDER BY id")
    assert len(rows) == 2 and {r["origin"] for r in rows} == {"head"}
    assert {r["id"]: r["state"] for r in rows}[one.id] == "resetting"
    assert c.query("SELECT count(*) AS n FROM incident_events")[0]["n"] == 3
    c.close()


def test_a_shipment_that_lands_below_the_cursor_is_still_read(tmp_path):
    """Central arrival numbers are given at insert: a batch that commits late can sit below rows
    ingest already read. Ingest looks back over the last drains (refs keep it idempotent)."""
    sec = StoreSection(path=str(tmp_path / "stores" / "{node}.db"), url=f"sqlite://{tmp_path}/central.db")
    c = central.connect(sec)
    central.migrate(c)
    line = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
    with Store(sec.local_path("b200-001"), ship=True) as s:
        health_drain(s, "b200-001", [("xid", line)], ts=NOW, run_id="one")
    ship(sec, host="b200-001", local_path=sec.local_path("b200-001"), central=c)
    with Store(sec.local_path("head"), ship=True) as head:
        r = Reader(c, central=True, host="head")
        assert incidents.ingest(head, r, now=NOW).opened == 1
        # a late row below the cursor (as a transaction that took its seq earlier and committed now)
        with Store(sec.local_path("b200-002"), ship=True) as s:
            health_drain(s, "b200-002", [("xid", line)], ts=NOW + 1, run_id="two")
        ship(sec, host="b200-002", local_path=sec.local_path("b200-002"), central=c)
        top = c.query("SELECT max(seq) AS m FROM events")[0]["m"]
        head.db.execute("UPDATE repair_cursor SET value=? WHERE name='events:central'", (str(top + 3),))
        again = incidents.ingest(head, r, now=NOW + 2)
        assert (again.opened, again.skipped) == (1, 1)
        assert {i.node for i in incidents.list_incidents(head)} == {"b200-001", "b200-002"}
    c.close()


def test_the_heads_own_drains_are_shipped_before_the_ingest_reads_the_central_store(tmp_path):
    """The fleet replay (issue 37): the alert webhook drained b200-002 for Xid 79 on the head,
    nothing shipped the head's store (a site ships it from cron), and the ladder, which reads the
    central store, never opened an incident: burn-in re-qualified and re-drained the node sweep
    after sweep. The ingest ships the head's queued records first."""
    text = EXAMPLE.read_text().replace('path = "/var/lib/slurmadm/slurmadm.db"',
                                       f'path = "{tmp_path}/stores/{{node}}.db"\nurl = "sqlite://{tmp_path}/central.db"')
    text = text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl")
    site = parse_site(text)
    assert site.store.url is not None
    c = central.connect(site.store)
    central.migrate(c)
    c.close()
    reason = "slurmadm: alert-GpuXidFatal: b200-002 GPU1: XID 79, one NVIDIA's catalog says to drain for [alert]"
    with Store.for_site(site) as head:
        head.audit("node.drain", "b200-002", reason, alert="GpuXidFatal", fingerprint="f1")
        got = views.ingest(site, head)
        assert (got.read, got.opened) == (1, 1)
        [inc] = incidents.list_incidents(head, node="b200-002")
        # the alert names the XID (monitor/rules.py): the catalog's class, a reboot first for 79
        assert (inc.cls, inc.part_kind, inc.slot, inc.source) == ("GPU_LOST", "gpu", "1", "webhook")
        c = central.connect(site.store)
        assert [r["action"] for r in c.query("SELECT action FROM events WHERE target = ?", ("b200-002",))] == \
            ["node.drain"]  # shipped, once
        c.close()
        again = views.ingest(site, head)
        assert (again.opened, again.extended) == (0, 0)
