"""Failed job runs attributed (slurmadm/jobs/failures.py): the join in Meta's window."""

from __future__ import annotations

import json

import pytest

from slurmadm.jobs import failures as f
from slurmadm.slurm.sacct import JobRun, Step
from slurmadm.store import Store

pytestmark = pytest.mark.unit

END = 1_800_000_000.0


def run(job="42", state="FAILED", nodes="b200-017", exit_code=1, gpus=8, start=END - 7200, end=END, **kw):
    return JobRun(job_id=job, name="train", user=kw.pop("user", "alice"), account=kw.pop("account", "ml"),
                  partition="gpu", qos="normal", state=state, cancelled_by=kw.pop("by", ""), exit_code=exit_code,
                  signal=0, derived_exit=0, reason="None", submit=start, start=start, end=end,
                  elapsed_s=(end - start), nodes=nodes, gpus=gpus, steps=kw.pop("steps", []), **kw)


def result(store, node, ts, check="xid", status="pass", detail=""):
    store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                     " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (ts, "r", node, "periodic", check, status, "drain", detail, None, 1.0))
    store.db.commit()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as s:
        for node in ("b200-017", "b200-018"):
            for t in range(int(END - 10800), int(END + 600), 1800):  # watched: a health run every 30 min
                result(s, node, t)
        yield s


def one(store, r, **kw):
    out = f.attribute_all(store, [r], **kw)
    assert len(out) == 1
    return out[0]


def test_a_gpu_fault_in_the_window_is_infrastructure_with_gpu_and_xid(store):
    result(store, "b200-017", END - 120, status="fail",
           detail="GPU3 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)")
    a = one(store, run())
    assert a.verdict == "infrastructure" and a.line == "infrastructure: b200-017 GPU3 Xid 79"
    assert a.to_json()["gpu_hours"] == pytest.approx(16.0)


def test_the_incident_is_named(store):
    store.db.execute("INSERT INTO incidents (id, node, part_kind, part_key, slot, class, state, opened_ts, updated_ts,"
                     " evidence) VALUES ('42','b200-017','gpu','SER1','3','RESTART_BM','open',?,?,?)",
                     (END + 60, END + 60, json.dumps([{"xid": 79, "line": "GPU3 XID 79"}])))
    result(store, "b200-017", END + 30, status="fail", detail="GPU3 XID 79 x2 FALLEN_OFF_THE_BUS (RESTART_BM)")
    a = one(store, run())
    assert a.line == "infrastructure: b200-017 GPU3 Xid 79 (incident 42)"


def test_exit_1_without_a_node_signal_is_the_users(store):
    a = one(store, run())
    assert a.line == "user: exit 1, no node signal"


def test_application_class_xids_are_the_users(store):
    for x in (13, 31, 43):
        result(store, "b200-017", END - 60, status="warn", detail=f"GPU1 XID {x} SOMETHING (RESTART_APP)")
    assert one(store, run()).verdict == "user"


def test_a_signal_outside_metas_window_does_not_count(store):
    result(store, "b200-017", END - 1200, status="fail", detail="GPU3 XID 79 FALLEN (RESTART_BM)")
    result(store, "b200-017", END + 400, check="ecc-uncorrected", status="fail", detail="GPU2 uncorrected 3")
    assert one(store, run()).verdict == "user"
    result(store, "b200-017", END + 299, check="ecc-uncorrected", status="fail", detail="GPU2 uncorrected 3")
    assert one(store, run()).line == "infrastructure: b200-017 ecc-uncorrected: GPU2 uncorrected 3"


def test_a_signal_from_before_a_short_run_began_does_not_count(store):
    """Meta's window is the last 10 minutes of the run's lifetime: a 20-second run that started
    after a fault was found (and cleared) is not blamed for it; the prolog's finding at the run's
    start still counts."""
    short = run(start=END - 20)
    result(store, "b200-017", END - 300, check="ecc-uncorrected", status="fail", detail="GPU1 uncorrected 1")
    assert one(store, short).line == "user: exit 1, no node signal"
    # a drain and its resume seconds before the run began (the node ran this job: it was resumed)
    store.audit("node.drain", "b200-017", "slurmadm: infiniband: mlx5_3 link flapped 2 times in 6 h")
    store.db.execute("UPDATE events SET ts=? WHERE target='b200-017'", (END - 23,))
    store.db.commit()
    assert one(store, short).line == "user: exit 1, no node signal"
    result(store, "b200-017", END - 20, check="ecc-uncorrected", status="fail", detail="GPU1 uncorrected 1")
    assert one(store, short).line == "infrastructure: b200-017 ecc-uncorrected: GPU1 uncorrected 1"


