"""Monitoring end to end on the real dev cluster: Debian's Prometheus scrapes the node exporters
of the 4 fake nodes (stand-in GPUs through the real pynvml) and the head exporter, evaluates the
generated rules, and sends alerts through Debian's Alertmanager to the webhook, which isolates the
node in Slurm; clearing the fault resolves the alert and the node is resumed. A job holding 8
stand-in GPUs at 0 % is reported by `slurmadm jobs idle` and fires GpuJobIdle. `slurmadm top` runs
in tmux and is read back with capture-pane. Every wait polls with a deadline."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.monitor import dashboard
from slurmadm.monitor.stack import http_get
from slurmadm.store import Store
from tests.integration.helpers import accounting_env, monitor_stack, prom, run_slurmadm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(dev_cluster):
    yield from monitor_stack(dev_cluster)


@pytest.fixture(scope="module")
def env(dev_cluster):
    return accounting_env(dev_cluster)


def sh(env, *argv, timeout=30, check=True) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check).stdout


def node_state(env, name) -> tuple[str, str]:
    out = sh(env, "sinfo", "-h", "-N", "-n", name, "-o", "%T|%E").strip().splitlines()[0]
    state, _, reason = out.partition("|")
    return state, reason


def test_prometheus_scrapes_every_exporter(stack, dev_cluster):
    site = dev_cluster.site()

    def all_up() -> bool:
        nodes = prom(stack, f'up{{job="{site.monitor.node_job}"}} == 1')
        head = prom(stack, f'up{{job="{site.monitor.head_job}"}} == 1')
        return len(nodes) == len(dev_cluster.nodes()) and len(head) == 1
    assert wait_for(all_up, 60, interval=0.5)
    gpus = prom(stack, "sum(slurmadm_gpus)")
    assert float(gpus[0]["value"][1]) == 8 * len(dev_cluster.nodes())
    from slurmadm.exporter.slurmseries import replaced

    if any(r.series == "slurmadm_nodes" for r in replaced(stack.release(site))):  # Slurm 25.11+ counts them
        assert wait_for(lambda: prom(stack, 'slurm_partition_nodes{partition="gpu"}'), 60, interval=0.5)
        assert not prom(stack, "slurmadm_nodes")
    else:
        assert prom(stack, 'slurmadm_nodes{partition="gpu"}')


def test_promtool_check_metrics_is_clean_on_every_live_exporter_and_no_label_is_renamed(stack, dev_cluster):
    """Each running exporter's /metrics through `promtool check metrics`; Prometheus stored no
    `exported_node` (the node job honours the exporter's own `node` label)."""
    urls = stack.urls()
    for key in ["head_exporter", *[f"exporter_{n}" for n in dev_cluster.nodes()]]:
        code, body = http_get(urls[key], timeout=30)
        assert code == 200, key
        assert b"slurmadm_build_info{" in body and b"process_cpu_seconds_total" in body, key
        p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
        assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), (key, p.stdout + p.stderr)
    assert prom(stack, 'count(slurmadm_gpus{node!=""})')
    assert not prom(stack, 'count({exported_node!=""})')


def test_a_down_node_inhibits_its_gpu_alerts_in_the_running_alertmanager(stack, dev_cluster):
    """Debian's Alertmanager with the generated inhibit rules: SlurmNodeDown on a node marks that
    node's GPU alert inhibited, not another node's. (A node name no Slurm node has: the webhook
    acts on neither alert.)"""
    from datetime import datetime, timedelta, timezone

    from slurmadm.monitor.stack import http_post

    cluster = dev_cluster.site().cluster.name
    end = (datetime.now(timezone.utc) + timedelta(minutes=3)).isoformat()
    alerts = [{"labels": {"alertname": "SlurmNodeDown", "node": "probe-1", "cluster": cluster,
                          "severity": "critical"}, "endsAt": end},
              *[{"labels": {"alertname": "GpuXidSeen", "node": n, "gpu": "0", "cluster": cluster,
                            "severity": "warning"}, "endsAt": end} for n in ("probe-1", "probe-2")]]
    am = stack.urls()["alertmanager"]
    code, body = http_post(am + "/api/v2/alerts", json.dumps(alerts).encode(), {"Content-Type": "application/json"})
    assert code == 200, body

    def inhibited() -> dict:
        _c, got = http_get(am + "/api/v2/alerts?filter=alertname%3D%22GpuXidSeen%22")
        return {a["labels"]["node"]: bool(a["status"]["inhibitedBy"]) for a in json.loads(got or b"[]")}
    assert wait_for(lambda: inhibited() == {"probe-1": True, "probe-2": False}, 60, interval=0.5), inhibited()


