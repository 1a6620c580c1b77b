"""Incidents from what the verdict sources recorded: ingest, keys, repeats, history, writes."""

from __future__ import annotations

import json

import pytest

from slurmadm.repair import incidents, ladder
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain, inventory, xid_line

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
DAY = 86400.0
LOST = xid_line(2, 79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM")
RESET = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
APP45 = xid_line(3, 45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45")


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        yield s


def serials(node: str) -> list[str]:
    return [f"1655{abs(hash(node)) % 10**5:05d}{i}" for i in range(8)]


def test_a_reset_class_xid_opens_one_incident_keyed_by_the_gpu_serial(store):
    inventory(store, "b200-001", serials("b200-001"))
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="run1")
    out = incidents.ingest(store, now=NOW)
    assert (out.read, out.opened, out.extended) == (1, 1, 0)
    (inc,) = incidents.list_incidents(store)
    assert (inc.node, inc.part_kind, inc.part_key, inc.slot, inc.cls, inc.state) == (
        "b200-001", "gpu", serials("b200-001")[2], "2", "RESET_GPU", "open")
    assert inc.uuid == f"GPU-{inc.serial}" and inc.evidence[0]["line"] == RESET
    assert inc.evidence[0]["gpu"]["bus_id"] == "00000000:1A:00.0"
    # audited, and a second ingest adds nothing (the cursor moved)
    assert [e.action for e in store.events(action="repair.*")] == ["repair.open"]
    again = incidents.ingest(store, now=NOW)
    assert (again.read, again.opened) == (0, 0) and len(incidents.list_incidents(store)) == 1


def test_ingest_is_idempotent_without_its_cursor(store):
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="run1")
    incidents.ingest(store, now=NOW)
    store.db.execute("DELETE FROM repair_cursor")
    again = incidents.ingest(store, now=NOW)
    assert (again.read, again.opened, again.skipped) == (1, 0, 1)


def test_every_failing_result_of_the_run_counts_not_only_the_reason(store):
    inventory(store, "b200-002", serials("b200-002"))
    remap = "GPU5 row remapping failed (corrected=0 uncorrected=3)"
    health_drain(store, "b200-002", [("xid", f"{LOST}; {APP45}"), ("row-remap", remap), ("thermal", "GPU1 92 C > 87 C")],
                 ts=NOW, run_id="r2")
    out = incidents.ingest(store, now=NOW)
    assert (out.opened, out.ignored) == (2, 2)  # Xid 45 and thermal open none
    got = {(i.cls, i.slot) for i in incidents.list_incidents(store)}
    assert got == {("GPU_LOST", "2"), ("RMA", "5")}


def test_a_repeat_of_the_same_part_and_class_extends_the_open_incident(store):
    inventory(store, "b200-001", serials("b200-001"))
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="a")
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW + 60, run_id="b")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    assert inc.count == 2 and len(inc.evidence) == 2
    assert [e["kind"] for e in incidents.events(store, inc.id)] == ["opened", "extended"]


def test_a_repeat_after_closing_within_the_window_starts_on_the_next_rung(store):
    inventory(store, "b200-001", serials("b200-001"))
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW - 3 * DAY, run_id="a")
    incidents.ingest(store, now=NOW)
    (first,) = incidents.list_incidents(store)
    incidents.advance(store, first.id, "closed", "resume", outcome="ok", why="qualified", now=NOW - 2 * DAY)
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="b")
    incidents.ingest(store, now=NOW)
    second = incidents.list_incidents(store, states=["open"])[0]
    assert second.rung == 1
    step = ladder.next_step(second, incidents.part_history(store, second), ladder.defaults(), NOW)
    assert step.action == "reboot"


