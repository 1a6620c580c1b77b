"""Node selection: named, re-qualification, idle in the window; the cap; what is never touched."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from slurmadm.burnin.select import IDLE, NAMED, REQUALIFY, SUSPECT, in_window, select
from slurmadm.errors import UsageError
from slurmadm.site import load_site, parse_site
from slurmadm.slurm import NodeInfo

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
NIGHT = dt.datetime(2026, 11, 30, 2, 0)
NOON = dt.datetime(2026, 11, 30, 12, 0)


@pytest.fixture(scope="module")
def site():
    return load_site(EXAMPLE)  # max_nodes 8, window 01:00-05:00, partition gpu


def node(name, state="IDLE", flags=(), reason="", user="", parts=("gpu",)):
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, reason_user=user,
                    partitions=parts)


def fleet(n=16, **overrides):
    nodes = {f"b200-{i:03d}": node(f"b200-{i:03d}") for i in range(1, n + 1)}
    for name, info in overrides.items():
        nodes[name.replace("_", "-")] = info
    return list(nodes.values())


@pytest.mark.parametrize("now,start,end,inside", [
    ("02:00", "01:00", "05:00", True), ("05:00", "01:00", "05:00", False), ("00:59", "01:00", "05:00", False),
    ("23:30", "22:00", "04:00", True), ("03:00", "22:00", "04:00", True), ("12:00", "22:00", "04:00", False),
    ("12:00", "00:00", "00:00", True),
])
def test_window(now, start, end, inside):
    assert in_window(dt.time.fromisoformat(now), start, end) is inside


def test_idle_nodes_in_window_up_to_the_cap_oldest_tested_first(site):
    tested = {f"b200-{i:03d}": 1000.0 + i for i in range(1, 17)}
    tested["b200-016"] = 1.0  # tested longest ago
    del tested["b200-015"]  # never tested
    sel = select(site, fleet(), now=NIGHT, last_tested=tested)
    assert list(sel.chosen)[:2] == ["b200-015", "b200-016"]
    assert len(sel.chosen) == 8 and set(sel.chosen.values()) == {IDLE}
    assert "max_nodes (8) reached" in sel.skipped["b200-008"]


def test_suspected_stragglers_come_first_among_idle_nodes_and_only_in_the_window(site):
    tested = {f"b200-{i:03d}": 1000.0 + i for i in range(1, 17)}
    suspects = {"b200-016": "slow in sweep s1: stress-tflops 700 = 70% of baseline median 1002"}
    ours = node("b200-003", flags={"DRAIN"}, reason="slurmadm: xid: GPU1 XID 79 [prolog]")
    sel = select(site, fleet(b200_003=ours), now=NIGHT, last_tested=tested, suspects=suspects)
    assert list(sel.chosen.items())[:3] == [("b200-003", REQUALIFY), ("b200-016", SUSPECT), ("b200-001", IDLE)]
    busy = select(site, fleet(b200_016=node("b200-016", state="ALLOCATED")), now=NIGHT, last_tested=tested,
                  suspects=suspects)
    assert "b200-016" not in busy.chosen  # a suspect running jobs waits like any node
    assert "b200-016" not in select(site, fleet(), now=NOON, last_tested=tested, suspects=suspects).chosen


def test_outside_the_window_only_requalification(site):
    ours = node("b200-003", flags={"DRAIN"}, reason="slurmadm: xid: GPU1 XID 79 [prolog]")
    sel = select(site, fleet(b200_003=ours), now=NOON)
    assert sel.chosen == {"b200-003": REQUALIFY}
    assert "outside the burn-in window 01:00-05:00" in sel.skipped["b200-001"]


def test_never_touched(site):
    nodes = fleet(
        b200_001=node("b200-001", flags={"DRAIN"}, reason="admin: replace PSU", user="alice"),
        b200_002=node("b200-002", state="ALLOCATED"),
        b200_003=node("b200-003", flags={"REBOOT_REQUESTED"}),
        b200_004=node("b200-004", flags={"MAINTENANCE", "RESERVED"}),
        b200_005=node("b200-005", state="DOWN", flags={"NOT_RESPONDING"}),
        b200_006=node("b200-006", parts=("debug",)),
        b200_007=node("b200-007", state="MIXED"),
    )
    sel = select(site, nodes, now=NIGHT)
    assert not {f"b200-00{i}" for i in range(1, 8)} & set(sel.chosen)
    assert "drained by alice" in sel.skipped["b200-001"] and "never touches" in sel.skipped["b200-001"]
    assert "busy (ALLOCATED)" in sel.skipped["b200-002"]
    assert "REBOOT_REQUESTED" in sel.skipped["b200-003"]
    assert "MAINTENANCE+RESERVED" in sel.skipped["b200-004"]
    assert "DOWN" in sel.skipped["b200-005"]
    assert "not in partition gpu" in sel.skipped["b200-006"]


def test_requalification_comes_before_idle_nodes(site):
    drained = {f"b200-{i:03d}": node(f"b200-{i:03d}", flags={"DRAIN"}, reason=f"slurmadm: burnin-stress: x{i} [burnin]")
               for i in (12, 13)}
    nodes = [drained.get(n.name, n) for n in fleet()]
    sel = select(site, nodes, now=NIGHT)
    assert list(sel.chosen)[:2] == ["b200-012", "b200-013"]
    assert sel.chosen["b200-012"] == REQUALIFY and len(sel.chosen) == 8


@pytest.mark.parametrize("reason", [
    "slurmadm: repair: rma RMA-1: gpu 5 1652325100005 [repair]",
    "slurmadm: repair: lemon: GPU5 (serial 1652325100005): 2 failed qualifications [repair]",
    "slurmadm: repair: reboot: GPU2 XID 79 [repair]",
])
def test_nodes_the_repair_ladder_holds_are_never_requalified(site, reason):
    """A burn-in pass would resume them: an RMA candidate or a lemon back in service."""
    held = node("b200-003", flags={"DRAIN"}, reason=reason)
    for named in (None, "b200-[003-004]"):
        sel = select(site, fleet(b200_003=held), now=NIGHT, named=named)
        assert "b200-003" not in sel.chosen
        assert sel.skipped["b200-003"].startswith("held by repair: ") and "repair qualify" in sel.skipped["b200-003"]
    # a health drain that repair has not taken over is still re-qualified
    ours = node("b200-003", flags={"DRAIN"}, reason="slurmadm: xid: GPU2 XID 79 (RESTART_BM) [prolog]")
    assert select(site, fleet(b200_003=ours), now=NIGHT).chosen["b200-003"] == REQUALIFY


def test_named_nodes_any_time_and_drained_ones_requalify(site):
    ours = node("b200-002", flags={"DRAIN"}, reason="slurmadm: ecc-uncorrected: GPU5 [prolog]")
    sel = select(site, fleet(b200_002=ours), now=NOON, named="b200-[001-002]")
    assert sel.chosen == {"b200-001": NAMED, "b200-002": REQUALIFY}
    assert sel.skipped == {}


def test_named_nodes_over_the_cap_or_unknown_are_refused(site):
    with pytest.raises(UsageError, match="more than burnin.max_nodes"):
        select(site, fleet(), now=NIGHT, named="b200-[001-009]")
    with pytest.raises(UsageError, match="not in the site"):
        select(site, fleet(), now=NIGHT, named="b200-200")


def test_without_a_reservation_drained_nodes_cannot_be_requalified(site):
    ours = node("b200-002", flags={"DRAIN"}, reason="slurmadm: ecc-uncorrected: GPU5 [prolog]")
    sel = select(site, fleet(b200_002=ours), now=NIGHT, reservation_enabled=False)
    assert "b200-002" not in sel.chosen
    assert "needs burnin.reservation" in sel.skipped["b200-002"]


def test_default_partition_when_burnin_names_none():
    text = EXAMPLE.read_text().replace('partition = "gpu"           # partition the burn-in jobs run in\n', "")
    site = parse_site(text)
    assert site.burnin.partition is None
    sel = select(site, fleet(4), now=NIGHT)
    assert len(sel.chosen) == 4  # the default partition is gpu


def test_drained_nodes_with_an_open_incident_are_left_to_a_running_ladder(site):
    ours = node("b200-003", flags={"DRAIN"}, reason="slurmadm: alert-GpuXidFatal: b200-003 GPU2: an XID [alert]")
    text = "r0123456789 GPU_LOST on GPU2, open"
    for named in (None, "b200-[003-004]"):
        sel = select(site, fleet(b200_003=ours), now=NIGHT, named=named, repairing={"b200-003": text})
        assert "b200-003" not in sel.chosen and sel.skipped["b200-003"].startswith(f"open repair incident {text}: ")
    # an idle node with an incident still open (health resumed it) is in service: tested as any other
    sel = select(site, fleet(), now=NIGHT, repairing={"b200-003": text})
    assert sel.chosen["b200-003"] == IDLE


DAY = 86400.0


def test_busy_nodes_not_burned_in_for_due_days_are_held_for_the_next_sweep_oldest_first(site):
    """burnin.due_days (30 in the example): on a busy fleet the nodes Slurm fills first are never
    idle in the window; a sweep holds them (oldest first, as many as the next sweep has room for)
    so that their jobs end and the next sweep tests them."""
    now = NIGHT.timestamp()
    since = now - 100 * DAY  # the store's first sweep
    tested = {f"b200-{i:03d}": now - 5 * DAY for i in range(1, 17)}
    tested.update({"b200-001": now - 45 * DAY, "b200-002": now - 31 * DAY, "b200-003": now - 29 * DAY,
                   "b200-004": now - 60 * DAY})
    del tested["b200-005"]  # never tested: counted from the first sweep
    busy = {f"b200_{i:03d}": node(f"b200-{i:03d}", state="ALLOCATED") for i in range(1, 6)}
    busy["b200_006"] = node("b200-006", state="MIXED", flags={"DRAIN"})  # draining: someone's already
    sel = select(site, fleet(**busy), now=NIGHT, last_tested=tested, since=since)
    assert list(sel.due) == ["b200-005", "b200-004", "b200-001", "b200-002"]  # not b200-003 (29 days)
    assert sel.due["b200-004"] == "last burned in 60 days ago (burnin.due_days 30); held for the next sweep"
    assert sel.due["b200-005"].startswith("never burned in (100 days of burn-in history)")
    from slurmadm.burnin.select import age_text
    assert [age_text(s) for s in (45 * DAY, 30 * 3600.0, 43.2, -1.0)] == ["45 days", "30 h", "1 min", "0 min"]
    assert not set(sel.due) & set(sel.chosen)  # the idle ones are this sweep's
    assert len(sel.chosen) == 8

    # the next sweep's room: max_nodes (8) less those already held and not tested now (7 still
    # running their jobs, draining)
    held = {f"b200_{i:03d}": node(f"b200-{i:03d}", state="ALLOCATED", flags={"DRAIN"},
                                  reason="slurmadm: burnin-due: last burned in 40 days ago [burnin]")
            for i in range(9, 16)}
    sel = select(site, fleet(**busy, **held), now=NIGHT, last_tested=tested, since=since)
    assert all(sel.skipped[f"b200-{i:03d}"].startswith("busy") for i in range(9, 16))
    assert list(sel.due) == ["b200-005"]
    # held earlier and idle now: this sweep re-qualifies them, so they leave the room free
    idle_held = {k: node(v.name, state="IDLE", flags={"DRAIN"}, reason=v.reason) for k, v in held.items()}
    sel = select(site, fleet(**busy, **idle_held), now=NIGHT, last_tested=tested, since=since)
    assert [n for n, why in sel.chosen.items() if why == REQUALIFY] == [f"b200-{i:03d}" for i in range(9, 16)]
    assert list(sel.due) == ["b200-005", "b200-004", "b200-001", "b200-002"]


def test_the_next_sweeps_room_counts_health_drains_it_will_take_first(site):
    """Health's drains are re-qualified before the rotation's holds (REQUALIFY_ORDER): those this
    sweep does not test (still running jobs, or past max_nodes) fill the next sweep first, so
    fewer busy nodes are held for it (a hold the next sweep cannot take keeps a node out twice)."""
    now = NIGHT.timestamp()
    since = now - 100 * DAY
    tested = {f"b200-{i:03d}": now - 5 * DAY for i in range(1, 17)}
    tested.update({"b200-001": now - 45 * DAY, "b200-002": now - 31 * DAY, "b200-004": now - 60 * DAY})
    del tested["b200-005"]
    busy = {f"b200_{i:03d}": node(f"b200-{i:03d}", state="ALLOCATED") for i in range(1, 6)}
    xid = "slurmadm: xid: GPU2 XID 79 fell off the bus (reset) [health]"
    draining = {f"b200_{i:03d}": node(f"b200-{i:03d}", state="ALLOCATED", flags={"DRAIN"}, reason=xid)
                for i in range(9, 16)}  # 7 health drains whose jobs still run
    sel = select(site, fleet(**busy, **draining), now=NIGHT, last_tested=tested, since=since)
    assert list(sel.due) == ["b200-005"]  # 8 - 7
    # 10 idle health drains: this sweep takes 8, the next one the other 2 first
    idle = {f"b200_{i:03d}": node(f"b200-{i:03d}", state="IDLE", flags={"DRAIN"}, reason=xid) for i in range(6, 16)}
    sel = select(site, fleet(16, **busy, **idle), now=NIGHT, last_tested=tested, since=since)
    assert len(sel.chosen) == 8 and [n for n, why in sel.skipped.items() if why.startswith("burnin.max_nodes")
                                     and n in {v.name for v in idle.values()}] == ["b200-014", "b200-015"]
    assert list(sel.due) == ["b200-005", "b200-004", "b200-001", "b200-002"]  # room 6, 4 due
    # someone else's drain and repair's hold are not the next sweep's: they leave the room free
    others = {"b200_009": node("b200-009", state="ALLOCATED", flags={"DRAIN"}, reason="cable swap", user="alice"),
              "b200_010": node("b200-010", state="ALLOCATED", flags={"DRAIN"},
                               reason="slurmadm: repair: reboot: XID 79 [repair]")}
    sel = select(site, fleet(**busy, **others), now=NIGHT, last_tested=tested, since=since)
    assert list(sel.due) == ["b200-005", "b200-004", "b200-001", "b200-002"]


def test_no_node_is_due_outside_the_window_without_history_or_when_turned_off(site):
    now = NIGHT.timestamp()
    busy = {"b200_001": node("b200-001", state="ALLOCATED")}
    tested = {"b200-001": now - 45 * DAY}
    assert select(site, fleet(**busy), now=NOON, last_tested=tested, since=now - 99 * DAY).due == {}
    assert select(site, fleet(**busy), now=NIGHT, last_tested=tested, since=None).due == {}
    assert select(site, fleet(**busy), now=NIGHT, last_tested=tested, since=now - 99 * DAY,
                  named="b200-002").due == {}
    # without a reservation no sweep re-qualifies a drained node: the hold would be for good
    assert select(site, fleet(**busy), now=NIGHT, last_tested=tested, since=now - 99 * DAY,
                  reservation_enabled=False).due == {}
    off = site.model_copy(update={"burnin": site.burnin.model_copy(update={"due_days": 0.0})})
    assert select(off, fleet(**busy), now=NIGHT, last_tested=tested, since=now - 99 * DAY).due == {}
    assert list(select(site, fleet(**busy), now=NIGHT, last_tested=tested, since=now - 99 * DAY).due) == ["b200-001"]


def test_a_suspect_is_re_tested_first_and_the_rotation_s_holds_last(site):
    """More nodes slurmadm drained than the next sweep takes: the suspect held for its re-test
    goes first (its hold promised it the next sweep: the 32-node replay of 2026-12-07 held one at
    the same sweep that had held two due nodes, and the due ones took both places), health's
    drains next, the nodes held for their turn last; site order within each."""
    two = site.model_copy(update={"burnin": site.burnin.model_copy(update={"max_nodes": 2})})
    due = "slurmadm: burnin-due: last burned in 45 days ago (burnin.due_days 30); held for the next sweep [burnin]"
    slow = ("slurmadm: burnin-suspect: stress-tflops 700 = 70% of baseline median 1000 (slow in 1 sweep of 2; "
            "held for the next sweep's re-test) [burnin]")
    xid = "slurmadm: xid: GPU2 XID 79 [prolog]"
    held = dict(b200_002=node("b200-002", flags={"DRAIN"}, reason=due, user="root"),
                b200_003=node("b200-003", flags={"DRAIN"}, reason=due, user="root"),
                b200_009=node("b200-009", flags={"DRAIN"}, reason=slow, user="root"),
                b200_012=node("b200-012", flags={"DRAIN"}, reason=xid, user="root"))
    sel = select(two, fleet(**held), now=NOON)
    assert sel.chosen == {"b200-009": REQUALIFY, "b200-012": REQUALIFY}
    assert "max_nodes (2) reached" in sel.skipped["b200-002"] and "max_nodes (2) reached" in sel.skipped["b200-003"]
    sel = select(site, fleet(**held), now=NOON)  # room for all: the suspect, health's, then the due ones
    assert list(sel.chosen) == ["b200-009", "b200-012", "b200-002", "b200-003"]