def test_gpu_fault_becomes_an_alert_and_an_isolated_node_then_resumes(stack, dev_cluster, env):
    target = "b200-003"
    assert wait_for(lambda: len(prom(stack, "slurmadm_gpu_pcie_replay_total")) == 8 * len(dev_cluster.nodes()), 60)
    t0 = time.time()
    run_slurmadm(env, "dev-cluster", "gpu-fault", target, "--gpu", "2", "--kind", "pcie-replay", "--value", "1000")
    try:
        assert wait_for(lambda: node_state(env, target)[1].startswith("slurmadm: alert-GpuPcieReplayRising:"),
                        120, interval=0.5), node_state(env, target)
        state, reason = node_state(env, target)
        assert state in ("drained", "draining") and "GPU2" in reason and reason.endswith("[alert]")
        # the alert went through Alertmanager (its API lists it) to the webhook (the audit trail says so)
        code, body = http_get(stack.urls()["alertmanager"] + "/api/v2/alerts")
        assert code == 200
        assert any(a["labels"].get("alertname") == "GpuPcieReplayRising" and a["labels"].get("node") == target
                   for a in json.loads(body))
        with Store(dev_cluster.site().store.path) as store:
            drains = [e for e in store.events(since=t0, action="node.drain", target=target)]
        assert drains and drains[0].detail["alert"] == "GpuPcieReplayRising"
        # with a drained node every dashboard panel's query parses and returns series
        site = dev_cluster.site()

        def no_job_time_today() -> bool:
            # ETTR is a ratio of job time: on a day no GPU job has run yet (this module run alone on
            # a fresh cluster) there is none, and its panel rightly shows no data
            return not prom(stack, 'sum(slurmadm_gpu_time_today_seconds{kind=~"completed|lost_.*|other"}) > 0')

        def empty_panels() -> list[tuple[str, str]]:
            return [(t, expr) for t, expr in dashboard.panel_queries(site, stack.release(site))
                    if not prom(stack, expr) and not ("slurmadm_ettr_today" in expr and no_job_time_today())]
        if not wait_for(lambda: not empty_panels(), 30, interval=1):
            empty = empty_panels()
            # what the scrapes saw: targets down, or an exporter's source stale (and why)
            down = [(r["metric"].get("job"), r["metric"].get("instance")) for r in prom(stack, "up == 0")]
            stale = [r["metric"] for r in prom(stack, "slurmadm_exporter_source_stale == 1")]
            pytest.fail(f"dashboard panels without series: {empty}; targets down: {down}; stale sources: {stale}")
        # the head exporter answers from a read up to monitor.head_cache_s old: the drain shows within it
        assert wait_for(lambda: prom(stack, f'slurmadm_node_state{{node="{target}", owner="slurmadm"}}'),
                        site.monitor.head_cache_s + 30, interval=1), prom(stack, f'slurmadm_node_state{{node="{target}"}}')
    finally:
        run_slurmadm(env, "dev-cluster", "gpu-fault", target, "--clear")
    assert wait_for(lambda: node_state(env, target)[0] == "idle", 180, interval=0.5), node_state(env, target)
    with Store(dev_cluster.site().store.path) as store:
        assert store.events(since=t0, action="node.resume", target=target)


def test_an_admin_drain_is_not_resumed_by_a_resolved_alert(stack, dev_cluster, env):
    """An admin drains the node while the alert fires: the webhook leaves it (foreign drain)."""
    target = "b200-004"
    sh(env, "scontrol", "update", f"NodeName={target}", "State=DRAIN", "Reason=swap DIMM A3")
    try:
        run_slurmadm(env, "dev-cluster", "gpu-fault", target, "--gpu", "0", "--kind", "pcie-replay", "--value", "5")
        assert wait_for(lambda: prom(stack, f'ALERTS{{alertname="GpuPcieReplayRising", node="{target}", '
                                            'alertstate="firing"}'), 60, interval=0.5)
        run_slurmadm(env, "dev-cluster", "gpu-fault", target, "--clear")
        assert wait_for(lambda: not prom(stack, f'ALERTS{{alertname="GpuPcieReplayRising", node="{target}"}}'),
                        120, interval=0.5)
        assert node_state(env, target)[1] == "swap DIMM A3"
    finally:
        run_slurmadm(env, "dev-cluster", "gpu-fault", target, "--clear")
        sh(env, "scontrol", "update", f"NodeName={target}", "State=RESUME")


