"""The link watch (burnin/node.py `links_test`, the last test of the repair qualification and one of burn-in's): a node drained for a flapping
link came back from repair's reboot while its cable still flapped, passed the qualification and
took jobs between flaps (the 32-node fleet replay, issue 37). The qualification now watches the
compute HCA ports while it runs, at least `repair.link_watch_s` for a node repaired for an HCA,
and fails on any link down meanwhile (the kernel log's "Link down" lines, link_downed); the
flaps before repair's reboot or an admin's clear are acknowledged in the node's health."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from slurmadm.burnin import node as bnode
from slurmadm.devcluster import gpus, ibsysfs
from slurmadm.health import engine
from slurmadm.health.record import NodeState
from slurmadm.repair import qualify
from slurmadm.resources import example_site
from slurmadm.site import load_site
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain
from tests.unit.repair.test_qualify_ack import site  # noqa: F401 - the node-store site fixture

pytestmark = pytest.mark.unit
NODE = "b200-001"


@pytest.fixture()
def ports(tmp_path):
    """A node's stand-in HCAs and kernel log, and the job spec that points at them."""
    profile = load_site(example_site()).node_profile(NODE)
    hcas = ibsysfs.write_healthy(tmp_path, NODE, profile)
    kmsg = gpus.kmsg_path(tmp_path, NODE)
    kmsg.write_text("")
    spec = {"node": NODE, "hcas": hcas, "hca_port": profile.nics.port, "xid_source": str(kmsg),
            "sysfs_root": str(tmp_path / f"{NODE}.sysfs")}
    port = tmp_path / f"{NODE}.sysfs" / "class" / "infiniband" / "mlx5_3" / "ports" / str(profile.nics.port)
    return spec, kmsg, port


def test_a_link_that_went_down_while_watched_fails_and_one_before_does_not(ports):
    spec, kmsg, port = ports
    before_job = datetime.fromtimestamp(time.time() - 120, timezone.utc)
    ibsysfs.flap_once(kmsg, NODE, "mlx5_3", port / "gone", before_job)  # logged before the job: not its
    started = time.time() - 30
    counters = bnode.read_counters(spec)
    quiet = bnode.links_test(spec, started, counters)
    assert quiet.status == "pass" and quiet.detail.startswith("no link down (8 port(s) watched"), quiet
    ibsysfs.flap_once(kmsg, NODE, "mlx5_3", port)  # while the job runs: a line and link_downed +1
    r = bnode.links_test(spec, started, counters)
    assert r.status == "fail" and r.detail.startswith("link down while watched: mlx5_3 1x"), r
    assert r.data["downs"] == {"mlx5_3": 1} and r.value == 1.0


def test_link_downed_rising_alone_fails_it(ports):
    """A port that went down and up with nothing in the kernel log this reads (another source, a
    rotated file): its link_downed counter still says so."""
    spec, _kmsg, _port = ports
    started, counters = time.time(), bnode.read_counters(spec)
    ibsysfs.ib_fault(spec["sysfs_root"].rsplit("/", 1)[0], NODE, "mlx5_6", "errors")  # link_downed +3
    r = bnode.links_test(spec, started, counters)
    assert r.status == "fail" and "mlx5_6 3x" in r.detail, r


def test_the_watch_waits_out_its_time_since_the_job_began(ports):
    spec, _kmsg, _port = ports
    now = [1000.0]
    slept: list[float] = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    r = bnode.links_test({**spec, "link_watch_s": 600}, 900.0, {}, clock=lambda: now[0], sleep=sleep)
    assert slept == [500.0] and r.status == "pass" and r.data["watched_s"] == 600.0
    slept.clear()
    bnode.links_test({**spec, "link_watch_s": 60}, 900.0, {}, clock=lambda: now[0], sleep=sleep)
    assert slept == []  # its other tests took longer than the watch asks


def test_a_profile_without_hcas_skips_it(ports):
    spec, _kmsg, _port = ports
    assert bnode.links_test({**spec, "hcas": []}, time.time(), {}).status == "skip"


def test_the_flaps_before_the_reboot_are_acknowledged_in_the_nodes_health(site):
    held, ack = engine.HELD["infiniband"]
    with Store(site.store.local_path(NODE)) as s:
        NodeState(s, NODE).set(held, "1")
        NodeState(s, NODE).flush()
    out = qualify.acknowledge_xids(NODE, 0.0, 0.0, 1500.0)
    assert out["ok"] is True and "link flaps up to 1500.000" in out["detail"]
    qualify.acknowledge_xids(NODE, 0.0, 0.0, 1200.0)  # never moves back
    with Store(site.store.local_path(NODE)) as s:
        state = NodeState(s, NODE)
        assert (state.get(ack), state.get(held)) == ("1500.000", "0")


def test_the_spec_carries_the_watch_and_the_link_acknowledgement(site, monkeypatch):
    from slurmadm.burnin import sweep
    from slurmadm.repair import incidents

    monkeypatch.setattr(sweep.Sweep, "node_spec", lambda self, node: {"node": node})
    head = Store(site.store.local_path("head"))
    q = qualify.Qualifier(site, backend=None, store=head)
    spec = q.spec(NODE)
    assert "link_ack" not in spec and spec["link_watch_s"] == 0.0  # xid_source: burn-in's node_spec (test_node_links)
    head.set_node_state(NODE, qualify.XID_ACK_KEY, "1765000000.250")  # repair's reboot
    assert q.spec(NODE, 600.0)["link_ack"] == 1765000000.25
    argv = q.request(NODE, 600.0).argv
    assert json.loads(argv[argv.index("--spec") + 1])["link_watch_s"] == 600.0
    # an admin's `repair clear` (the cable replaced) later than the reboot: the flaps before it
    health_drain(head, NODE, [("infiniband", "mlx5_3 link flapped 2 times in 6 h")], ts=1765000100.0, run_id="r1")
    incidents.ingest(head, now=1765000110.0)
    assert [i.cls for i in incidents.list_incidents(head, node=NODE)] == ["HCA"]
    incidents.clear(head, NODE, "cable replaced", now=1765000200.0)
    assert q.spec(NODE)["link_ack"] == 1765000200.0
