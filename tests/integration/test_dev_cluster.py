"""Issue 2's definition of done, against real munge/MariaDB/slurmdbd/slurmctld/slurmd."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurmadm.devcluster.cluster import DevCluster

from tests.integration.conftest import TEST_PORT_BASE
from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration


def sh(env, *argv, timeout=30):
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=True).stdout


def test_four_idle_b200_nodes_with_gpus(cluster_env):
    out = sh(cluster_env, "sinfo", "-N", "-h", "-o", "%N|%T|%G")
    rows = {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}
    assert sorted(rows) == ["b200-001", "b200-002", "b200-003", "b200-004"]
    # "gpu:b200:8(S:0)": gres.conf's Cores= binds the GPUs to a socket. "planned" is IDLE with
    # slurm.h's NODE_STATE_PLANNED: the backfill scheduler holds the idle node for a pending job
    # (an earlier module's, on this shared cluster)
    assert all(state in ("idle", "planned") and gres.split("(")[0] == "gpu:b200:8"
               for state, gres in rows.values()), (rows, sh(cluster_env, "squeue", "-h", "-o", "%i %u %T %j %R"))


def test_accounting_knows_the_cluster(cluster_env, dev_cluster):
    out = sh(cluster_env, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
    assert dev_cluster.site().cluster.name in out.split()


def test_a_gpu_job_sees_gpus_like_on_a_real_node(cluster_env, dev_cluster, tmp_path):
    out_file = tmp_path / "job.out"
    sh(cluster_env, "sbatch", "--wait", "--gres=gpu:8", "-o", str(out_file), "--wrap",
       "echo CVD=$CUDA_VISIBLE_DEVICES; echo JG=$SLURM_JOB_GPUS", timeout=120)
    text = out_file.read_text()
    assert "CVD=0,1,2,3,4,5,6,7" in text and "JG=0,1,2,3,4,5,6,7" in text
    # accounting tracked the GPUs of that job
    jobs = sh(cluster_env, "sacct", "-n", "-P", "-X", "--format=JobID,AllocTRES")
    assert any("gres/gpu=8" in line for line in jobs.splitlines()), jobs


def test_status_env_and_idempotent_up(cluster_env, dev_cluster):
    st = run_slurmadm(cluster_env, "dev-cluster", "status", "--state-dir", str(dev_cluster.state_dir), "--json")
    assert st.returncode == 0, st.stderr
    data = json.loads(st.stdout)
    # munged, mariadbd, slurmdbd, slurmctld, 4 slurmd; the session cluster also runs --ssh (4 sshd)
    # and --bmc (one emulator process)
    names = {d["name"] for d in data["daemons"]}
    assert all(d["alive"] for d in data["daemons"])
    assert names >= {"munged", "mariadbd", "slurmdbd", "slurmctld"} | {f"slurmd-b200-00{i}" for i in range(1, 5)}
    assert {n for n in names if n.startswith("sshd-")} == {f"sshd-b200-00{i}" for i in range(1, 5)}
    assert len(names) == 13
    pids = {d["name"]: d["pid"] for d in data["daemons"]}
    env = run_slurmadm(cluster_env, "dev-cluster", "env", "--state-dir", str(dev_cluster.state_dir))
    assert f"export SLURM_CONF={dev_cluster.slurm_conf}" in env.stdout
    again = run_slurmadm(cluster_env, "dev-cluster", "up", "--nodes", "4", "--state-dir",
                         str(dev_cluster.state_dir), "--json", timeout=200)
    assert again.returncode == 0, again.stderr
    assert {d["name"]: d["pid"] for d in json.loads(again.stdout)["daemons"]} == pids  # nothing restarted


def _our_processes(state_dir: Path) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(state_dir) in cmd or f"SLURM_CONF={state_dir}/etc/slurm.conf".encode() in env.split(b"\0"):
            out.append(f"{proc.name}: {cmd[:80]}")
    return out


def test_second_cluster_comes_up_and_down_leaving_nothing(tmp_path, dev_cluster):
    """A second, separate dev cluster (other ports) beside the session one; down leaves no process.
    A dev cluster spans base..base+703, so the second one starts clear of the session's span and of
    the other test ranges (base+720..739, +1000..1727, +2000..2703)."""
    dc = DevCluster(tmp_path / "dc")
    dc.up(nodes=2, port_base=TEST_PORT_BASE + 3000, timeout=120)
    try:
        env = {"SLURM_CONF": str(dc.slurm_conf), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
        sh(env, "sbatch", "-o", "/dev/null", "--wrap", "sleep 300")  # a running job must not survive down
        assert _our_processes(dc.state_dir)
    finally:
        stopped = dc.down()
    assert "slurmctld" in stopped and "munged" in stopped and "mariadbd" in stopped
    assert _our_processes(dc.state_dir) == []
    # the session cluster is untouched
    assert dev_cluster.daemon("slurmctld").alive()


def test_a_bring_up_failing_midway_leaves_nothing_running(tmp_path, monkeypatch):
    """A fresh `up` whose slurmctld dies (here: made to) after munged and MariaDB started stops
    them again, keeping the state and its logs, and says why."""
    from slurmadm.errors import UnreachableError

    dc = DevCluster(tmp_path / "dc")
    running_before = []

    def dies(progress):
        running_before.extend(d.name for d in dc.daemons() if d.alive())
        raise UnreachableError("slurmctld died: (injected by the test)")
    monkeypatch.setattr(dc, "_slurmctld", dies)
    with pytest.raises(UnreachableError, match="injected"):
        dc.up(nodes=2, port_base=TEST_PORT_BASE + 3000, timeout=120)
    assert {"munged", "mariadbd", "slurmdbd"} <= set(running_before), running_before
    assert not any(d.alive() for d in dc.daemons())
    assert _our_processes(dc.state_dir) == []
    assert (dc.state_dir / "etc" / "slurm.conf").exists()


def test_up_refuses_bad_arguments(cluster_env, tmp_path):
    bad = run_slurmadm(cluster_env, "dev-cluster", "up", "--nodes", "0", "--state-dir", str(tmp_path))
    assert bad.returncode == 2 and "--nodes" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_slurmadm(cluster_env, "dev-cluster", "up", "--nodes", "200", "--state-dir", str(tmp_path / "x"))
    assert bad.returncode == 2 and "more than the site's 128 nodes" in bad.stderr
    env = run_slurmadm(cluster_env, "dev-cluster", "env", "--state-dir", str(tmp_path / "nothing"))
    assert env.returncode == 2 and "no dev cluster" in env.stderr


def test_foreground_mode_comes_down_on_sigterm(tmp_path, cluster_env):
    """What docker-compose.slurm.yml runs: `up --foreground` until SIGTERM, then a clean down."""
    import signal
    import sys

    from slurmadm.devcluster.daemons import wait_for

    state = tmp_path / "fg"
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", "dev-cluster", "up", "--nodes", "2",
                             "--state-dir", str(state), "--port-base", str(TEST_PORT_BASE + 3800), "--foreground"],
                            env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dc = DevCluster(state)
    try:
        assert wait_for(lambda: proc.poll() is None and dc.record() is not None
                        and all(d.alive() for d in dc.daemons())
                        and set(dc.node_states().values()) == {"idle"}, 120, interval=0.5), \
            (proc.poll(), proc.poll() is not None and proc.stderr.read())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        dc.down()
    assert _our_processes(state) == []