def test_infiniband_faults_on_the_stand_in_sysfs_fire_their_alerts(stack, dev_cluster, env):
    """The node exporters read the dev cluster's stand-in InfiniBand trees (health.sysfs_root):
    a port taken down fires InfinibandLinkDown, rising error counters InfinibandErrorsRising.
    (Whether the alert or the infiniband health check drains the node first is a race; either
    way the node is isolated with slurmadm's reason, and both are cleared below.)"""
    target = "b200-002"
    assert wait_for(lambda: len(prom(stack, f'slurmadm_ib_port_up{{node="{target}"}} == 1')) >= 1, 60, interval=0.5)
    try:
        run_slurmadm(env, "dev-cluster", "ib-fault", target, "--hca", "mlx5_3", "--kind", "errors")
        assert wait_for(lambda: prom(stack, f'ALERTS{{alertname="InfinibandErrorsRising", node="{target}", '
                                            'hca="mlx5_3", alertstate="firing"}'), 60, interval=0.5)
        run_slurmadm(env, "dev-cluster", "ib-fault", target, "--hca", "mlx5_3", "--kind", "down")
        assert wait_for(lambda: prom(stack, f'ALERTS{{alertname="InfinibandLinkDown", node="{target}", '
                                            'hca="mlx5_3", alertstate="firing"}'), 60, interval=0.5)
        assert wait_for(lambda: node_state(env, target)[1].startswith("slurmadm: "), 90, interval=0.5)
    finally:
        run_slurmadm(env, "dev-cluster", "ib-fault", target, "--clear")
    # resumed by whoever drained it (the webhook after the resolve, or health after clean runs)
    assert wait_for(lambda: node_state(env, target)[0] == "idle", 240, interval=1), node_state(env, target)


def test_a_job_holding_8_idle_gpus_is_reported(stack, dev_cluster, env):
    site = dev_cluster.site()
    jobmap_dir = site.monitor.job_map_dir
    job = sh(env, "sbatch", "--parsable", "-A", site.burnin.account, "-q", site.burnin.qos, "-p", "gpu",
             "--gres=gpu:8", "-w", "b200-002", "-J", "idle-gpus", "--wrap", "sleep 600").strip().split(";")[0]
    try:
        found = {}

        def reported() -> bool:
            p = run_slurmadm(env, "jobs", "idle", "--json")
            data = json.loads(p.stdout)
            jobs = {j["job_id"]: j for j in data["jobs"]}
            if job in jobs:
                found.update(jobs[job], rc=p.returncode)
                return True
            return False
        assert wait_for(reported, 120, interval=1)
        assert found["gpus"] == 8 and found["nodes"] == ["b200-002"] and found["mean_util_percent"] == 0
        assert found["idle_minutes"] >= site.monitor.idle_minutes and found["account"] == site.burnin.account
        assert found["rc"] == 1 and found["action"] == "report"
        assert wait_for(lambda: prom(stack, f'ALERTS{{alertname="GpuJobIdle", jobid="{job}", alertstate="firing"}}'),
                        60, interval=0.5)
        # GPU metrics carry the job's labels
        assert len(prom(stack, f'slurmadm_gpu_utilization_percent{{jobid="{job}", node="b200-002"}}')) == 8
    finally:
        sh(env, "scancel", job, check=False)
    # the epilog removed the job's GPU map entry
    assert wait_for(lambda: not (dev_cluster.p("run", "jobs", "b200-002", f"{job}.json")).exists()
                    if jobmap_dir.startswith(str(dev_cluster.state_dir)) else True, 60)


