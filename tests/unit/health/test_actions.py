"""Drain/resume/alert decisions on plain data: ownership, the breaker, clean-run counting."""

from __future__ import annotations

import pytest

from slurmadm.health.actions import breaker, decide, drain_reason, over_cap
from slurmadm.health.runner import Result
from slurmadm.slurm.model import NodeInfo

pytestmark = pytest.mark.unit


def res(check_id, status, action, severity="critical", detail="x"):
    return Result(check_id, status, severity, action, detail, None, 1.0)


BAD = [res("gpu-count", "pass", "none"), res("ecc-uncorrected", "fail", "drain", detail="GPU5 volatile uncorrected ECC=2"),
       res("power", "fail", "drain", severity="warning", detail="GPU1 draws 1200 W")]
CLEAN = [res("gpu-count", "pass", "none"), res("persistence-mode", "fail", "warn", severity="warning")]


def node(name, *, flags=(), reason="", state="IDLE", parts=("gpu",)):
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, partitions=tuple(parts))


def fleet(n=10, drained_by_us=0, parts=("gpu",)):
    return [node(f"b200-{i:03d}", flags=("DRAIN",) if i <= drained_by_us else (),
                 reason="slurmadm: xid: GPU0 XID 79 [periodic]" if i <= drained_by_us else "", parts=parts)
            for i in range(1, n + 1)]


def plan(context, results, me, everyone, *, fraction=0.5, resume_after=3, prev=0):
    return decide(context=context, results=results, node=me, everyone=everyone, fraction=fraction,
                  resume_after=resume_after, prev_clean=prev)


def test_reason_names_most_severe_check_and_counts_others():
    check_id, reason = drain_reason(BAD, "prolog")
    assert check_id == "ecc-uncorrected"
    assert reason == "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=2 (+1 more) [prolog]"
    assert drain_reason(CLEAN, "prolog") is None


def test_error_results_drain_only_after_real_faults():
    results = [res("nvlink", "error", "drain", detail="cannot run: timed out"), res("xid", "fail", "drain")]
    assert drain_reason(results, "prolog")[0] == "xid"


def test_healthy_node_is_drained_and_job_blocked():
    everyone = fleet()
    p = plan("prolog", BAD, everyone[5], everyone)
    assert (p.action, p.blocks_job) == ("drain", True)
    assert p.reason.startswith("slurmadm: ecc-uncorrected:")


def test_clean_prolog_needs_nothing():
    p = plan("prolog", CLEAN, None, [])
    assert (p.action, p.blocks_job, p.clean_runs) == ("none", False, None)


@pytest.mark.parametrize("flags,reason", [
    (("DRAIN",), "admin: bad DIMM"),
    (("DRAIN",), "Kill task failed"),
])
def test_admin_drained_node_keeps_its_reason(flags, reason):
    me = node("b200-003", flags=flags, reason=reason)
    p = plan("prolog", BAD, me, [me])
    assert p.action == "none" and "already drained by" in p.reason and reason in p.reason
    assert p.blocks_job  # the node is drained anyway; Slurm keeps the admin's reason
    # and a clean periodic run never resumes it
    assert plan("periodic", CLEAN, me, [me], prev=99).action == "none"


