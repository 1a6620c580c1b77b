"""The dcgm GPU source end to end on the dev cluster (`MonitorStack(gpu_source="dcgm")`): a real
dcgm-exporter capture (slurmadm/devcluster/data, source in its README) served per fake node on
loopback, scraped by Debian's Prometheus beside slurmadm's node exporters (which then leave out
what dcgm-exporter has); every dcgm-mode rule loads and evaluates, every dashboard query answers;
a job's prolog writes dcgm-exporter's --hpc-job-mapping-dir files, its GPUs carry `hpc_job`,
`slurmadm jobs idle` finds it idle and GpuJobIdle fires with the job id; the epilog clears the
files. Every wait polls with a deadline."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.monitor import dashboard
from slurmadm.monitor.stack import http_get
from slurmadm.top import util_query
from tests.integration.helpers import accounting_env, monitor_stack, prom, run_slurmadm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(dev_cluster):
    yield from monitor_stack(dev_cluster, gpu_source="dcgm")


@pytest.fixture(scope="module")
def env(dev_cluster):
    return accounting_env(dev_cluster)


def test_dcgm_exporter_series_are_scraped_and_slurmadm_keeps_only_what_dcgm_lacks(stack, dev_cluster):
    site = stack.site()
    assert site.monitor.gpu_source == "dcgm"
    n = len(dev_cluster.nodes())
    assert wait_for(lambda: len(prom(stack, f'up{{job="{site.monitor.dcgm_job}"}} == 1')) == n, 60, interval=0.5)
    hosts = {r["metric"]["Hostname"] for r in prom(stack, "DCGM_FI_DEV_GPU_UTIL")}
    assert hosts == set(dev_cluster.nodes())
    code, body = http_get(stack.urls()[f"exporter_{dev_cluster.nodes()[0]}"], timeout=30)
    assert code == 200
    text = body.decode()
    assert "slurmadm_gpu_utilization_percent" not in text and "slurmadm_gpu_temperature_celsius" not in text
    assert "slurmadm_gpu_xid_class_last" in text and "slurmadm_gpu_ecc_errors_total" in text
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr
    util = prom(stack, util_query(site)[0])  # what `top` asks in this mode
    assert {r["metric"]["Hostname"] for r in util} == set(dev_cluster.nodes())


def test_every_dcgm_rule_evaluates_and_every_dashboard_query_answers(stack):
    site = stack.site()
    build = __import__("slurmadm.monitor.rules", fromlist=["build"]).build
    names = {r.name for r in build(site, stack.release(site))}

    def loaded() -> dict:
        _c, body = http_get(stack.urls()["prometheus"] + "/api/v1/rules")
        rules = [r for g in json.loads(body or b"{}").get("data", {}).get("groups", []) for r in g["rules"]]
        return {r["name"]: r for r in rules}
    assert wait_for(lambda: set(loaded()) == names and all(r.get("lastEvaluation", "").startswith("2")
                                                          and not r["lastEvaluation"].startswith("0001")
                                                          for r in loaded().values()), 60, interval=0.5)
    bad = {n: r.get("lastError") for n, r in loaded().items() if r["health"] != "ok"}
    assert not bad, bad
    import re

    for rule in (r for r in build(site, stack.release(site)) if "DCGM_" in r.expr):
        for name in set(re.findall(r"DCGM_FI_[A-Z_]+", rule.expr)):
            assert prom(stack, name), f"{rule.name}: {name} has no series"

    def panels_answer() -> list[str]:
        return [t for t, expr in dashboard.panel_queries(site, stack.release(site)) if not prom(stack, expr)]
    assert wait_for(lambda: not panels_answer(), 60, interval=1), f"dashboard panels without series: {panels_answer()}"


def test_a_jobs_gpus_carry_hpc_job_and_idle_jobs_are_found(stack, dev_cluster, env):
    site = stack.site()
    common = ["-A", site.burnin.account, "-q", site.burnin.qos, "-p", "gpu", "--gres=gpu:8", "-w", "b200-002"]
    job = subprocess.run(["sbatch", "--parsable", *common, "-J", "dcgm-idle", "-o", "/dev/null", "--wrap", "sleep 300"],
                         env=env, capture_output=True, text=True, timeout=30, check=True).stdout.strip().split(";")[0]
    map_dir = site.monitor.dcgm_job_map_dir.replace("{node}", "b200-002")
    try:
        def mapped() -> bool:
            try:
                return all(open(os.path.join(map_dir, str(g))).read().split() == [job] for g in range(8))
            except OSError:
                return False
        assert wait_for(mapped, 90, interval=0.5), os.listdir(map_dir) if os.path.isdir(map_dir) else map_dir
        sel = f'DCGM_FI_DEV_GPU_UTIL{{Hostname="b200-002", hpc_job="{job}"}}'
        assert wait_for(lambda: len(prom(stack, sel)) == 7, 60, interval=0.5)  # the capture's GPUs 1-7

        def idle() -> dict:
            p = run_slurmadm(env, "jobs", "idle", "--json", "--site", str(stack.site_path))
            assert p.returncode in (0, 1), p.stderr
            return {j["job_id"]: j for j in json.loads(p.stdout)["jobs"]}
        assert wait_for(lambda: job in idle(), 90, interval=1)
        j = idle()[job]
        assert j["nodes"] == ["b200-002"] and j["gpus"] == 7 and j["user"] == "root"
        assert wait_for(lambda: prom(stack, f'ALERTS{{alertname="GpuJobIdle", jobid="{job}", node="b200-002", '
                                            'alertstate="firing"}'), 90, interval=0.5)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    assert wait_for(lambda: not [n for n in os.listdir(map_dir) if n.isdigit()], 90, interval=0.5), os.listdir(map_dir)
