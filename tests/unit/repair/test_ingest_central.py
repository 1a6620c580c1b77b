"""`repair run`'s ingest with a central store (a central SQLite file: the same code path as
MariaDB but for the driver): the head's own verdict sources record their drains in the head's
store, and the ladder must see them."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.repair import incidents, views
from slurmadm.site import parse_site
from slurmadm.store import Store, central

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


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
