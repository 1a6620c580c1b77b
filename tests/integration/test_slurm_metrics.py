"""Slurm's own instruments on the real dev cluster (issue 38).

On Slurm 26.05 (the forky chroot: `TRIXIE_SUITE=forky scripts/trixie-chroot.sh`) slurmctld
serves its metrics (MetricsType=metrics/openmetrics, written by `slurmadm config` for the
installed release), the generated Prometheus configuration scrapes its five endpoints, the head
exporter leaves out what Slurm counts itself, `promtool check config` and `check rules` pass, and
PartitionDrainedGpusHigh fires on a drained node reading Slurm's slurm_partition_gpus. On 22.05
and 24.11 (the Debian 12 / 13 hosts) the same module shows that nothing changed: no Metrics keys,
no slurm scrape job, the head exporter exports every series, and the same alert fires on
slurmadm's own series. Every wait polls with a deadline."""

from __future__ import annotations

import http.client
import json
import subprocess

import pytest
import yaml

from slurmadm.config.release import HEALTH_CHECK_TIMEOUT_FROM, METRICS_FROM, PROBES_FROM, fmt, health_check_timeout
from slurmadm.devcluster.daemons import wait_for
from slurmadm.exporter import slurmseries
from slurmadm.monitor.stack import http_get
from tests.integration.helpers import monitor_stack, prom, run_slurmadm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(dev_cluster):
    yield from monitor_stack(dev_cluster)


def release_of(dev_cluster) -> tuple[int, int]:
    major, minor = str(dev_cluster.record()["slurm_release"]).split(".")[:2]
    return int(major), int(minor)


def need(dev_cluster, since) -> None:
    rel = release_of(dev_cluster)
    if rel < since:
        pytest.skip(f"Slurm {fmt(rel)} here: this needs Slurm {fmt(since)} or later (run it in the forky chroot: "
                    f"TRIXIE_SUITE=forky scripts/trixie-chroot.sh run ...)")


def sh(env, *argv, timeout=30, check=True) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check).stdout


def env_of(dev_cluster) -> dict[str, str]:
    import os

    return {**os.environ, **dev_cluster.env()}


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


# ---------------------------------------------------------------------- every release


def test_slurm_conf_has_the_keys_of_its_release(dev_cluster):
    rel = release_of(dev_cluster)
    site = dev_cluster.site()
    conf = dev_cluster.p("etc", "slurm.conf").read_text()
    shown = sh(env_of(dev_cluster), "scontrol", "show", "config")
    if rel >= METRICS_FROM:
        assert "\nMetricsType=metrics/openmetrics\n" in conf
        assert any(ln.split("=")[0].strip() == "MetricsType" and "metrics/openmetrics" in ln for ln in shown.splitlines())
    else:
        assert "Metrics" not in conf and "MetricsType" not in shown
    if rel >= HEALTH_CHECK_TIMEOUT_FROM:
        want = health_check_timeout(site.health.periodic_timeout_s)
        assert f"\nHealthCheckTimeout={want}\n" in conf
        assert any(ln.startswith("HealthCheckTimeout") and f"= {want} sec" in ln for ln in shown.splitlines())
    else:
        assert "HealthCheckTimeout" not in conf


def test_dev_cluster_status_shows_readyz_where_slurm_has_it(dev_cluster):
    out = run_slurmadm(env_of(dev_cluster), "dev-cluster", "status", "--state-dir", str(dev_cluster.state_dir),
                       "--json", timeout=60)
    st = json.loads(out.stdout)
    if release_of(dev_cluster) >= PROBES_FROM:
        assert st["readyz"]["ok"] and st["readyz"]["answer"].startswith("204"), st["readyz"]
    else:
        assert st["readyz"] is None


def test_doctor_says_what_the_head_exporter_leaves_to_slurm(dev_cluster):
    out = run_slurmadm(env_of(dev_cluster), "doctor", "--check", "slurmctld", "--check", "slurm-metrics", "--json")
    found = {f["check"]: f for f in json.loads(out.stdout)["findings"]}
    m, ctld = found["slurm-metrics"], found["slurmctld"]
    assert m["status"] == "ok", m
    if release_of(dev_cluster) >= METRICS_FROM:
        assert "no longer exports" in m["summary"] and "slurmadm_jobs_running" in m["data"]["replaced"]
        assert ctld["data"]["readyz"]["ok"], ctld
    else:
        assert "has no metrics of its own" in m["summary"] and m["data"]["replaced"] == {}
        assert "readyz" not in ctld["data"]