def test_a_node_the_store_never_saw_is_unknown_never_a_guess(store):
    a = one(store, run(nodes="b200-099"))
    assert a.verdict == "unknown" and "b200-099" in a.why
    assert one(store, run(nodes="b200-[017,099]")).verdict == "unknown"


def test_out_of_memory_is_the_users(store):
    r = run(state="FAILED", exit_code=0, steps=[Step("0", "python", "OUT_OF_MEMORY", 0, 125, "b200-017")])
    assert one(store, r).line == "user: out of memory (step 0), no node signal"
    assert one(store, run(state="OUT_OF_MEMORY", exit_code=0)).line == "user: out of memory, no node signal"


def test_node_fail_drains_and_system_cancels(store):
    assert one(store, run(state="NODE_FAIL", exit_code=0)).line == \
        "infrastructure: b200-017 NODE_FAIL (Slurm), no slurmadm signal"
    store.audit("node.drain", "b200-018", "slurmadm: infiniband: mlx5_0:1 link_downed rose by 3 (> 1)")
    store.db.execute("UPDATE events SET ts=? WHERE target='b200-018'", (END - 30,))
    store.db.commit()
    a = one(store, run(state="CANCELLED", by="0", nodes="b200-[017-018]", exit_code=0))
    assert a.verdict == "infrastructure" and a.why.startswith("b200-018 drained: slurmadm: infiniband")
    assert f.attribute_all(store, [run(state="CANCELLED", by="1234")]) == []  # a user's own cancel
    assert f.attribute_all(store, [run(state="COMPLETED", exit_code=0)]) == []
    assert one(store, run(state="REQUEUED", exit_code=0)).verdict == "unknown"


def test_another_jobs_gpu_on_a_shared_node_is_not_blamed(store):
    from slurmadm.health.record import Recorder
    from slurmadm.jobmap import held

    # what the prolog keeps (health/hook.py -> engine.execute): the job's GPUs on this node, in
    # the run's one record
    job = held({"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "0,1"})
    assert job == ("42", [0, 1])
    assert held({"SLURM_JOB_ID": "x; drop"}) is None
    rec = Recorder(node="b200-017", context="prolog", run_id="r1", results_log="", store=store, use_syslog=False)
    rec.job_gpus(*job)
    assert rec.commit()
    result(store, "b200-017", END - 60, status="fail", detail="GPU5 XID 79 FALLEN (RESTART_BM)")
    a = one(store, run(gpus=2))
    assert a.verdict == "user" and a.held_gpus == {"b200-017": [0, 1]}
    result(store, "b200-017", END - 50, status="fail", detail="GPU1 XID 48 DBE (RESET_GPU)")
    assert one(store, run(gpus=2)).line == "infrastructure: b200-017 GPU1 Xid 48"


def test_lost_gpu_hours_per_project(store):
    result(store, "b200-017", END - 60, status="fail", detail="GPU3 XID 79 FALLEN (RESTART_BM)")
    out = f.attribute_all(store, [run(), run(job="43", account="bio", nodes="b200-018")])
    assert f.lost_by_account(out) == {"ml": pytest.approx(16.0)}
    assert f.summary(out) == {"infrastructure": {"runs": 1, "gpu_hours": 16.0}, "user": {"runs": 1, "gpu_hours": 16.0}}


def test_control_bytes_from_the_kernel_log_never_reach_the_verdict(store):
    result(store, "b200-017", END - 60, check="ecc-uncorrected", status="fail", detail="GPU2 bad\x00\x1b[31m line")
    a = one(store, run())
    assert a.line == "infrastructure: b200-017 ecc-uncorrected: GPU2 bad??[31m line"
