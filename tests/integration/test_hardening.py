"""Issue 15 on the real dev cluster: an ordinary reservation does not switch health enforcement
off, DOWN nodes are left alone, a missing tool drains nothing, any user reaches munge, a burn-in
that cannot test says so before reserving anything, prune removes a user of two projects.

Slurm's own periodic health runs go on meanwhile; assertions are about outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib

import pytest
import tomli_w

from slurmadm.devcluster.daemons import wait_for
from slurmadm.slurm.cli_backend import CliBackend
from slurmadm.store import Store
from tests.integration.helpers import delete_reservation, run_slurmadm, sh

pytestmark = pytest.mark.integration


def node(env, name):
    return CliBackend(env={"SLURM_CONF": env["SLURM_CONF"]}).nodes([name])[0]


def fault(env, name, *args):
    p = run_slurmadm(env, "dev-cluster", "gpu-fault", name, *args)
    assert p.returncode == 0, p.stderr


def hook(dc, script, name):
    """A hook script exactly as slurmd runs it (no PATH; no SLURM_CONF for HealthCheckProgram)."""
    env = {"SLURMD_NODENAME": name}
    if script != "healthcheck.sh":
        env["SLURM_CONF"] = str(dc.slurm_conf)
    return subprocess.run([f"{dc.site().slurm.prolog_dir}/{script}"], env=env, capture_output=True, text=True,
                          timeout=120, cwd="/")


def periodic_results_since(dc, ts, name):
    with Store(dc.site().store.path) as store:
        return store.db.execute("SELECT 1 FROM check_results WHERE ts >= ? AND node = ? AND context = 'periodic'",
                                (ts, name)).fetchall()


def restore(dc, env, name):
    fault(env, name, "--clear")
    info = node(env, name)
    if info.drained or info.state == "DOWN":
        sh(env, "scontrol", "update", f"nodename={name}", "state=resume", check=False)
    assert wait_for(lambda: not node(env, name).drained and node(env, name).state != "DOWN", 60, interval=0.5)


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = dict(os.environ)
    e.update(dev_cluster.env())
    return e


def test_a_user_reservations_faulty_node_is_drained_and_its_job_never_runs(dev_cluster, env, tmp_path):
    name = "b200-002"
    marker = tmp_path / "ran"
    os.chmod(tmp_path, 0o755)
    sh(env, "scontrol", "create", "reservation", "ReservationName=hard-user", "Users=root", f"Nodes={name}",
       "StartTime=now", "Duration=30")
    job = ""
    try:
        # slurmctld has flagged the node RESERVED: the case that turned enforcement off
        assert wait_for(lambda: "RESERVED" in node(env, name).flags, 90, interval=0.5)
        t0 = time.time()  # start right after one of Slurm's own periodic runs, so the prolog goes first
        assert wait_for(lambda: periodic_results_since(dev_cluster, t0, name), 90, interval=0.2)
        fault(env, name, "--gpu", "3", "--kind", "ecc-uncorrected")
        job = sh(env, "sbatch", "--parsable", "--reservation=hard-user", "-w", name, "--gres=gpu:8", "-o", "/dev/null",
                 "--wrap", f"touch {marker}").strip()
        assert wait_for(lambda: node(env, name).drained, 90, interval=0.5)
        info = node(env, name)
        assert info.reason.startswith("slurmadm: ecc-uncorrected: GPU3"), info.reason
        # the job is refused (requeued) or was never started there: its payload never ran
        assert not marker.exists()
        state = sh(env, "scontrol", "show", "job", job)
        assert "JobState=COMPLETED" not in state
    finally:
        if job:
            sh(env, "scancel", job, check=False)
        delete_reservation(env, "hard-user")
        restore(dev_cluster, env, name)


def test_a_down_node_is_never_drained_re_reasoned_or_resumed(dev_cluster, env):
    """An admin's DOWN node with a GPU fault keeps its state and reason. Its slurmd is stopped
    first: with ReturnToService=2 a DOWN node whose slurmd registers again returns to service by
    itself (seen here within ~30 s), which is not the case under test."""
    name = "b200-003"
    assert dev_cluster.daemon(f"slurmd-{name}").stop()
    sh(env, "scontrol", "update", f"nodename={name}", "state=down", "reason=admin down")
    try:
        assert node(env, name).state == "DOWN"
        fault(env, name, "--gpu", "1", "--kind", "ecc-uncorrected")
        p = hook(dev_cluster, "healthcheck.sh", name)
        assert p.returncode == 0, p.stderr
        assert "DOWN" in p.stderr  # the alert says why nothing was done
        info = node(env, name)
        assert (info.state, info.reason, info.drained) == ("DOWN", "admin down", False), info
        fault(env, name, "--clear")
        for _ in range(dev_cluster.site().health.resume_after_clean_runs + 1):
            assert hook(dev_cluster, "healthcheck.sh", name).returncode == 0
        info = node(env, name)
        assert (info.state, info.reason) == ("DOWN", "admin down"), info
    finally:
        dev_cluster._slurmds([name], lambda msg: None)
        restore(dev_cluster, env, name)


def test_health_run_on_a_healthy_node_drains_nothing_for_a_missing_tool(dev_cluster, env):
    """The dev cluster has no all_reduce_perf and no CUDA torch: nccl-allreduce cannot run. That
    is the site's configuration, reported, not the node's fault."""
    # a node no earlier module left drained (the shared dev cluster's nodes carry their history)
    name = next(n for n in reversed(dev_cluster.nodes()) if not node(env, n).drained)
    p = run_slurmadm(env, "health", "run", "--node", name, "--json", timeout=300)
    assert "Traceback" not in p.stderr
    report = json.loads(p.stdout)
    nccl = next(r for r in report["results"] if r["check_id"] == "nccl-allreduce")
    assert (nccl["status"], nccl["action"]) == ("error", "warn") and "not installed" in nccl["detail"], nccl
    assert report["plan"]["action"] == "none", report["plan"]
    assert not node(env, name).drained


def test_any_user_reaches_munge_and_no_user_reads_its_key(dev_cluster, env):
    sock = dev_cluster.site().slurm.munge_socket
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    p = subprocess.run([*nobody, "munge", "-n", "-S", sock], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    key = dev_cluster.p("munge", "munge.key")
    p = subprocess.run([*nobody, "cat", str(key)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and not p.stdout


def test_burnin_that_cannot_test_fails_before_reserving(dev_cluster, env, tmp_path):
    data = tomllib.loads(dev_cluster.site_path.read_text())
    data["burnin"].update(account="hard-nosuch", qos="hard-nosuch")
    data["qos"].append({"name": "hard-nosuch"})
    org = data["projects"][0]["organization"]
    data["projects"].append({"name": "hard-nosuch", "organization": org, "members": ["root"],
                             "qos": ["hard-nosuch"], "default_qos": "hard-nosuch"})
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(data))
    reservation = data["burnin"].get("reservation") or "slurmadm-burnin"
    p = run_slurmadm(env, "burnin", "run", "--nodes", "b200-001", "--site", str(site), timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("slurmadm: error:")]
    assert len(lines) == 1 and "slurmadm accounts apply" in lines[0] and "hard-nosuch" in lines[0], p.stderr
    assert reservation not in sh(env, "scontrol", "show", "reservation", check=False)


def test_prune_removes_a_user_of_two_projects(dev_cluster, env, tmp_path):
    base = tomllib.loads(dev_cluster.site_path.read_text())
    members = {p["name"]: p["members"] for p in base["projects"]}
    user = next(u["name"] for u in base.get("users", []) if u.get("projects"))
    assert sum(user in m for m in members.values()) + len(next(u for u in base["users"] if u["name"] == user)
                                                           .get("projects", [])) >= 2
    r = run_slurmadm(env, "accounts", "apply", "--site", str(dev_cluster.site_path), timeout=300)
    assert r.returncode == 0, r.stderr

    def mine():
        out = sh(env, "sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", "format=account")
        return sorted(set(out.split()))

    assert len(mine()) >= 2
    edited = dict(base)
    edited["users"] = [u for u in base["users"] if u["name"] != user]
    edited["projects"] = [{**p, "members": [m for m in p["members"] if m != user],
                           "coordinators": [c for c in p.get("coordinators", []) if c != user]}
                          for p in base["projects"]]
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(edited))
    try:
        r = run_slurmadm(env, "accounts", "apply", "--prune", "--site", str(site), "--reason", "hard prune", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert mine() == []
        with Store(dev_cluster.site().store.path) as store:
            gone = [e for e in store.events(action="accounts.delete-user") if e.reason == "hard prune"]
        # append-only audit (issue 24): each intent ("started") is followed by a "done" event
        started = {e.id for e in gone if e.detail["status"] == "started"}
        assert started and started == {e.detail.get("follows") for e in gone if e.detail["status"] == "done"}
    finally:
        r = run_slurmadm(env, "accounts", "apply", "--site", str(dev_cluster.site_path), timeout=300)
        assert r.returncode == 0, r.stderr