def test_promtool_checks_the_stacks_config_and_rules(stack, dev_cluster):
    for argv in (["promtool", "check", "config", str(stack.dir / "prometheus.yml")],
                 ["promtool", "check", "rules", str(stack.dir / "rules.yml")]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    cfg = yaml.safe_load((stack.dir / "prometheus.yml").read_text())
    jobs = {j["job_name"] for j in cfg["scrape_configs"]}
    site = stack.site()
    assert (site.monitor.slurm_job in jobs) == (release_of(dev_cluster) >= METRICS_FROM)


def test_the_head_exporter_exports_what_slurm_does_not(stack, dev_cluster):
    site = stack.site()
    gone = slurmseries.replaced(stack.release(site))
    code, body = http_get(stack.urls()["head_exporter"], timeout=30)
    assert code == 200
    text = body.decode()
    for name in ("slurmadm_node_state", "slurmadm_node_partition_info", "slurmadm_project_gpus_in_use"):
        assert f"\n{name}{{" in text, name
    families = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    if release_of(dev_cluster) < METRICS_FROM:
        assert gone == ()
        assert {"slurmadm_nodes", "slurmadm_jobs_running"} <= families
        assert 'status="allocated"' in text and 'status="idle"' in text
    else:
        assert "slurmadm_nodes" not in families and "slurmadm_jobs_running" not in families
        if release_of(dev_cluster) >= (26, 5):
            assert 'status="allocated"' not in text and 'status="drained"' in text


# ---------------------------------------------------------------------- 25.11 and later


@pytest.mark.parametrize("endpoint", slurmseries.ENDPOINTS)
def test_slurmctld_serves_its_metrics(dev_cluster, endpoint):
    need(dev_cluster, METRICS_FROM)
    port = dev_cluster.site().slurm.slurmctld_port
    code, text = get(port, endpoint)
    assert code == 200, (code, text[:200])
    # per user and account: an empty page while no job exists (26.05.5)
    assert "# TYPE slurm_" in text or (endpoint == "/metrics/jobs-users-accts" and not text.strip()), text[:200]
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    if endpoint == "/metrics/nodes":
        for node in dev_cluster.nodes():
            assert f'slurm_node_cpus{{node="{node}"}}' in text


def test_prometheus_scrapes_slurmctld(stack, dev_cluster):
    need(dev_cluster, METRICS_FROM)
    job = stack.site().monitor.slurm_job
    assert wait_for(lambda: len(prom(stack, f'up{{job="{job}"}} == 1')) == len(slurmseries.ENDPOINTS), 60,
                    interval=0.5), prom(stack, f'up{{job="{job}"}}')
    assert wait_for(lambda: prom(stack, 'slurm_partition_nodes{partition="gpu"}'), 30, interval=0.5)
    nodes = prom(stack, 'slurm_partition_nodes{partition="gpu"}')[0]
    assert float(nodes["value"][1]) == len(dev_cluster.nodes())
    assert nodes["metric"]["endpoint"] == "partitions" and nodes["metric"]["cluster"] == stack.site().cluster.name


# ---------------------------------------------------------------------- the alert, every release


def test_partition_drained_gpus_fires_on_a_drained_node(stack, dev_cluster):
    """An admin drains one of the 4 nodes (25 % of partition gpu's GPUs, over the 10 % the site
    allows): PartitionDrainedGpusHigh fires. From 26.05 its denominator is Slurm's
    slurm_partition_gpus; before, slurmadm's own counts."""
    env = env_of(dev_cluster)
    rel = release_of(dev_cluster)
    body = http_get(stack.urls()["prometheus"] + "/api/v1/rules", timeout=30)[1]
    loaded = {r["name"]: r for g in json.loads(body)["data"]["groups"] for r in g["rules"]}
    expr = loaded["PartitionDrainedGpusHigh"]["query"]
    assert ("slurm_partition_gpus" in expr) == (rel >= (26, 5)), expr
    node = dev_cluster.nodes()[-1]
    sh(env, "scontrol", "update", f"nodename={node}", "state=drain", "reason=admin: issue 38 test")
    try:
        def firing() -> list:
            return prom(stack, 'ALERTS{alertname="PartitionDrainedGpusHigh", alertstate="firing", partition="gpu"}')
        if not wait_for(firing, 90, interval=1):
            pytest.fail(f"PartitionDrainedGpusHigh did not fire: {expr} = "
                        f"{prom(stack, expr.split(' > ')[0])}; sinfo: {sh(env, 'sinfo', '-N')}")
        if rel >= (26, 5):
            got = prom(stack, 'slurm_partition_nodes_drain{partition="gpu"}')
            assert got and float(got[0]["value"][1]) >= 1
    finally:
        sh(env, "scontrol", "update", f"nodename={node}", "state=resume", check=False)
    assert wait_for(lambda: "drain" not in sh(env, "sinfo", "-h", "-n", node, "-o", "%T"), 30, interval=0.5)
