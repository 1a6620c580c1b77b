"""srun command lines and reservation parsing (text forms that read the same in 22.05 and 24.11)."""

from __future__ import annotations

import pytest

from slurmadm.slurm.jobs import JobRequest, parse_reservation

pytestmark = pytest.mark.unit


def test_srun_takes_whole_nodes_in_the_burnin_qos_and_reservation():
    req = JobRequest(name="slurmadm-burnin.x.b200-001", nodes=["b200-002", "b200-001"], argv=["python", "-m", "m"],
                     time_limit="02:00:00", partition="gpu", qos="burnin", account="ops-burnin",
                     reservation="slurmadm_burnin", tasks_per_node=8, gpus_per_node=8)
    assert req.srun_argv() == [
        "srun", "--job-name=slurmadm-burnin.x.b200-001", "--nodes=2", "--nodelist=b200-[001-002]",
        "--ntasks-per-node=8", "--time=02:00:00", "--exclusive", "--mem=0", "--kill-on-bad-exit=1",
        "--gres=gpu:8", "--partition=gpu", "--qos=burnin", "--account=ops-burnin", "--reservation=slurmadm_burnin",
        "python", "-m", "m"]
    bare = JobRequest(name="j", nodes=["n1"], argv=["true"], time_limit="10").srun_argv()
    assert not any(a.startswith(("--gres", "--reservation", "--qos")) for a in bare)


LINE_2205 = ("ReservationName=slurmadm_burnin StartTime=2026-11-29T18:10:54 EndTime=2027-11-29T18:10:54 "
             "Duration=365-00:00:00 Nodes=b200-[003-004] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) "
             "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) "
             "Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)")


def test_reservation_line():
    other = LINE_2205.replace("slurmadm_burnin", "admin_maint")
    res = parse_reservation(other + "\n" + LINE_2205 + "\n", "slurmadm_burnin")
    assert res.nodes == "b200-[003-004]" and res.users == "root" and res.state == "ACTIVE"
    assert {"MAINT", "IGNORE_JOBS"} <= res.flags
    assert parse_reservation(other, "slurmadm_burnin") is None
    assert parse_reservation("No reservations in the system", "slurmadm_burnin") is None
