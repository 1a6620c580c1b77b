"""The ladder's decision on recorded incident histories (table-driven)."""

from __future__ import annotations

import pytest

from slurmadm.repair import ladder
from slurmadm.repair.model import Incident
from slurmadm.site.repair import RepairSection

pytestmark = pytest.mark.unit

DAY = 86400.0
NOW = 1_800_000_000.0
S = ladder.defaults()


def inc(id="r1", *, node="b200-001", cls="RESET_GPU", state="open", step="", outcome="", rung=0, days_ago=0.0,
        serial="1655000001", part_key=None, evidence=None) -> Incident:
    return Incident(id=id, node=node, part_kind="gpu", part_key=part_key or serial, slot="2", cls=cls, state=state,
                    step=step, outcome=outcome, rung=rung, opened_ts=NOW - days_ago * DAY,
                    updated_ts=NOW - days_ago * DAY, evidence=evidence or [], serial=serial)


def failed_qual(days_ago=1.0):
    return [{"ts": NOW - days_ago * DAY, "kind": "step", "step": "qualify", "outcome": "failed"}]


# `rma replaced` on an incident (repair/rma.py hand_incidents): a step, then the new part
REPLACED = [{"ts": NOW - 40 * DAY, "kind": "step", "step": "qualify", "state": "qualifying", "outcome": ""},
            {"rma": "T-1", "new_part": "S-NEW"}]

CASES = [
    # (what, incident, history, action, state)
    ("first RESET_GPU: reset", inc(), [], "reset", "resetting"),
    ("reset ok: qualify", inc(state="resetting", step="reset", outcome="ok"), [], "qualify", "qualifying"),
    ("qualification running: wait", inc(state="qualifying", step="qualify", outcome="running"), [], "wait", "qualifying"),
    ("qualified: resume", inc(state="qualifying", step="qualify", outcome="ok"), [], "resume", "closed"),
    ("reset failed: reboot (next rung)", inc(state="resetting", step="reset", outcome="failed"), [], "reboot", "rebooting"),
    ("second within 7 days starts on the reboot rung", inc(rung=1), [], "reboot", "rebooting"),
    ("third: RMA", inc(rung=2), [inc("r0", days_ago=5, state="closed"), inc("rx", days_ago=3, state="closed")],
     "rma", "rma"),
    ("qualify failed on the last reboot rung: RMA",
     inc(rung=2, state="qualifying", step="qualify", outcome="failed"), [], "rma", "rma"),
    ("RESTART_BM: reboot", inc(cls="RESTART_BM"), [], "reboot", "rebooting"),
    ("GPU lost once: reboot", inc(cls="GPU_LOST"), [], "reboot", "rebooting"),
    ("GPU lost twice: RMA", inc(cls="GPU_LOST", rung=1), [inc("r0", cls="GPU_LOST", days_ago=10, state="closed")],
     "rma", "rma"),
    ("row-remap failure: straight to RMA", inc(cls="RMA"), [], "rma", "rma"),
    ("3 incidents on the node in 28 days: lemon",
     inc(serial="s3"), [inc("a", serial="s1", days_ago=20, state="closed"), inc("b", serial="s2", days_ago=10,
                                                                                  state="closed")], "lemon", "lemon"),
    ("3 incidents on a serial that moved nodes: lemon",
     inc(), [inc("a", node="b200-007", days_ago=20, state="closed", cls="ECC"),
             inc("b", node="b200-009", days_ago=9, state="closed", cls="NVLINK")], "lemon", "lemon"),
    ("incidents older than the lemon window do not count",
     inc(serial="s3"), [inc("a", serial="s1", days_ago=40, state="closed"), inc("b", serial="s2", days_ago=30,
                                                                                  state="closed")], "reset", "resetting"),
    ("two failed qualifications: lemon",
     inc(state="resetting", step="reset", outcome="ok", evidence=failed_qual()),
     [inc("a", serial="s9", days_ago=60, state="closed", evidence=failed_qual(60))], "lemon", "lemon"),
    ("a lemon stays", inc(state="lemon", step="lemon"), [], "none", "lemon"),
    ("an RMA candidate stays", inc(state="rma", step="rma"), [], "none", "rma"),
    # a GPU replaced under an RMA: its incidents and failed qualifications were the old part's
    ("the replaced part's incidents do not make the node a lemon",
     inc(serial="s3"), [inc("a", serial="s1", days_ago=20, state="closed", evidence=REPLACED),
                        inc("b", serial="s1", days_ago=10, state="closed", evidence=REPLACED)], "reset", "resetting"),
    ("the replaced part's failed qualifications do not count",
     inc(state="resetting", step="reset", outcome="ok", evidence=failed_qual()),
     [inc("a", serial="s9", days_ago=60, state="closed", evidence=failed_qual(60) + REPLACED)], "qualify", "qualifying"),
    ("failed qualifications after the replacement do",
     inc(state="resetting", step="reset", outcome="ok", evidence=failed_qual()),
     [inc("a", serial="s9", days_ago=60, state="closed", evidence=REPLACED + failed_qual(30))], "lemon", "lemon"),
    ("closed: nothing", inc(state="closed", step="resume", outcome="ok"), [], "none", "closed"),
    ("resumed: the rung is done", inc(state="qualifying", step="resume", outcome="ok"), [], "none", "qualifying"),
    ("PSU: RMA", inc(cls="PSU"), [], "rma", "rma"),
    ("node down after recover: qualify", inc(cls="NODE_DOWN"), [], "qualify", "qualifying"),
]


