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
    assert [f for f in read[0] if f.cls != "sdc"] == read[1]
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