@pytest.mark.parametrize("flag", ["REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "POWERING_UP", "NOT_RESPONDING"])
def test_foreign_states_are_left_alone_with_an_alert(flag):
    me = node("b200-003", flags=(flag,))
    p = plan("prolog", BAD, me, [me])
    assert p.action == "alert" and flag in p.reason
    # only a maintenance node's job runs (the admin's own, or burn-in's); elsewhere a critical
    # fault still keeps the job off the node, though its drain is left to whoever owns the state
    assert p.blocks_job == (flag != "MAINTENANCE")


def test_breaker_caps_drains_per_partition():
    everyone = fleet(10, drained_by_us=4)
    me = everyone[7]
    assert breaker(me, everyone, 0.5) == ""  # 4 + 1 <= 5
    everyone = fleet(10, drained_by_us=5)
    why = breaker(everyone[7], everyone, 0.5)
    assert "partition gpu: 5 of 10 nodes already drained by slurmadm, cap is 5" in why
    p = plan("periodic", BAD, everyone[7], everyone, fraction=0.5)
    assert p.action == "alert" and p.reason.startswith("breaker: not draining (slurmadm: ecc-uncorrected")
    assert not p.blocks_job


def test_breaker_counts_only_slurmadm_drains_and_every_partition():
    everyone = fleet(4)
    everyone[0] = node("b200-001", flags=("DRAIN",), reason="admin: swap PSU")
    assert breaker(everyone[1], everyone, 0.25) == ""  # the admin drain does not count
    small = [node(f"d{i}", parts=("gpu", "debug") if i < 2 else ("gpu",)) for i in range(8)]
    small[0] = node("d0", flags=("DRAIN",), reason="slurmadm: xid: x [prolog]", parts=("gpu", "debug"))
    assert "partition debug" in breaker(small[1], small, 0.5)  # debug has 2 nodes: cap 1, already used


def test_over_cap_detects_a_race_after_the_fact():
    everyone = fleet(4, drained_by_us=3)
    assert over_cap(everyone[2], everyone, 0.5) != ""
    assert over_cap(everyone[1], fleet(4, drained_by_us=2), 0.5) == ""


def test_resume_after_n_clean_periodic_runs():
    me = node("b200-003", flags=("DRAIN",), reason="slurmadm: ecc-uncorrected: GPU5 volatile=2 [prolog]")
    p1 = plan("periodic", CLEAN, me, [me], resume_after=3, prev=0)
    assert (p1.action, p1.clean_runs) == ("none", 1)
    p2 = plan("periodic", CLEAN, me, [me], resume_after=3, prev=1)
    assert (p2.action, p2.clean_runs) == ("none", 2)
    p3 = plan("periodic", CLEAN, me, [me], resume_after=3, prev=2)
    assert (p3.action, p3.clean_runs) == ("resume", 0)
    # a failing run resets the count
    assert plan("periodic", BAD, me, [me], prev=2).clean_runs == 0
    # prolog/epilog runs never count towards resuming
    assert plan("prolog", CLEAN, me, [me], prev=2).action == "none"


def test_resume_refused_in_foreign_state():
    me = node("b200-003", flags=("DRAIN", "REBOOT_REQUESTED"), reason="slurmadm: xid: GPU0 XID 79 [periodic]")
    p = plan("periodic", CLEAN, me, [me], resume_after=1)
    assert p.action == "none" and "REBOOT_REQUESTED" in p.reason


def test_unknown_node_still_blocks_the_job():
    p = plan("prolog", BAD, None, [])
    assert p.action == "alert" and p.blocks_job


def test_periodic_never_resumes_a_burnin_drain():
    """A burn-in drain (its own check ids) is lifted only by a passing burn-in, not by clean
    periodic health runs, however many."""
    me = node("b200-003", flags=("DRAIN",), reason="slurmadm: burnin-allreduce-pair: 12 GB/s < 40 [burnin]")
    for prev in range(0, 6):
        p = plan("periodic", CLEAN, me, [me], resume_after=3, prev=prev)
        assert p.action == "none" and "not a health check" in p.reason
    ours = node("b200-003", flags=("DRAIN",), reason="slurmadm: xid: GPU0 XID 79 [periodic]")
    assert plan("periodic", CLEAN, ours, [ours], resume_after=3, prev=2).action == "resume"


# --- issue 15 ---------------------------------------------------------------------------------

def test_user_reservation_node_with_a_fault_is_drained_and_the_job_refused():
    everyone = fleet()
    me = node("b200-006", flags=("RESERVED",))
    everyone[5] = me
    p = plan("prolog", BAD, me, everyone)
    assert (p.action, p.blocks_job) == ("drain", True)


@pytest.mark.parametrize("flag", ["REBOOT_REQUESTED", "REBOOT_ISSUED"])
def test_pending_reboot_refuses_the_job_but_leaves_the_drain_to_the_reboot(flag):
    me = node("b200-003", flags=(flag,))
    p = plan("prolog", BAD, me, [me])
    assert p.action == "alert" and flag in p.reason and p.blocks_job


def test_maintenance_node_alerts_and_lets_the_job_run():
    me = node("b200-003", flags=("MAINTENANCE", "RESERVED"))
    p = plan("prolog", BAD, me, [me])
    assert p.action == "alert" and not p.blocks_job


def test_down_node_is_not_drained_nor_re_reasoned_nor_resumed():
    me = node("b200-003", state="DOWN", reason="admin down")
    p = plan("periodic", BAD, me, [me])
    assert p.action == "alert" and "DOWN" in p.reason
    ours_down = node("b200-003", state="DOWN", flags=("DRAIN",), reason="slurmadm: xid: GPU0 XID 79 [periodic]")
    assert plan("periodic", CLEAN, ours_down, [ours_down], resume_after=1, prev=5).action == "none"


def test_reason_changed_since_our_drain_is_the_admins():
    """The store remembers the reason slurmadm set; if Slurm now shows another one, an admin edited it."""
    ours = "slurmadm: xid: GPU0 XID 79 [periodic]"
    edited = "slurmadm: xid: GPU0 XID 79 -- RMA, do not resume [periodic]"
    me = node("b200-003", flags=("DRAIN",), reason=edited)
    p = decide(context="periodic", results=CLEAN, node=me, everyone=[me], fraction=0.5, resume_after=1,
               prev_clean=5, our_reason=ours)
    assert p.action == "none" and "changed" in p.reason
    same = node("b200-003", flags=("DRAIN",), reason=ours)
    p = decide(context="periodic", results=CLEAN, node=same, everyone=[same], fraction=0.5, resume_after=1,
               prev_clean=5, our_reason=ours)
    assert p.action == "resume"


def test_two_racing_drains_with_separate_stores_keep_exactly_the_cap():
    """Two prologs on nodes with separate stores (no shared drain lock) both pass the breaker and
    drain; each then recounts Slurm's state. The decision must be one answer for both: the
    drains Slurm recorded first (then by name) stay, the rest undo, so the cap holds and is used."""
    base = fleet(8)  # cap 2 at 0.25
    old = node("b200-008", flags=("DRAIN",), reason="slurmadm: xid: GPU0 XID 79 [periodic]")
    old = NodeInfo(**{**old.__dict__, "reason_time": 1000.0})
    racers = [NodeInfo(**{**node(n, flags=("DRAIN",), reason="slurmadm: ecc-uncorrected: GPU5 x [prolog]").__dict__,
                          "reason_time": 2000.0}) for n in ("b200-003", "b200-001")]
    after = [n for n in base if n.name not in {"b200-008", "b200-003", "b200-001"}] + [old, *racers]
    verdicts = {r.name: over_cap(r, after, 0.25) for r in racers}
    assert verdicts["b200-001"] == "" and verdicts["b200-003"] != ""  # one stays: cap 2 = old + b200-001
    # with room for both, neither undoes
    assert all(over_cap(r, after, 0.5) == "" for r in racers)
    # and the old drain is never the one to go
    assert over_cap(old, after, 0.25) == ""