@pytest.mark.parametrize("what, incident, history, action, state", CASES, ids=[c[0] for c in CASES])
def test_next_step(what, incident, history, action, state):
    step = ladder.next_step(incident, history, S, NOW)
    assert (step.action, step.state) == (action, state), step.why


def test_reasons_are_repairs_own():
    step = ladder.next_step(inc(), [], S, NOW)
    assert step.reason.startswith("slurmadm: repair: reset: GPU2 serial 1655000001 RESET_GPU")
    assert step.reason.endswith(" [repair]")
    lemon = ladder.next_step(*CASES[12][1:3], S, NOW)
    assert lemon.reason.startswith("slurmadm: repair: lemon: ")


def test_start_rung_counts_the_same_part_and_class_in_the_window():
    prior = [inc("a", days_ago=6, state="closed"), inc("b", days_ago=8, state="closed"),
             inc("c", days_ago=1, state="closed", cls="ECC")]
    assert ladder.start_rung("RESET_GPU", prior, NOW, S) == 1
    assert ladder.start_rung("RESET_GPU", prior * 5, NOW, S) == 2  # capped at the last rung


def test_site_overrides_replace_a_class():
    s = ladder.settings(RepairSection.model_validate(
        {"classes": {"RESET_GPU": {"rungs": [["reboot", "qualify", "resume"], ["rma"]]}}, "lemon_incidents": 5}))
    assert ladder.next_step(inc(), [], s, NOW).action == "reboot"
    assert s.ladder("RESET_GPU").window_days == 7 and s.ladder("RESET_GPU").overridden
    assert s.lemon_incidents == 5


def test_ladder_rows_cover_every_incident_class_with_sources():
    rows = ladder.rows(S)
    assert {r["class"] for r in rows} >= {"RESET_GPU", "RESTART_BM", "GPU_LOST", "RMA", "ECC", "NVLINK"}
    assert all(r["source"] and r["rungs"] for r in rows)
    assert "THERMAL" not in {r["class"] for r in rows}


def test_one_signal_that_opened_several_incidents_counts_once_towards_a_lemon():
    """A hung GPU fails a dozen checks in one health run: one incident per class, all at the run's
    time. That is one fault, not three: the node is no lemon for it (the fleet replay, issue 37)."""
    same = [inc("a", cls="ECC"), inc("b", cls="NVLINK")]
    step = ladder.next_step(inc(cls="GPU_LOST"), same, S, NOW)
    assert step.action != "lemon", step.why
    apart = [inc("a", cls="ECC", days_ago=2), inc("b", cls="NVLINK", days_ago=1)]
    assert ladder.next_step(inc(cls="GPU_LOST"), apart, S, NOW).action == "lemon"
