"""Issue 36 on the dev cluster: failed job runs get the right verdict, and the GPU-hours add up
against Slurm's own `sreport`.

- a stand-in training job on b200-001 dies when one of its GPUs faults (XID 79 on GPU3, as a real
  job dies on an NCCL timeout): `infrastructure: b200-001 GPU3 Xid 79`;
- a node killed under a requeueable job (slurmctld marks it DOWN: the run ends NODE_FAIL and the
  job is requeued): `infrastructure: b200-002 NODE_FAIL (Slurm), ...`, the requeued run apart;
- a user's job that exits 1 on a healthy node: `user: exit 1, no node signal`.
An OOM-killed step is not made here: the session's dev cluster runs task/none (no memory limit on
a step); tests/integration/test_job_oom.py brings up one that enforces memory (`--enforce-memory`,
task/cgroup) and kills a step over its --mem.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from slurmadm.devcluster import gpus
from tests.integration.helpers import run_slurmadm, sh, wait_until

pytestmark = pytest.mark.integration

TRAIN = Path(__file__).resolve().with_name("standin_train.py")


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = dict(os.environ)
    e.update(dev_cluster.env())
    e["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    kmsg = {n: gpus.kmsg_path(dev_cluster.p("gpus"), n) for n in dev_cluster.nodes()}
    sizes = {n: p.stat().st_size if p.exists() else 0 for n, p in kmsg.items()}
    _forget_earlier_findings(dev_cluster)
    yield e
    sh(e, "scancel", "--full", "-u", "root", check=False)
    for n in dev_cluster.nodes():
        run_slurmadm(e, "dev-cluster", "gpu-fault", n, "--clear")
        p = kmsg[n]
        # roll the kernel log back, only where it grew (a node's boot empties it: never pad it)
        if p.exists() and p.stat().st_size > sizes[n]:
            with open(p, "r+b") as fh:
                fh.truncate(sizes[n])
        sh(e, "scontrol", "update", f"nodename={n}", "state=resume", check=False)


def _forget_earlier_findings(dev_cluster) -> None:
    """What earlier modules found and cleared on these nodes (a failing check minutes ago) is not
    this module's: the verdicts below are about the signals this module makes. Test clean-up of
    the shared dev cluster's stores, as `dev-cluster down --purge` would do."""
    from slurmadm.store import Store

    site = dev_cluster.site()
    paths = {site.store.path, *(site.store.local_path(n) for n in dev_cluster.nodes())}
    for path in paths:
        if Path(path).exists():
            with Store(path) as store, store.transaction() as db:
                db.execute("DELETE FROM check_results WHERE status != 'pass'")


def state_of(env, job):
    return sh(env, "sacct", "-n", "-X", "-P", "--duplicates", "-j", job, "-o", "State").split()