def test_idle_policy_mails_then_cancels_after_the_warning_period_and_spares_interactive_jobs(
        stack, dev_cluster, env, tmp_path):
    """monitor.idle_action = "cancel" on the real cluster: an idle batch job's user is mailed
    through the site's mail_command (a test mailer here), the job runs on through its warning
    period (idle_cancel_after_minutes) and is then cancelled by scancel; an interactive job (srun
    outside a batch script: Slurm reports BatchFlag=0), equally idle, is exempt. `jobs idle --act`
    runs as cron would, again and again; every wait is polled."""
    import tomllib

    import tomli_w

    site = dev_cluster.site()
    mail_log = tmp_path / "mail.log"
    mailer = tmp_path / "mailer.sh"
    mailer.write_text(f'#!/bin/sh\n{{ printf "to=%s args=%s\\n" "$3" "$*"; cat; printf "\\n.\\n"; }} >> {mail_log}\n')
    mailer.chmod(0o755)
    data = tomllib.loads(dev_cluster.site_path.read_text())
    data["monitor"].update(idle_action="cancel", idle_cancel_after_minutes=0.25, mail_command=str(mailer))
    policy = tmp_path / "site.toml"
    policy.write_text(tomli_w.dumps(data))
    warning_s = 0.25 * 60
    common = ["-A", site.burnin.account, "-q", site.burnin.qos, "-p", "gpu", "--gres=gpu:8"]
    batch = sh(env, "sbatch", "--parsable", *common, "-w", "b200-004", "-J", "idle-batch", "-o", "/dev/null",
               "--wrap", "sleep 600").strip().split(";")[0]
    interactive = subprocess.Popen(["srun", *common, "-w", "b200-001", "-J", "idle-interactive", "sleep", "600"],
                                   env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)

    def running() -> dict[str, str]:
        out = sh(env, "squeue", "-h", "-t", "RUNNING", "-o", "%i|%j").splitlines()
        return {line.split("|")[1]: line.split("|")[0] for line in out if line.count("|") == 1}

    def mails() -> str:
        return mail_log.read_text() if mail_log.exists() else ""

    def act() -> dict:
        p = run_slurmadm(env, "jobs", "idle", "--json", "--act", "--site", str(policy))
        assert p.returncode in (0, 1), p.stderr
        return {j["job_id"]: j for j in json.loads(p.stdout)["jobs"]}
    try:
        assert wait_for(lambda: {"idle-batch", "idle-interactive"} <= set(running()), 60, interval=0.5), running()
        inter = running()["idle-interactive"]
        seen: dict = {}

        def warned() -> bool:
            seen.update(act())
            return f"job {batch}:" in mails()
        assert wait_for(warned, 120, interval=1), (seen, mails())
        assert running().get("idle-batch") == batch  # warned, not cancelled: its warning period starts
        assert f"to=root args=-s [slurmadm] job {batch}: idle GPUs root" in mails()
        assert "cancelled in 0.25 min if it stays idle" in mails()
        # the interactive job is as idle, and exempt: listed, never mailed or cancelled
        assert wait_for(lambda: inter in seen or seen.update(act()) or inter in seen, 60, interval=1), seen
        assert seen[inter]["interactive"] and seen[inter]["action"] == "none"
        assert seen[inter]["exempt"] == "interactive job"

        def cancelled() -> bool:
            act()
            return "idle-batch" not in running()
        assert wait_for(cancelled, 120, interval=1)
        # scancel's end state (COMPLETING while the epilog runs), as squeue keeps it for MinJobAge
        assert wait_for(lambda: sh(env, "squeue", "-h", "-t", "all", "-j", batch, "-o", "%T").strip() == "CANCELLED",
                        60, interval=0.5), sh(env, "squeue", "-h", "-t", "all", "-j", batch, "-o", "%T")
        with Store(site.store.path) as store:
            warn = store.events(action="jobs.idle-warn", target=f"job:{batch}")
            cancel = store.events(action="jobs.idle-cancel", target=f"job:{batch}")
        assert len(warn) == 1 and len(cancel) == 1
        assert cancel[0].ts - warn[0].ts >= warning_s - 1  # not before its warning period (warned at: whole s)
        assert mails().count(f"job {batch}:") == 1  # mailed once
        assert f"job {inter}:" not in mails() and f"job {inter} (" not in mails()
        assert running().get("idle-interactive") == inter  # still running
    finally:
        sh(env, "scancel", batch, check=False)
        interactive.terminate()
        try:
            interactive.wait(30)
        except subprocess.TimeoutExpired:
            interactive.kill()
        sh(env, "scancel", "-n", "idle-interactive", check=False)


def test_top_runs_in_tmux_and_q_quits(stack, dev_cluster, env):
    assert shutil.which("tmux"), "tmux is missing: run scripts/install-system-deps.sh"
    session = f"slurmadm-top-{dev_cluster.state_dir.name}"
    sh(env, "scontrol", "update", "NodeName=b200-001", "State=DRAIN", "Reason=cable check")
    import sys

    cmd = f"{sys.executable} -m slurmadm top --interval 0.5"
    subprocess.run(["tmux", "kill-session", "-t", session], env=env, capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "45", cmd], env=env, check=True)
    try:
        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], env=env, capture_output=True,
                                  text=True).stdout

        def shows() -> bool:
            s = screen()
            return all(n in s for n in dev_cluster.nodes()) and "cable check" in s and "queue" in s
        assert wait_for(shows, 60, interval=0.5), screen()
        assert "admin" in screen()  # the drain's owner
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], env=env, check=True)
        assert wait_for(lambda: subprocess.run(["tmux", "has-session", "-t", session], env=env,
                                               capture_output=True).returncode != 0, 20, interval=0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], env=env, capture_output=True)
        sh(env, "scontrol", "update", "NodeName=b200-001", "State=RESUME")
