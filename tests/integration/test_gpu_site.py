"""Issue 16 on the real dev cluster (Slurm from Debian's packages): what the GPU-site settings do
to real jobs. A GPU job is billed in GPUs, a CPU-only job gets memory per CPU instead of the whole
node, a debug-partition job without the debug QOS is rejected at submit instead of pending
forever, and `config apply` refuses an AllowQos name that slurmdbd does not have.

Jobs run as root in the burn-in project (ops-burnin: QOS burnin and normal, default burnin), which
`slurmadm accounts apply` creates from the dev site."""

from __future__ import annotations

import os
import subprocess
import time
import tomllib

import pytest
import tomli_w

from slurmadm.config.build import billing_weights, real_memory
from slurmadm.slurm.parse import parse_kv_line

from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration


def sh(env, *argv, timeout=60, check=True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check)


def wait_until(cond, timeout=90.0, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def accounts_applied(dev_cluster):
    env = {**os.environ, **dev_cluster.env()}
    r = run_slurmadm(env, "accounts", "apply", "--site", str(dev_cluster.site_path), "--reason", "gpu-site tests")
    assert r.returncode == 0, r.stdout + r.stderr
    return dev_cluster.site()


@pytest.fixture()
def job(cluster_env, accounts_applied):
    """Submit a job as root in ops-burnin, wait until it runs, yield its `scontrol show job` record."""
    ids = []

    def submit(*args: str) -> dict[str, str]:
        out = sh(cluster_env, "sbatch", "--parsable", "-A", "ops-burnin", "--qos=normal", "-t", "5",
                 "-o", "/dev/null", "--chdir=/tmp", *args, "--wrap", "sleep 300").stdout
        jid = out.strip().split(";")[0]
        ids.append(jid)

        def running():
            rec = parse_kv_line(sh(cluster_env, "scontrol", "show", "job", jid, "-o").stdout)
            return rec if rec.get("JobState") == "RUNNING" else None
        return wait_until(running, 120, f"job {jid} running")

    yield submit
    for jid in ids:
        sh(cluster_env, "scancel", jid, check=False)


def tres(record: dict[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in record["TRES"].split(",") if "=" in item)


def mib(text: str) -> float:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def test_a_gpu_job_is_billed_in_gpus(cluster_env, job, accounts_applied):
    site = accounts_applied
    rec = job("-p", "gpu", "-n1", "--gres=gpu:8")
    t = tres(rec)
    # before: billing counted the job's CPUs (1 here) although it holds all 8 GPUs of a node
    assert t["gres/gpu"] == "8" and t["billing"] == "8", rec["TRES"]
    prof = site.node_profile(rec["NodeList"])
    part = parse_kv_line(sh(cluster_env, "scontrol", "show", "partition", "gpu", "-o").stdout)
    assert part["TRESBillingWeights"] == billing_weights(site, site.partitions[0], [prof])


def test_a_cpu_only_job_gets_memory_per_cpu_not_the_whole_node(job, accounts_applied):
    site = accounts_applied
    rec = job("-p", "gpu", "-n1")
    prof = site.node_profile(rec["NodeList"])
    node_mem = real_memory(site, prof)
    t = tres(rec)
    cpus = int(t["cpu"])
    # before: mem=<RealMemory> (DefMemPerGPU does not apply to a job without GPUs)
    assert mib(t["mem"]) == pytest.approx(cpus * (node_mem // prof.cpus), abs=1), rec["TRES"]
    assert mib(t["mem"]) < node_mem
    assert "gres/gpu" not in t


def test_a_debug_job_without_the_debug_qos_is_rejected_at_submit(cluster_env, accounts_applied):
    """AllowQos=debug: before EnforcePartLimits=ALL such a job was accepted and pended forever
    ("Job's QOS not permitted to use this partition")."""
    r = sh(cluster_env, "sbatch", "--parsable", "-A", "ops-burnin", "-p", "debug", "-t", "5", "-n1",
           "-o", "/dev/null", "--chdir=/tmp", "--wrap", "true", check=False)
    if r.returncode == 0:
        sh(cluster_env, "scancel", r.stdout.strip().split(";")[0], check=False)
    assert r.returncode != 0, f"accepted: job {r.stdout.strip()}"
    assert "sbatch: error:" in r.stderr and "qos" in r.stderr.lower(), r.stderr


def test_config_apply_refuses_an_allow_qos_typo(cluster_env, dev_cluster, accounts_applied, tmp_path):
    """An AllowQos name slurmdbd lacks is only logged by slurmctld and dropped; apply refuses it."""
    data = tomllib.loads(dev_cluster.site_path.read_text())
    data["qos"].append({"name": "debgu", "description": "a typo of debug"})
    debug = next(i for i, p in enumerate(data["partitions"]) if p["name"] == "debug")
    data["partitions"][debug]["allow_qos"] = ["debug", "debgu"]
    path = tmp_path / "site.toml"
    path.write_text(tomli_w.dumps(data))
    before = dev_cluster.slurm_conf.read_text()
    out = run_slurmadm(cluster_env, "config", "apply", "--site", str(path), "--reason", "typo")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (
        f"slurmadm: error: partitions[{debug}].allow_qos[1]: QOS 'debgu' does not exist in slurmdbd, and "
        "slurmctld would silently drop it from AllowQos; create it first (slurmadm accounts apply), then apply "
        "again. Nothing written.")
    assert dev_cluster.slurm_conf.read_text() == before