def failures(env, since):
    p = run_slurmadm(env, "jobs", "failures", "--since", since, "--json", timeout=180)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def test_verdicts_and_gpu_hours_against_sreport(dev_cluster, env):
    t0 = time.time()
    py = sys.executable
    train = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-e", str(dev_cluster.p("log", "train.err")),
               "-w", "b200-001", "--gres=gpu:8", "-J", "train",
               "--wrap", f"{py} {TRAIN} {dev_cluster.p('gpus')} 600").strip()
    victim = sh(env, "sbatch", "--parsable", "--requeue", "-o", "/dev/null", "-w", "b200-002", "--gres=gpu:8",
                "-J", "victim", "--wrap", "sleep 600").strip()
    user = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-003", "--gres=gpu:4", "-J", "buggy",
              "--wrap", "sleep 20; echo 'Traceback: KeyError' >&2; exit 1").strip()
    running = f"{train},{victim}"
    wait_until(lambda: set(sh(env, "squeue", "-h", "-t", "R", "-j", running, "-o", "%i").split()) == {train, victim},
               300, "train and victim running")
    time.sleep(15)  # GPU-seconds of work to count against sreport (not a sync: the assertions poll)
    p = run_slurmadm(env, "dev-cluster", "gpu-fault", "b200-001", "--gpu", "3", "--kind", "xid", "--value", "79")
    assert p.returncode == 0, p.stderr
    sh(env, "scontrol", "update", "nodename=b200-002", "state=down", "reason=test: node killed under a job")
    wait_until(lambda: "FAILED" in state_of(env, train), 120, "the training job to die with its GPU")
    wait_until(lambda: "NODE_FAIL" in state_of(env, victim), 120, "the victim's run to end NODE_FAIL")
    wait_until(lambda: "FAILED" in state_of(env, user), 120, "the buggy job to fail")

    def verdicts():
        got = {f["job_id"]: f for f in failures(env, "1h")["failures"]}
        t = got.get(train)
        return got if t and t["verdict"] == "infrastructure" and victim in got and user in got else None

    got = wait_until(verdicts, 180, "the training job's infrastructure verdict (health sees the XID)", interval=3)
    assert got[train]["line"].startswith("infrastructure: b200-001 GPU3 Xid 79"), got[train]
    assert got[victim]["state"] == "NODE_FAIL" and got[victim]["verdict"] == "infrastructure", got[victim]
    assert got[victim]["line"].startswith("infrastructure: b200-002"), got[victim]
    assert got[user]["line"] == "user: exit 1, no node signal", got[user]
    assert got[train]["gpus"] == 8 and got[user]["gpus"] == 4
    # the prolog kept which GPUs each job held (store v7 job_gpus): the blame is on the job's own GPU
    assert got[train]["held_gpus"] == {"b200-001": list(range(8))}, got[train]
    assert got[user]["held_gpus"] == {"b200-003": [0, 1, 2, 3]}, got[user]
    for j in (train, victim, user):
        print(f"job {j} {got[j]['state']}: {got[j]['line']} ({got[j]['gpu_hours']} GPU-h)")

    # the GPU-hours add up against Slurm's own report of the same jobs (every run, in GPU-seconds),
    # once every run has ended (a running run's time grows between the two reads)
    sh(env, "scancel", train, victim, user, check=False)
    wait_until(lambda: not sh(env, "squeue", "-h", "-j", f"{train},{victim},{user}", check=False).strip(), 120,
               "the test's jobs to leave the queue")
    data = failures(env, "1h")
    # sreport's job reports take whole hours: a start inside an hour reads as the next one
    start = time.strftime("%Y-%m-%dT%H:00:00", time.localtime(t0))
    # every job of the dev cluster since then (sreport's jobs= list left some out when tried)
    out = sh(env, "sreport", "-n", "-P", "-t", "Seconds", "--tres=gres/gpu", "job", "SizesByAccount",
             f"start={start}", "end=now", "grouping=100000")
    sreport_s = sum(int(line.split("|")[2]) + int(line.split("|")[3]) for line in out.splitlines() if line.strip())
    p = run_slurmadm(env, "jobs", "failures", "--since", start, "--json", timeout=180)
    assert p.returncode in (0, 1), p.stderr
    every = json.loads(p.stdout)
    ours = every["gpu_hours"] * 3600
    # each run's start and end are whole seconds in both: up to 2 s x its GPUs apart
    slack = max(2 * 8 * every["runs"], 16)
    print(f"GPU-seconds since {start}: slurmadm {ours:.0f} over {every['runs']} runs, sreport {sreport_s}")
    assert sreport_s > 0 and abs(ours - sreport_s) <= slack, (ours, sreport_s, out)
    mine = {f["job_id"]: f["gpu_hours"] * 3600 for f in data["failures"]}
    assert mine[train] >= 8 * 10 and mine[user] >= 4 * 15, mine  # the time they ran, at 8 and 4 GPUs
    lost = data["summary"]["infrastructure"]["gpu_hours"]
    assert lost == pytest.approx(sum(f["gpu_hours"] for f in data["failures"] if f["verdict"] == "infrastructure"),
                                 abs=0.002)
