"""The replay's stand-in training task: a GPU of its own that silently computes wrong answers
(the stand-in's `corrupt`) fails it, as an SDC does a real job; one that is not its own does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay import job
from bench.replay import schedule
from slurmadm.devcluster import gpus
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_a_corrupting_gpu_of_its_own_fails_the_task(tmp_path):
    gpus.write_healthy(tmp_path, "b200-003", BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    assert job.corrupting(str(tmp_path), "b200-003", list(range(8))) == []
    gpus.inject(tmp_path, "b200-003", 4, "corrupt")
    assert job.corrupting(str(tmp_path), "b200-003", list(range(8))) == [4]
    assert job.corrupting(str(tmp_path), "b200-003", [0, 1, 2, 3]) == []  # not its GPU
    gpus.clear(tmp_path, "b200-003", gpu=4)
    assert job.corrupting(str(tmp_path), "b200-003", list(range(8))) == []
    assert job.corrupting(str(tmp_path), "b200-009", list(range(8))) == []  # no state: nothing said


def test_the_sdc_schedule_is_cis_with_one_silent_corruption():
    nodes = {f"b200-{i:03d}" for i in range(1, 9)}
    read = [schedule.read_faults((REPO / p).read_text(), p, nodes)
            for p in ("bench/replay/faults-8-sdc.csv", "tests/fixtures/replay/faults-8.csv")]
    sdc = [f for f in read[0] if f.cls == "sdc"]
    assert [(f.node, f.kind, f.part) for f in sdc] == [("b200-003", "corrupt", "4")]
    # the CI schedule's faults but its flapping cable (on b200-003, this schedule's SDC node; added
    # to CI's after this schedule's runs in bench/RESULTS.md)
    assert [f for f in read[0] if f.cls != "sdc"] == [f for f in read[1] if f.kind != "flap"]
    assert {r.cls: r.signal for r in schedule.load_mix()}["sdc"] == "none"  # no detection target


def test_the_technician_returns_only_the_part_it_replaced():
    """The replay's people act on an RMA hold of the replaced part's class: a fan replaced on a
    node held for a GPU that corrupts its answers leaves that node to the ladder."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay

    held = [{"class": "SDC", "state": "rma"}, {"class": "PSU", "state": "closed"}]
    assert not fleet_replay.rma_for(held, "fan") and not fleet_replay.rma_for(held, "psu")
    assert fleet_replay.rma_for(held, "sdc")
    assert fleet_replay.rma_for([{"class": "PSU", "state": "rma"}], "psu")
    assert not fleet_replay.rma_for([{"class": "PSU", "state": "rma"}], "straggler")  # not a part swap


