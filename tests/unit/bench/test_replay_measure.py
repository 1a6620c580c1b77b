"""The replay's figures from what a run observed: detection per class, job harm, false drains,
repair and cost, and the targets of policy (a) against the NHC-like policy (c)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from bench.replay import measure as m
from bench.replay import watch
from bench.replay.schedule import Fault

pytestmark = pytest.mark.unit

C = 1000.0  # compression: 1 replay second = 1000 site seconds


def fault(t, node, cls="faulty-gpu", duration=0.0, kind="xid"):
    return Fault(t, node, kind, "gpu", "3", "79", duration, cls)


def observed(policy="a", **kw):
    base = {"policy": policy, "compression": C, "horizon_s": 100.0, "faults": []}
    return m.Observed(**{**base, **kw})


def test_a_drain_after_the_fault_detects_it_with_its_mechanism_and_latency():
    obs = observed(faults=[(fault(10, "n1"), True), (fault(20, "n2", cls="psu", kind="psu-failed"), True)],
                   drains=[m.Drain(10.5, "n1", "slurmadm: gpu-xid: GPU3 Xid 79 [prolog]")])
    r = m.measure(obs)
    assert r["per_class"]["faulty-gpu"] == {"injected": 1, "detected": 1, "signal": True,
                                            "mechanisms": {"gpu-xid": 1}, "already_out": 0,
                                            "p50_s": 500.0, "p95_s": 500.0}
    assert r["undetected_classes"] == ["psu"]


def test_a_fault_with_no_node_signal_is_not_counted_as_missed():
    obs = observed(faults=[(fault(10, "n1", cls="sdc", kind="corrupt"), False)])
    assert m.measure(obs)["undetected_classes"] == []


def test_a_burn_in_finds_what_has_no_node_signal_and_its_sweep_is_no_drain():
    """A burn-in sweep takes n1 into its reservation (maintenance, not a drain); its known-answer
    test drains n1 for the silent corruption: that drain is the detection; the sweep's end is no
    repair (the Xid on n2 is not ended by n2's sweep ending); maintenance node-hours apart."""
    sdc, xid = fault(5, "n1", cls="sdc", kind="corrupt"), fault(8, "n2")
    bug = Fault(5, "n3", "exit", "user", "", "1", 0.0, "software")
    obs = observed(faults=[(sdc, False), (xid, True), (bug, False)],
                   drains=[m.Drain(6, "n1", "slurmadm: bmc-temperature: other part [bmc]"),
                           m.Drain(20, "n1", "maintenance (alloc$)"),
                           m.Drain(30, "n1", "slurmadm: burnin-kat: GPU4 (standin:n1:gpu4): differs [burnin]"),
                           m.Drain(9, "n2", "maintenance (idle$)"),
                           m.Drain(40, "n2", "slurmadm: xid: GPU3 XID 79 [prolog]"),
                           # a pair test failing on a loaded machine finds no user's bug
                           m.Drain(7, "n3", "slurmadm: burnin-allreduce-pair: pair n3+n4 busbw 0.001 [burnin]")],
                   returns=[m.Return(7, "n1", "clean-runs"), m.Return(35, "n2", "maintenance")],
                   runs=[m.Run("on-n2", ("n2",), 36, 39, "FAILED")])
    r = m.measure(obs)
    assert r["per_class"]["sdc"]["detected"] == 1 and r["per_class"]["sdc"]["mechanisms"] == {"burnin-kat": 1}
    assert r["per_class"]["sdc"]["p50_s"] == 25 * C and r["undetected_classes"] == []
    assert r["per_class"]["software"]["detected"] == 0
    assert r["per_class"]["faulty-gpu"]["already_out"] == 0  # the sweep is not "already drained"
    assert r["per_class"]["faulty-gpu"]["detected"] == 1
    assert r["drains"]["false"] == 0 and r["drains"]["maintenance"] == 2
    assert r["jobs"]["started_on_faulty_node"] == 1  # the Xid on n2 outlived the sweep's end
    assert r["repair"]["node_hours_maintenance"] == round(((30 - 20) + (35 - 9)) * C / 3600, 2)


def test_a_fault_on_a_node_already_drained_is_counted_as_already_out():
    obs = observed(faults=[(fault(10, "n1"), True), (fault(30, "n1", cls="gpu-hbm"), True)],
                   drains=[m.Drain(11, "n1", "slurmadm: gpu-xid: x")])
    r = m.measure(obs)
    assert r["per_class"]["gpu-hbm"]["already_out"] == 1
    assert r["undetected_classes"] == []


def test_a_job_started_after_the_fault_and_before_its_repair_is_harm():
    f = fault(10, "n1", duration=20)
    obs = observed(faults=[(f, True)], runs=[
        m.Run("before", ("n1",), 5, 9, "COMPLETED"),
        m.Run("during", ("n1", "n2"), 15, 16, "FAILED"),     # started on the faulty node: harm, and killed
        m.Run("after-repair", ("n1",), 31, 40, "COMPLETED"),
        m.Run("elsewhere", ("n2",), 15, 40, "COMPLETED"),
    ])
    r = m.measure(obs)
    assert r["jobs"]["started_on_faulty_node"] == 1
    assert r["jobs"]["started_on_faulty_names"] == ["during"]
    assert r["jobs"]["killed_by_faults"] == 1


def test_a_failed_run_with_no_fault_in_its_window_is_the_users_and_costs_nothing_here():
    obs = observed(faults=[(fault(50, "n1"), True)],
                   runs=[m.Run("user", ("n1",), 10, 20, "FAILED"), m.Run("ok", ("n1",), 20, 30, "COMPLETED")])
    r = m.measure(obs)
    assert r["jobs"]["killed_by_faults"] == 0
    assert r["cost"]["gpu_hours_lost"] == 0
    assert r["cost"]["gpu_hours_completed"] == pytest.approx(10 * 8 * C / 3600, abs=0.01)
    assert r["cost"]["ettr"] == 1.0


def test_a_drain_with_no_fault_behind_it_is_false():
    obs = observed(faults=[(fault(10, "n1", duration=5), True)],
                   drains=[m.Drain(12, "n1", "slurmadm: gpu-xid: x"), m.Drain(40, "n1", "slurmadm: gpu-ecc: y"),
                           m.Drain(50, "n2", "slurmadm: infiniband: z")])
    r = m.measure(obs)
    assert r["drains"] == {"total": 3, "maintenance": 0, "false": 2, "repair_after_fault": 0,
                           "false_nodes": ["n1", "n2"],
                           "false_reasons": ["slurmadm: gpu-ecc: y", "slurmadm: infiniband: z"]}


def test_a_drain_while_the_injector_had_not_returned_has_the_fault_as_its_cause():
    """The hour-long run's b200-005: an IB flap asked for at 460 s, written at once, its injector
    back at 465 s; an epilog drained the node at 463 s. That drain is the fault's detection (time
    to drain 0), not a false drain, and the node was not already out for it. Without the
    injection's start the same drain is false and the fault counted as struck on a node out."""
    from dataclasses import replace

    flap = Fault(465.0, "n1", "flap", "ib", "mlx5_0", "", 50.0, "network", asked_s=460.0)
    drain = m.Drain(463.0, "n1", "slurmadm: infiniband: mlx5_0 port 1 link_downed rose by 4 [epilog]")
    r = m.measure(observed(horizon_s=600.0, faults=[(flap, True)], drains=[drain]))
    assert r["drains"]["false"] == 0
    assert r["per_class"]["network"] == {"injected": 1, "detected": 1, "signal": True,
                                         "mechanisms": {"infiniband": 1}, "already_out": 0,
                                         "p50_s": 0.0, "p95_s": 0.0}
    blind = m.measure(observed(horizon_s=600.0, faults=[(replace(flap, asked_s=None), True)], drains=[drain]))
    assert blind["drains"]["false"] == 1 and blind["per_class"]["network"]["already_out"] == 1
    # a drain before the injection began still has no cause
    early = m.Drain(455.0, "n1", "slurmadm: infiniband: x [epilog]")
    assert m.measure(observed(horizon_s=600.0, faults=[(flap, True)], drains=[early]))["drains"]["false"] == 1


def test_time_out_of_service_runs_from_drain_to_return_or_the_end():
    obs = observed(drains=[m.Drain(10, "n1", "r"), m.Drain(90, "n2", "r")],
                   returns=[m.Return(30, "n1", "ladder")], lemons=["n2"])
    r = m.measure(obs)
    assert r["repair"] == {"returned_by_ladder": 1, "returned_otherwise": 0, "lemons": ["n2"],
                           "node_hours_out": round((20 + 10) * C / 3600, 2), "node_hours_maintenance": 0.0}


def test_compare_checks_the_targets_against_the_nhc_like_policy():
    killed = m.Run("k", ("n1",), 0, 9, "FAILED")
    a = m.measure(observed("a", faults=[(fault(5, "n1"), True)], runs=[killed],
                           drains=[m.Drain(6, "n1", "slurmadm: gpu-xid: x")]))
    c = m.measure(observed("c", faults=[(fault(5, "n1"), True)],
                           runs=[killed, m.Run("k2", ("n1",), 10, 40, "FAILED")],
                           drains=[m.Drain(6, "n1", "slurmadm: gpu-xid: x")]))
    out = m.compare({"a": a, "c": c})
    assert out["ratios"]["a/c"] == pytest.approx(9 / 39, abs=0.001)
    assert out["targets"] == {"every signalled class detected": True, "no job started on a known-faulty node": True,
                              "no false drain": True, "loses at most half of the NHC-like policy's GPU-hours": True}


def test_growth_flags_a_leak_and_not_a_warm_up():
    assert watch.growth([50, 80, 100, 100, 101, 100, 100, 99, 101])["grew"] is False
    assert watch.growth([50, 60, 70, 80, 90, 100, 110, 120, 130])["grew"] is True
    assert watch.growth([1, 2])["grew"] is None


def test_a_process_is_sampled_from_proc_and_a_gone_one_is_none():
    me = watch.sample_pid(os.getpid())
    assert me["rss_kib"] > 0 and me["fds"] >= 3
    assert watch.sample_pid(2**22 + 7) is None


def test_a_node_is_out_of_service_until_slurm_shows_it_in_service_again():
    """A repair ladder's reboot and qualification are one stretch out of service: the replay's
    poll must not read `boot` or the qualification's reservation as a return (and the drain after
    it as a new, false, one); a late ping (`*`) on a loaded machine is no drain."""
    from bench.fleet_replay import out_of_service

    assert not any(out_of_service(s) for s in ("idle", "mix", "alloc", "comp", "plnd", "idle*", "mix*"))
    assert all(out_of_service(s) for s in ("drain", "drng", "drain*", "down", "down*", "boot", "boot^", "idle@",
                                           "mix@", "maint", "resv", "fail", "failg", "inval", "unk*"))


def test_the_ladders_own_drains_and_a_reboots_passing_state_are_the_repair_not_false_drains():
    """After a fault's repair time the ladder may still hold the node (a second rung, a reboot
    whose passing state Slurm shows with no reason): the repair of an injected fault, counted
    apart; the same drains on a node that never had a fault are false."""
    obs = observed(faults=[(fault(10, "n1", duration=5), True)],
                   drains=[m.Drain(12, "n1", "slurmadm: xid: x"), m.Drain(40, "n1", "slurmadm: repair: reset: y"),
                           m.Drain(50, "n1", "none (down*)"), m.Drain(60, "n1", "slurmadm: infiniband: z"),
                           m.Drain(70, "n2", "slurmadm: repair: reset: y")],
                   returns=[m.Return(30, "n1", "ladder"), m.Return(45, "n1", "ladder"), m.Return(55, "n1", "x")])
    r = m.measure(obs)["drains"]
    assert (r["false"], r["repair_after_fault"]) == (2, 2)
    assert r["false_reasons"] == ["slurmadm: infiniband: z", "slurmadm: repair: reset: y"]
    assert r["false_nodes"] == ["n1", "n2"]


def test_a_fault_left_to_the_ladder_ends_at_the_nodes_return():
    """duration 0: the ladder's reset or reboot is the repair; a job after the node's return did
    not start on a faulty node, one started before it (the node never drained) did."""
    f = fault(10, "n1", duration=0)
    obs = observed(faults=[(f, True)], drains=[m.Drain(12, "n1", "slurmadm: xid: x")],
                   returns=[m.Return(30, "n1", "ladder")],
                   runs=[m.Run("before-drain", ("n1",), 11, 12, "FAILED"), m.Run("after", ("n1",), 31, 50, "COMPLETED")])
    r = m.measure(obs)
    assert r["jobs"]["started_on_faulty_names"] == ["before-drain"]
    assert r["drains"]["false"] == 0
    never = m.measure(observed(faults=[(f, True)], runs=[m.Run("late", ("n1",), 90, 95, "COMPLETED")]))
    assert never["jobs"]["started_on_faulty_names"] == ["late"]  # never returned: the fault is still there


def test_a_node_is_known_faulty_once_a_drain_followed_the_fault():
    """Harm counts from the injection (a PSU failure has no prolog check: a job may start before
    the next BMC sweep); the target counts runs started after a drain followed the fault while it
    was still in its part: the node went back to service too soon."""
    psu = Fault(10, "n1", "psu-failed", "bmc", "", "2", 30, "psu")
    obs = observed(faults=[(psu, True)], drains=[m.Drain(15, "n1", "slurmadm: bmc-psu: x")],
                   returns=[m.Return(20, "n1", "clean-runs")],
                   runs=[m.Run("before-sweep", ("n1",), 11, 14, "COMPLETED"),
                         m.Run("returned-too-soon", ("n1",), 25, 30, "COMPLETED"),
                         m.Run("after-repair", ("n1",), 45, 50, "COMPLETED")])
    r = m.measure(obs)
    assert r["jobs"]["started_on_faulty_names"] == ["before-sweep", "returned-too-soon"]
    assert r["jobs"]["started_on_known_faulty_names"] == ["returned-too-soon"]
    assert m.compare({"a": r})["targets"]["no job started on a known-faulty node"] is False


def test_a_straggler_wastes_its_share_of_every_run_on_it_and_only_burn_in_finds_it():
    """A 30% straggler on n1 from t=10 to t=30: a run on n1+n2 from 0 to 40 shares it for 20 s, so
    30% of 20 s of its 2 nodes' 16 GPUs is wasted; a run on n2 alone is not slowed. No check fails:
    a health drain of n1 detects nothing, the burn-in's fleet verdict does."""
    slow = Fault(10, "n1", "slow", "gpu", "2", "30", 20.0, "straggler")
    runs = [m.Run("big", ("n1", "n2"), 0, 40, "COMPLETED"), m.Run("other", ("n2",), 0, 40, "COMPLETED")]
    r = m.measure(observed(faults=[(slow, False)], runs=runs,
                           drains=[m.Drain(12, "n1", "slurmadm: gpu-xid: GPU2 Xid 79 [prolog]")],
                           returns=[m.Return(14, "n1", "clean-runs")]))
    assert r["cost"]["runs_slowed"] == 1
    assert r["cost"]["gpu_hours_slowed"] == pytest.approx(20 * 0.30 * 16 * C / 3600, rel=0.02)
    assert r["per_class"]["straggler"]["detected"] == 0 and r["undetected_classes"] == []
    found = m.measure(observed(faults=[(slow, False)], runs=runs,
                               drains=[m.Drain(25, "n1", "slurmadm: burnin-straggler: stress-cpu 0.4x [burnin]")]))
    assert found["per_class"]["straggler"]["mechanisms"] == {"burnin-straggler": 1}
    assert m.measure(observed(runs=runs))["cost"]["gpu_hours_slowed"] == 0


def test_the_mix_says_only_an_active_test_sees_a_straggler():
    from bench.replay import schedule

    mix = {r.cls: r for r in schedule.load_mix()}
    assert mix["straggler"].signal == "none" and mix["straggler"].kind in m.SLOW_KINDS
    assert set(m.ACTIVE_MECHANISMS) <= {cls for cls, r in mix.items() if r.signal == "none"}


def test_a_gpu_fault_the_ladder_clears_ends_at_its_return():
    """The hour-long run's Xid 48s (`gpu-hbm`, a 20-site-hour repair time drawn from the mix):
    the webhook drained the node, the ladder reset the GPU (the stand-in's reset clears a
    reset-class XID, as NVIDIA's catalog says), qualified and resumed it; the next job there was
    counted as started on a known-faulty node. A part the ladder's step clears is mended at the
    ladder's return; one it cannot clear (an NVLink down: a cable or a board) is not, and neither
    is a node back by clean runs alone."""
    def harm(f, by):
        obs = observed(faults=[(f, True)], drains=[m.Drain(12, "n1", "slurmadm: alert-GpuXidFatal: x [alert]")],
                       returns=[m.Return(30, "n1", by)], runs=[m.Run("after", ("n1",), 35, 40, "COMPLETED")])
        return m.measure(obs)["jobs"]["started_on_known_faulty_node"]

    xid48 = fault(10, "n1", cls="gpu-hbm", duration=70.0)
    link = Fault(10, "n1", "nvlink-down", "gpu", "3", "1", 70.0, "faulty-gpu")
    assert harm(xid48, "ladder") == 0
    assert harm(xid48, "clean-runs") == 1
    assert harm(link, "ladder") == 1


def test_what_the_ladder_mends_is_what_the_stand_in_clears():
    """LADDER_MENDS against the stand-in's own rules (devcluster/gpus.py): each kind there is
    cleared by a GPU reset or a reboot; every other GPU kind of the mix is kept by both."""
    from bench.replay import schedule
    from slurmadm.devcluster import gpus

    kinds = gpus.FAULT_KINDS  # name -> FaultKind
    cleared = lambda name: kinds[name].reset != "keep" or name in gpus._CLEARED_BY_REBOOT  # noqa: E731
    mix = {r.kind for r in schedule.load_mix() if r.injector == "gpu"}
    assert set(m.LADDER_MENDS) <= mix
    assert all(cleared(k) for k in m.LADDER_MENDS)
    assert not [k for k in mix - set(m.LADDER_MENDS) if cleared(k)]


def test_a_run_that_started_in_the_second_its_node_came_back_is_no_harm():
    """CI's ci-009: b200-001's pending row remap (until the ladder acts) was reset, qualified and
    resumed between two samples (dated just after the last one that saw it out, 56.351), and
    sacct put the next job's start at 56.35: its whole second, in which the node came back. A
    run that started a full second before the return did start on the faulty node."""
    f = fault(20, "n1", cls="gpu-hbm", kind="row-remap-pending")

    def known(start):
        obs = observed(faults=[(f, True)], drains=[m.Drain(27.85, "n1", "slurmadm: row-remap: GPU5 pending [prolog]")],
                       returns=[m.Return(56.351, "n1", "ladder")], runs=[m.Run("ci-009", ("n1",), start, 87.35,
                                                                                 "COMPLETED")])
        return m.measure(obs)["jobs"]["started_on_known_faulty_node"]

    assert known(56.35) == 0
    assert known(55.0) == 1


def test_a_run_that_fails_after_the_ladder_mended_its_node_is_not_killed_by_that_fault():
    """An Xid 48 the schedule keeps in its part for 40 s (its class's repair time) is mended by the
    ladder's reset at 20 (LADDER_MENDS): a run failing on that node from 30 (past the 0.6-s
    attribution window) failed for something else; one that started before the return was its."""
    f = fault(10, "n1", cls="gpu-hbm", duration=40.0, kind="xid")
    back = [m.Return(20.0, "n1", "ladder")]

    def killed(start, returns=back):
        obs = observed(faults=[(f, True)], drains=[m.Drain(10.5, "n1", "slurmadm: gpu-xid: GPU3 Xid 48 [prolog]")],
                       returns=returns, runs=[m.Run("r", ("n1",), start, start + 5, "FAILED")])
        return m.measure(obs)["jobs"]["killed_by_faults"]

    assert killed(30.0) == 0
    assert killed(19.0) == 1
    assert killed(30.0, returns=[m.Return(20.0, "n1", "clean-runs")]) == 1  # not the ladder: still in its part


def test_a_fault_until_the_ladder_acts_kills_runs_only_until_the_node_returns():
    f = fault(10, "n1", cls="gpu-hbm", kind="row-remap-pending")  # duration 0: until the ladder acts

    def killed(start):
        obs = observed(faults=[(f, True)], returns=[m.Return(20.0, "n1", "ladder")],
                       runs=[m.Run("r", ("n1",), start, start + 5, "FAILED")])
        return m.measure(obs)["jobs"]["killed_by_faults"]

    assert (killed(12.0), killed(20.5), killed(30.0)) == (1, 1, 0)  # 20.5: inside the window after the return


def test_the_ladder_taking_over_a_burn_in_drain_is_still_that_test_s_detection():
    """The straggler replay: the burn-in drained b200-001 `burnin-straggler` and `repair run`
    rebooted it within the second, so the poll's first reason was the ladder's step on a BURNIN
    incident: on the straggler's node that is the burn-in's detection; a BURNIN step on another
    class's fault, or a ladder step of another class, is not."""
    assert m.ladder_class("slurmadm: repair: reboot: node BURNIN (rung 1 of 2: reboot -> qualify) [repair]") == "BURNIN"
    assert m.ladder_class("slurmadm: repair: reset: GPU2 serial 1655000001 RESET_GPU (rung 1 of 3) [repair]") \
        == "RESET_GPU"
    assert m.ladder_class("slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline median 1000") == ""
    f = Fault(10, "n1", "slow", "gpu", "0", "30", 0.0, "straggler")
    ladder = "slurmadm: repair: reboot: node BURNIN (rung 1 of 2: reboot -> qualify -> resume) [repair]"

    def detected(reason, cls="straggler"):
        g = replace(f, cls=cls)
        r = m.measure(observed(faults=[(g, False)], drains=[m.Drain(20.0, "n1", reason)]))["per_class"][cls]
        return r["detected"], r["mechanisms"]

    assert detected(ladder) == (1, {"repair-BURNIN": 1})
    assert detected("slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline median 1000 [burnin]") == \
        (1, {"burnin-straggler": 1})
    assert detected("slurmadm: repair: reboot: node SDC (rung 1 of 2) [repair]") == (0, {})
    assert detected(ladder, cls="sdc") == (0, {})


def test_a_timer_s_cadence_is_what_it_really_ran_in_site_hours():
    """A timer waits its interval after each run ends, so a slow run stretches the site time
    between runs: the report says how often the burn-in really ran (fleet_replay.cadence)."""
    from bench.fleet_replay import cadence, cadence_line

    # asked every 43.2 replay s (a site night at 2,000x); each sweep took 100 s: one every 143.2 s
    runs = [(43.2, 143.2, 0), (186.4, 286.4, 1), (329.6, 429.6, 0)]
    c = cadence(runs, every=43.2, compression=2000)
    assert c == {"runs": 3, "asked_site_h": 24.0, "every_site_h": 79.6, "took_p50_s": 100.0, "failed": 0}
    assert cadence_line("a", "burn-in", c) == ("policy a's burn-in: 3 runs, one every 79.6 site h (asked: 24); "
                                               "a run took 100 s (p50)")
    one = cadence([(43.2, 50.0, 3)], every=43.2, compression=2000)
    assert one["every_site_h"] is None and one["failed"] == 1
    assert cadence_line("a", "burn-in", one) == ("policy a's burn-in: 1 runs, too few to space (asked: 24); "
                                                 "a run took 6.8 s (p50); 1 failed")
    assert cadence([], every=43.2, compression=2000)["runs"] == 0