def test_history_follows_the_serial_to_another_node(store):
    moved = serials("b200-001")[2]
    inventory(store, "b200-001", serials("b200-001"))
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW - DAY, run_id="a")
    incidents.ingest(store, now=NOW)
    incidents.clear(store, "b200-001", "reseated GPU2, moved it to b200-004", now=NOW - DAY / 2)
    inventory(store, "b200-004", ["x0", "x1", "x2", "x3", "x4", "x5", moved, "x7"])
    health_drain(store, "b200-004", [("xid", xid_line(6, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"))],
                 ts=NOW, run_id="b")
    incidents.ingest(store, now=NOW)
    hist = incidents.history(store, serial=moved)
    assert [(i.node, i.slot, i.state) for i in hist] == [("b200-001", "2", "closed"), ("b200-004", "6", "open")]
    assert hist[1].rung == 1  # the part's past came with it


def test_no_inventory_keys_by_node_and_slot(store):
    health_drain(store, "b200-003", [("xid", RESET)], ts=NOW, run_id="a")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    assert inc.part_key == "b200-003/slot:2" and inc.serial == ""


def test_other_sources(store):
    def drain(node, reason, ts, **detail):
        eid = store.audit("node.drain", node, reason, **detail)
        store.db.execute("UPDATE events SET ts=? WHERE id=?", (ts, eid))

    drain("b200-005", "slurmadm: bmc-psu: PSU2 Status: failure detected [bmc]", NOW, checks=["bmc-psu"])
    drain("b200-006", "slurmadm: burnin-stress: GPU3 2.1 TFLOPS < floor [burnin]", NOW, by="burnin")
    # what burn-in's health suite found under load: that part's incident, found by burn-in
    drain("b200-004", "slurmadm: burnin-health: ecc-uncorrected: GPU2 volatile uncorrected ECC=1 [burnin]", NOW)
    drain("b200-007", "slurmadm: alert-GpuXidFatal: GPU1 XID 45 on b200-007 [webhook]", NOW, alert="GpuXidFatal")
    drain("b200-008", "slurmadm: thermal: GPU2 92 C > 87 C [periodic]", NOW)  # no run_id: the reason alone
    drain("b200-009", "admin: bad fan", NOW)  # not ours
    store.audit("bmc.recover.give-up", "b200-010", "failed again within 3600 s of the last power-cycle")
    out = incidents.ingest(store, now=NOW + 10)
    got = {(i.node, i.cls, i.part_kind, i.source) for i in incidents.list_incidents(store)}
    assert got == {("b200-005", "PSU", "psu", "bmc"), ("b200-006", "BURNIN", "node", "burnin"),
                   ("b200-004", "ECC", "gpu", "burnin"), ("b200-010", "NODE_DOWN", "node", "bmc-recover")}
    (ecc,) = incidents.list_incidents(store, node="b200-004")
    assert ecc.slot == "2" and ecc.evidence[0]["check"] == "burnin-health"
    assert out.ignored == 2


def test_advance_and_clear_are_audited(store):
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="a")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    incidents.advance(store, inc.id, "resetting", "reset", outcome="ok", evidence={"kind": "reset", "gpu": 2},
                      why="reset GPU2", now=NOW + 1)
    same = incidents.advance(store, inc.id, "resetting", "reset", outcome="ok", why="again", now=NOW + 2)
    assert same.updated_ts == NOW + 1  # nothing new: not written again
    assert [e.action for e in store.events(action="repair.*")][::-1] == ["repair.open", "repair.reset"]
    assert incidents.clear(store, "b200-001", "fixed by hand", dry_run=True)[0].state == "resetting"
    (done,) = incidents.clear(store, "b200-001", "fixed by hand", now=NOW + 3)
    assert (done.state, done.step, done.closed_ts) == ("closed", "clear", NOW + 3)
    assert incidents.clear(store, "b200-001", "again") == []
    assert "repair.clear" in [e.action for e in store.events(action="repair.*")]


def test_qualifications(store):
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="a")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    q = incidents.record_qualification(store, inc.id, "b200-001", job_id="42", now=NOW)
    incidents.record_qualification(store, inc.id, "b200-001", status="failed", qual_id=q,
                                   evidence=[{"test": "known-answer", "gpu": 3}], now=NOW + 60)
    assert incidents.failed_qualifications(store, node="b200-001") == 1
    row = store.query("SELECT * FROM qualifications")[0]
    assert (row["id"], row["job_id"], row["status"], json.loads(row["evidence"])[0]["gpu"]) == (
        f"{inc.id}-q1", "42", "failed", 3)


def test_failed_qualifications_of_a_part_replaced_under_an_rma_no_longer_count(store):
    """The lemon rule's count (any window): a part that failed its qualifications went back to the
    vendor; once `rma replaced` recorded the new part, those failures were the old part's."""
    health_drain(store, "b200-001", [("xid", RESET)], ts=NOW, run_id="a")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    for k in (1, 2):
        incidents.record_qualification(store, inc.id, "b200-001", status="failed", now=NOW + 60 * k)
    assert incidents.failed_qualifications(store, node="b200-001") == 2
    incidents.advance(store, inc.id, "qualifying", "qualify", why="RMA T-1: part replaced",
                      evidence={"rma": "T-1", "new_part": "S-NEW"}, now=NOW + 3600)
    assert incidents.failed_qualifications(store, node="b200-001") == 0
    incidents.record_qualification(store, inc.id, "b200-001", status="failed", now=NOW + 7200)
    assert incidents.failed_qualifications(store, node="b200-001") == 1  # the new part's own


def test_nvsentinel_1710_storm_opens_no_incident(store):
    """NVSentinel #1710: Xid 45 on 288 nodes, many events each, in 3 hours became 672 false
    "contact support" events. Here: every one of them drains (a site that made 45 fatal), and
    not one incident opens."""
    nodes = [f"gb200-{i:03d}" for i in range(288)]
    with store.transaction() as db:
        rows, events = [], []
        for k in range(3):  # 864 drains (and results) over 3 hours
            for j, node in enumerate(nodes):
                ts = NOW + k * 3600 + j
                run = f"storm-{k}-{j}"
                detail = "; ".join(xid_line(g, 45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45")
                                   for g in range(8))
                rows.append((ts, run, node, "prolog", "xid", "fail", "critical", detail, None, 1.0))
                events.append((ts, "test", "node.drain", node, f"slurmadm: xid: {detail[:200]} [prolog]",
                               json.dumps({"context": "prolog", "run_id": run})))
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (?,?,?,?,?,?)", events)
    out = incidents.ingest(store, now=NOW + 3 * 3600)
    assert (out.read, out.opened, out.ignored) == (864, 0, 864 * 8)
    assert incidents.list_incidents(store) == []


def test_an_hca_port_is_keyed_by_its_guid(store):
    store.set_node_state("b200-001", "health.hcas", "mlx5_0=0c42:a103:00f1:2b3c mlx5_1=0c42:a103:00f1:2b3d")
    health_drain(store, "b200-001", [("infiniband", "mlx5_1:1 state 1: DOWN, phys_state 3: Disabled")], ts=NOW,
                 run_id="a")
    incidents.ingest(store, now=NOW)
    (inc,) = incidents.list_incidents(store)
    assert (inc.cls, inc.part_kind, inc.part_key, inc.slot) == ("HCA", "hca", "0c42:a103:00f1:2b3d:1", "mlx5_1/1")
    assert inc.evidence[0]["hca"]["guid"] == "0c42:a103:00f1:2b3d"


def test_a_board_psu_or_fan_is_keyed_by_its_fru_serial_from_the_bmc_inventory(store):
    """`bmc inventory` keeps each BMC's FRUs (node_state bmc.inventory): a board, PSU or fan
    incident is the part's, by its FRU serial, as the parts inventory keys it (issue 44); a node
    whose BMC was never asked keeps the node-local key."""
    store.set_node_state("b200-005", "bmc.inventory", json.dumps({
        "board_serial": "1582624000123", "model": "DGX B200", "serial": "SYS-77",
        "psus": [{"name": "PS1", "serial": "PSU-SN-A"}, {"name": "PS2", "serial": "PSU-SN-B"}],
        "fans": [{"name": "FAN1", "serial": ""}]}))

    def drain(node, reason, ts):
        eid = store.audit("node.drain", node, reason)
        store.db.execute("UPDATE events SET ts=? WHERE id=?", (ts, eid))

    drain("b200-005", "slurmadm: bmc-psu: PSU2 Status: failure detected [bmc]", NOW)
    drain("b200-005", "slurmadm: bmc-sel: Processor IERR asserted [bmc]", NOW + 1)
    drain("b200-005", "slurmadm: bmc-fan: FAN1 reads 0 RPM [bmc]", NOW + 2)
    drain("b200-006", "slurmadm: bmc-sel: Processor IERR asserted [bmc]", NOW + 3)
    incidents.ingest(store, now=NOW + 10)
    got = {(i.node, i.part_kind): i for i in incidents.list_incidents(store)}
    assert got[("b200-005", "psu")].part_key == "PSU-SN-B" and got[("b200-005", "psu")].slot == "PSU2"
    assert got[("b200-005", "board")].part_key == "1582624000123"
    assert got[("b200-005", "board")].evidence[0]["board"]["model"] == "DGX B200"
    assert got[("b200-005", "fan")].part_key == "b200-005/fan:FAN1"  # a FRU without a serial
    assert got[("b200-006", "board")].part_key == "b200-006/board"  # no BMC inventory kept


@pytest.mark.parametrize("slot, want", [("PS1", "A"), ("PSU2", "B"), ("Power Supply 2", "B"), ("PSU3", ""), ("", "")])
def test_a_sensor_name_finds_its_fru(slot, want):
    frus = [{"name": "PS1", "serial": "A"}, {"name": "Power Supply 2", "serial": "B"}]
    assert incidents._fru_named(frus, slot).get("serial", "") == want