def test_a_straggler_among_the_jobs_nodes_slows_every_task(tmp_path):
    """Synchronous training waits for its slowest rank: the stand-in's `slow` on any GPU of any of
    the job's nodes is the job's slowdown; a node with no stand-in state is full speed."""
    from slurmadm.burnin.node import STANDIN_SLOWDOWN_KEY

    assert job.SLOW_KEY == STANDIN_SLOWDOWN_KEY  # the key the stand-in's `slow` fault writes
    for node in ("b200-001", "b200-002"):
        gpus.write_healthy(tmp_path, node, BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    both = ["b200-001", "b200-002", "b200-077"]  # the last has no state
    assert job.slowdown(str(tmp_path), both) == 0.0
    gpus.inject(tmp_path, "b200-002", 6, "slow", 30)
    assert job.slowdown(str(tmp_path), both) == 30.0
    assert job.slowdown(str(tmp_path), ["b200-001"]) == 0.0  # a job without the straggler
    gpus.inject(tmp_path, "b200-001", 0, "slow", 95)
    assert job.slowdown(str(tmp_path), both) == 95.0  # the slowest node is the job's speed
    gpus.clear(tmp_path, "b200-001")
    gpus.clear(tmp_path, "b200-002")
    assert job.slowdown(str(tmp_path), both) == 0.0


def test_job_nodes_from_slurms_nodelist(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "b200-[001-003,007]")
    monkeypatch.setenv("SLURMD_NODENAME", "b200-002")
    assert job.job_nodes() == ["b200-001", "b200-002", "b200-003", "b200-007"]
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    assert job.job_nodes() == ["b200-002"]


def test_the_store_size_counts_every_sqlite_store_and_the_central_tables(tmp_path):
    """The growth watch's store size: the shared or per-node SQLite files and, with the central
    store, the slurmadm database's table files in MariaDB's data directory (not slurmdbd's)."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from slurmadm.devcluster.cluster import DevCluster

    dc = DevCluster(tmp_path)
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "b200-001.db").write_bytes(b"x" * 100)
    (tmp_path / "slurmadm.db").write_bytes(b"x" * 10)
    (tmp_path / "mysql" / "slurmadm").mkdir(parents=True)
    (tmp_path / "mysql" / "slurmadm" / "incidents.ibd").write_bytes(b"x" * 1000)
    (tmp_path / "mysql" / "slurm_acct_db").mkdir()
    (tmp_path / "mysql" / "slurm_acct_db" / "job_table.ibd").write_bytes(b"x" * 5000)  # slurmdbd's: not ours
    assert fleet_replay.store_bytes(dc) == 1110


def test_a_fault_is_measured_from_its_injection_to_its_repair_as_they_took_effect():
    """On a loaded machine an injection returns late; the repair comes at the schedule's time: the
    fault is in its part from the one to the other, not the schedule's duration from the late start."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay

    f = [schedule.Fault(100.0, "n1", "xid", "gpu", "4", "48", 70.0, "gpu-hbm"),
         schedule.Fault(110.0, "n2", "xid", "gpu", "1", "79", 0.0, "faulty-gpu"),
         schedule.Fault(120.0, "n3", "flap", "ib", "mlx5_0", "", 50.0, "network"),
         schedule.Fault(500.0, "n4", "xid", "gpu", "1", "79", 10.0, "faulty-gpu")]  # never injected
    got = fleet_replay.as_observed(f, {0: 115.0, 1: 111.0, 2: 121.0}, {0: 172.0}, {0: 101.0, 1: 110.5})
    assert [(g.node, g.t_s, g.duration_s) for g in got] == [("n1", 115.0, 57.0), ("n2", 111.0, 0.0),
                                                           ("n3", 121.0, 49.0)]  # n3: run ended first
    # when each injection began: a check may see the fault from then (n3's start was not noted)
    assert [g.asked_s for g in got] == [101.0, 110.5, 121.0]
    assert schedule.write_faults(got).splitlines()[0] == "t_s,node,kind,injector,part,value,duration_s,cls"


def test_a_node_is_back_only_when_two_samples_say_so():
    """The ladder's qualification resumes its node into a reservation a moment before sinfo shows
    the reservation: that one `idle` sample is no return (the run counted "returned by the
    ladder" at each qualification's start, and the qualification as maintenance); the reset, the
    qualification and the resume are one stretch out of service, back after the last sample out."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from bench.replay import measure as m

    drains, returns, lemons = [], [], set()
    s = fleet_replay.Stretches(drains, returns, lemons)
    alert = "slurmadm: alert-GpuXidFatal: b200-002 GPU1: XID 79, one NVIDIA's catalog says to drain for [alert]"
    ladder = "slurmadm: repair: qualify: GPU_LOST: after reboot [repair]"
    for t, state, reason in [(8.0, "drain", alert), (12.0, "drain", ladder), (14.0, "idle", ""),
                             (15.0, "alloc$", ""), (30.0, "drain", ladder), (32.0, "idle", ""), (33.0, "idle", ""),
                             (40.0, "drain", "slurmadm: xid: again [periodic]"), (41.0, "idle", "")]:
        s.sample(t, [("b200-002", state, reason), ("b200-003", "idle", "")])
    s.finish()
    assert drains == [m.Drain(8.0, "b200-002", alert), m.Drain(40.0, "b200-002", "slurmadm: xid: again [periodic]")]
    # dated just after the last sample that saw it out (a job may start before the next sample)
    assert returns == [m.Return(30.001, "b200-002", "ladder"), m.Return(40.001, "b200-002", "clean-runs")]
    assert lemons == set()


def test_a_fault_no_hook_sees_is_repaired_only_once_its_active_test_found_it():
    """At a site a straggler stays until someone finds it: its repair time counts from its active
    test's drain (burn-in's fleet verdict, or the ladder's step on that drain), not from its
    injection; another part's drain of the node finds nothing; one never found stays to the end."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from bench.replay import measure as m

    slow = schedule.Fault(5.0, "b200-001", "slow", "gpu", "0", "30", 43.2, "straggler")
    before = m.Drain(4.0, "b200-001", "slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline median 1000 [burnin]")
    other = m.Drain(20.0, "b200-001", "slurmadm: gpu-xid: GPU3 Xid 79 [prolog]")
    elsewhere = m.Drain(30.0, "b200-002", "slurmadm: burnin-straggler: stress-tflops 700 = 70% of fleet median 1000 [burnin]")
    assert fleet_replay.found_at([before, other, elsewhere], slow, 5.0) is None
    ladder = m.Drain(61.0, "b200-001", "slurmadm: repair: reboot: node BURNIN (rung 1 of 2) [repair]")
    own = m.Drain(64.0, "b200-001", "slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline median 1000 [burnin]")
    assert fleet_replay.found_at([own, other, ladder], slow, 5.0) == 61.0  # the ladder took its drain over first
    assert fleet_replay.found_at([own, other], slow, 5.0) == 64.0
    sdc = schedule.Fault(5.0, "b200-001", "corrupt", "gpu", "4", "", 43.2, "sdc")
    assert fleet_replay.found_at([own], sdc, 5.0) is None  # the straggler's verdict does not find an SDC
    kat = m.Drain(70.0, "b200-001", "slurmadm: burnin-kat: GPU4 answered wrong [burnin]")
    assert fleet_replay.found_at([own, kat], sdc, 5.0) == 70.0

    # as the run saw it: found and repaired (the part replaced 43.2 s after the drain) ends at its
    # repair; not repaired by the end (or never found) stays until its node's return after its
    # detection (duration 0, as measure reads a fault left to the ladder)
    got = fleet_replay.as_observed([slow, sdc], {0: 5.5, 1: 6.0}, {0: 107.7}, {0: 5.1, 1: 5.9}, until_found={0, 1})
    assert [(g.t_s, g.duration_s, g.asked_s) for g in got] == [(5.5, 102.2, 5.1), (6.0, 0.0, 5.9)]
    # the schedule's own duration is no end for it: unrepaired without `until_found` it would end at 48.2
    assert fleet_replay.as_observed([slow], {0: 5.0}, {})[0].duration_s == 43.2
    # the technician returns a straggler held for RMA after its GPU is replaced
    assert fleet_replay.rma_for([{"class": "BURNIN", "state": "rma"}], "straggler")
    assert not fleet_replay.rma_for([{"class": "BURNIN", "state": "rma"}], "psu")


def test_the_run_repairs_a_fault_no_hook_sees_only_after_it_is_found():
    """Run.until_found: a class without a node-level signal (the mix's `none`) and a repair time;
    a user's own bug (no repair time) and a signalled class keep their schedule's repair."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay

    run = fleet_replay.Run.__new__(fleet_replay.Run)
    run.signal = {r.cls: r.signal == "node" for r in schedule.load_mix()}
    assert run.until_found(schedule.Fault(5.0, "n1", "slow", "gpu", "0", "30", 43.2, "straggler"))
    assert run.until_found(schedule.Fault(5.0, "n1", "corrupt", "gpu", "4", "", 36.7, "sdc"))
    assert not run.until_found(schedule.Fault(5.0, "n1", "corrupt", "gpu", "4", "", 0.0, "sdc"))
    assert not run.until_found(schedule.Fault(5.0, "n1", "exit", "user", "", "1", 0.0, "software"))
    assert not run.until_found(schedule.Fault(5.0, "n1", "xid", "gpu", "1", "79", 36.7, "faulty-gpu"))


def test_a_node_resumed_into_its_qualification_reservation_is_no_return():
    """Slurm marks a node in a new MAINT reservation (`idle$`) only at its next pass over the
    reservations, seconds later: the straggler run counted the ladder's qualification as a return
    (the node `idle` for two samples after its reboot) and the qualification as maintenance. Read
    with the active reservations, the reboot, the qualification and its failure are one stretch."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from bench.replay import measure as m

    show = ("ReservationName=slurmadm_repair-b200-001 StartTime=2026-12-07T10:20:17 EndTime=2026-12-07T11:20:17 "
            "Duration=01:00:00 Nodes=b200-001 NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) "
            "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) "
            "Licenses=(null) State=ACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n"
            "ReservationName=later StartTime=2027-01-01T00:00:00 EndTime=2027-01-02T00:00:00 Duration=1-00:00:00 "
            "Nodes=b200-[002-003] NodeCnt=2 Flags=MAINT,SPEC_NODES State=INACTIVE\n"
            "ReservationName=users StartTime=2026-12-07T10:00:00 EndTime=2026-12-08T10:00:00 Duration=1-00:00:00 "
            "Nodes=b200-[004-005] NodeCnt=2 Flags=SPEC_NODES State=ACTIVE\n")
    assert fleet_replay.maint_reserved(show) == {"b200-001"}  # not an inactive one, not a users' one
    assert fleet_replay.maint_reserved("No reservations in the system\n") == set()
    rows = [("b200-001", "idle", ""), ("b200-002", "idle", ""), ("b200-003", "alloc$", "")]
    assert fleet_replay.with_reservations(rows, {"b200-001", "b200-003"}) == [
        ("b200-001", "idle$", ""), ("b200-002", "idle", ""), ("b200-003", "alloc$", "")]

    drains, returns, lemons = [], [], set()
    s = fleet_replay.Stretches(drains, returns, lemons)
    reboot = "slurmadm: repair: reboot: node BURNIN (rung 1 of 2: reboot -> qualify -> resume) [repair] : reboot issued"
    failed = "slurmadm: repair: qualify: BURNIN: failed: straggler: stress-tflops 700 = 70% of baseline median 1000 [repair]"
    for t, state, reason, maint in [(278.6, "drain", reboot, set()), (281.0, "idle", "", {"b200-001"}),
                                    (282.0, "idle", "", {"b200-001"}), (283.0, "alloc$", "", {"b200-001"}),
                                    (296.0, "drain", failed, set())]:
        s.sample(t, fleet_replay.with_reservations([("b200-001", state, reason)], maint))
    s.finish()
    assert drains == [m.Drain(278.6, "b200-001", reboot)] and returns == []


def test_burn_in_s_rotation_hold_is_maintenance_and_its_verdict_a_drain():
    """A busy node due for burn-in (burnin.due_days) drained `burnin-due` is planned maintenance:
    no drain (never false), its time apart; the sweep that then finds it slow holds it
    `burnin-suspect`, a drain, and the straggler's detection."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from bench.replay import measure as m

    drains, returns, lemons = [], [], set()
    s = fleet_replay.Stretches(drains, returns, lemons)
    due = "slurmadm: burnin-due: last burned in 1 days ago (burnin.due_days 0.0005); held for the next sweep [burnin]"
    suspect = ("slurmadm: burnin-suspect: stress-tflops 700 = 70% of baseline median 1000 (slow in 1 sweep of 2; "
               "held for the next sweep's re-test) [burnin]")
    for t, state, reason in [(50.0, "drng", due), (60.0, "drain", due), (64.0, "alloc$", ""), (70.0, "drain", suspect)]:
        s.sample(t, [("b200-001", state, reason)])
    s.finish()
    assert [d.t_s for d in drains] == [50.0, 70.0] and m.maintenance(drains[0].reason) and drains[1].reason == suspect
    slow = schedule.Fault(5.0, "b200-001", "slow", "gpu", "0", "30", 43.2, "straggler")
    assert fleet_replay.found_at(drains, slow, 5.0) == 70.0
    # found at the suspect's hold, but nobody replaces a part on a suspicion: its repair time
    # counts from the re-test's confirmation (the 32-node run of 2026-12-07 replaced it before)
    assert fleet_replay.found_at(drains, slow, 5.0, confirmed=True) is None
    confirmed = m.Drain(90.0, "b200-001", "slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline "
                                          "median 1000 [burnin]")
    assert fleet_replay.found_at(drains + [confirmed], slow, 5.0, confirmed=True) == 90.0
    assert fleet_replay.found_at(drains + [confirmed], slow, 5.0) == 70.0
    found_not_repaired = fleet_replay.as_observed([slow], {0: 5.0}, {}, until_found={0})[0]
    r = m.measure(m.Observed("a", 2000.0, 100.0, [(found_not_repaired, False)], drains, returns))
    assert r["drains"]["false"] == 0 and r["drains"]["maintenance"] == 1
    assert r["per_class"]["straggler"]["mechanisms"] == {"burnin-suspect": 1}


def test_a_return_after_the_ladder_s_qualification_is_the_ladder_s_whatever_the_reason_said():
    """A GPU reset takes a second and leaves health's drain reason in place, so the poll never saw
    `slurmadm: repair: ...` and called the ladder's reset -> qualify -> resume a clean-runs return
    (the 32-node run of 2026-12-07: its XID 145 then stayed 'in its part' to its repair time, and
    two runs that started after the ladder mended it counted as started on a known-faulty node).
    A node seen in a qualification's own reservation (`<burnin.reservation>-<node>`) in its
    stretch is returned by the ladder; a burn-in sweep's reservation is not one."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay
    from bench.replay import measure as m

    show = ("ReservationName=slurmadm_burnin-b200-009 StartTime=2026-12-07T14:00:48 EndTime=2026-12-07T15:00:48 "
            "Duration=01:00:00 Nodes=b200-009 NodeCnt=1 Flags=MAINT,IGNORE_JOBS,SPEC_NODES State=ACTIVE\n"
            "ReservationName=slurmadm_burnin StartTime=2026-12-07T14:00:40 EndTime=2026-12-07T14:30:40 "
            "Duration=00:30:00 Nodes=b200-[005-006] NodeCnt=2 Flags=MAINT,IGNORE_JOBS,SPEC_NODES State=ACTIVE\n"
            "ReservationName=old-b200-007 StartTime=2026-12-07T10:00:00 EndTime=2026-12-07T11:00:00 "
            "Duration=01:00:00 Nodes=b200-007 NodeCnt=1 Flags=MAINT,SPEC_NODES State=INACTIVE\n")
    assert fleet_replay.qualifying(show) == {"b200-009"}
    assert fleet_replay.maint_reserved(show) == {"b200-009", "b200-005", "b200-006"}

    xid = "slurmadm: xid: GPU0 XID 145 NVLINK_RLW_ERROR (WORKFLOW_NVLINK5_ERR) [periodic]"
    flap = "slurmadm: infiniband: mlx5_0 link flapped 2 times in 6 h [periodic]"
    drains, returns, lemons = [], [], set()
    s = fleet_replay.Stretches(drains, returns, lemons)
    q = fleet_replay.qualifying(show)
    for t, rows, qual in [
            (27.6, [("b200-009", "drain", xid), ("b200-005", "drain", flap)], set()),
            (32.0, [("b200-009", "drain", xid), ("b200-005", "drain", flap)], set()),  # reset: reason kept
            (33.0, fleet_replay.with_reservations([("b200-009", "idle", ""), ("b200-005", "idle", "")],
                                                  fleet_replay.maint_reserved(show)), q),  # qualify / a sweep
            (41.0, [("b200-009", "drain", xid), ("b200-005", "drain", flap)], set()),  # drained before the resv goes
            (42.0, [("b200-009", "idle", ""), ("b200-005", "idle", "")], set()),
            (43.0, [("b200-009", "alloc", ""), ("b200-005", "idle", "")], set())]:
        s.sample(t, rows, qual)
    s.finish()
    assert [(r.node, r.t_s, r.by) for r in sorted(returns, key=lambda r: r.node)] == [
        ("b200-005", 41.001, "clean-runs"), ("b200-009", 41.001, "ladder")]
    # and the stand-in fault the reset cleared ends at that return: a run at 45 s is no harm
    fault = schedule.Fault(18.1, "b200-009", "xid", "gpu", "0", "145", 36.7, "faulty-gpu")
    run = m.Run("replay-00026", ("b200-009",), 45.9, 50.9, "COMPLETED")
    r = m.measure(m.Observed("a", 2000.0, 100.0, [(fault, True)], drains, returns, [run]))
    assert r["jobs"]["started_on_faulty_node"] == 0 and r["repair"]["returned_by_ladder"] == 1


def test_a_flapping_link_goes_on_flapping_until_its_repair(monkeypatch):
    """A `flap` fault with a repair time is a link that keeps flapping (the stand-in's `--every`,
    once a site hour at the run's compression, at least once a replay second) until its repair
    clears it: the 32-node run's flap wrote its lines once, and the ladder's reboot returned the
    node between flaps."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(REPO))
    from bench import fleet_replay

    calls = []
    monkeypatch.setattr(fleet_replay, "slurmadm", lambda env, *a, **k: calls.append(a) or SimpleNamespace(
        returncode=0, stdout="", stderr=""))
    run = fleet_replay.Run.__new__(fleet_replay.Run)
    run.dc, run.env, run.errors = SimpleNamespace(state_dir="/s"), {}, []
    run.args = SimpleNamespace(compression=720.0)
    run._fault(schedule.Fault(5.0, "n1", "flap", "ib", "mlx5_0", "", 40.0, "network"), clear=False)
    run._fault(schedule.Fault(5.0, "n1", "flap", "ib", "mlx5_0", "", 40.0, "network"), clear=True)
    run._fault(schedule.Fault(5.0, "n2", "flap", "ib", "mlx5_1", "", 0.0, "network"), clear=False)
    run.args.compression = 20000.0
    run._fault(schedule.Fault(5.0, "n3", "flap", "ib", "mlx5_2", "", 9.0, "network"), clear=False)
    assert calls == [
        ("dev-cluster", "ib-fault", "n1", "--hca", "mlx5_0", "--state-dir", "/s", "--kind", "flap", "--every", "5"),
        ("dev-cluster", "ib-fault", "n1", "--hca", "mlx5_0", "--state-dir", "/s", "--clear"),
        ("dev-cluster", "ib-fault", "n2", "--hca", "mlx5_1", "--state-dir", "/s", "--kind", "flap"),
        ("dev-cluster", "ib-fault", "n3", "--hca", "mlx5_2", "--state-dir", "/s", "--kind", "flap", "--every", "1"),
    ] and run.errors == []
