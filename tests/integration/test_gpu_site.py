"""Issue 16 on the real dev cluster (Slurm from Debian's packages): what the GPU-site settings do
to real jobs. A GPU job is billed in GPUs, a CPU-only job gets memory per CPU instead of the whole
node, a debug-partition job without the debug QOS is rejected at submit instead of pending
forever, and `config apply` refuses an AllowQos name that slurmdbd does not have.

Jobs run as root in the burn-in project (ops-burnin: QOS burnin and normal, default burnin), which
`slurmadm accounts apply` creates from the dev site."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.config.build import billing_weights, real_memory
from slurmadm.slurm.parse import parse_kv_line

from tests.integration.helpers import run_slurmadm, wait_until

pytestmark = pytest.mark.integration


def sh(env, *argv, timeout=60, check=True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check)




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
    text = record["TRES"] if "TRES" in record else record["AllocTRES"]  # 24.11: ReqTRES and AllocTRES
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


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


# ------------------------------------------------------------------ 8. the accounts report


def sacct_runs(env, jid: str) -> list[dict[str, str]]:
    """Every run of a job (requeued ones included), parsed here independently of slurmadm."""
    out = sh(env, "sacct", "-X", "--duplicates", "-n", "-P", "-j", jid,
             "-o", "JobID,State,ElapsedRaw,AllocTRES,QOS").stdout
    keys = ["id", "state", "elapsed", "tres", "qos"]
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line.strip()]


def gpu_minutes(run: dict[str, str]) -> float:
    t = dict(item.split("=", 1) for item in run["tres"].split(",") if "=" in item)
    return int(t.get("gres/gpu", 0)) * int(run["elapsed"]) / 60


def test_report_labels_usage_factors_requeues_inherited_budgets_and_running_jobs(
        cluster_env, dev_cluster, accounts_applied, tmp_path):
    """Jobs in QOS high (UsageFactor 2) and low (0.5), a requeued job and a running one, in a
    project without its own budget under ml-students (which has one): the report's charged hours
    follow the UsageFactors, --since counts the requeued job's first run, the project shows the
    budget it inherits, and left subtracts what the running job still holds."""
    data = tomllib.loads(dev_cluster.site_path.read_text())
    data["projects"].append({"name": "rep-test", "organization": "ml-students", "members": ["root"],
                             "qos": ["normal", "high", "low"], "default_qos": "normal"})
    site_file = tmp_path / "site.toml"
    site_file.write_text(tomli_w.dumps(data))
    r = run_slurmadm(cluster_env, "accounts", "apply", "--site", str(site_file), "--reason", "report test")
    assert r.returncode == 0, r.stdout + r.stderr
    factors = {q["name"]: q.get("usage_factor", 1.0) for q in data["qos"]}
    assert factors["high"] == 2.0 and factors["low"] == 0.5

    def sbatch(*args: str) -> str:
        out = sh(cluster_env, "sbatch", "--parsable", "-A", "rep-test", "-o", "/dev/null", "--chdir=/tmp",
                 *args).stdout
        return out.strip().split(";")[0]

    ids = []
    try:
        # two finished jobs on 16 GPUs each, in QOS with different UsageFactors
        ids.append(sbatch("--qos=high", "-N2", "--gres=gpu:8", "-t", "5", "--wrap", "sleep 25"))
        ids.append(sbatch("--qos=low", "-N2", "--gres=gpu:8", "-t", "5", "--wrap", "sleep 15"))
        # a job that runs >= 10 s, is requeued, then cancelled while pending: only its first run used GPUs
        requeued = sbatch("--qos=normal", "-N1", "--gres=gpu:8", "-t", "5", "--requeue", "--wrap", "sleep 300")
        ids.append(requeued)

        def state(jid):
            return parse_kv_line(sh(cluster_env, "scontrol", "show", "job", jid, "-o").stdout).get("JobState")
        wait_until(lambda: state(requeued) == "RUNNING", 120, "requeued job running")
        def elapsed() -> int:
            rs = sacct_runs(cluster_env, requeued)
            return int(rs[0]["elapsed"] or 0) if rs else 0
        wait_until(lambda: elapsed() >= 10, 90, "10 s of run")
        sh(cluster_env, "scontrol", "requeue", requeued)
        wait_until(lambda: state(requeued) in ("PENDING", "REQUEUED"), 60, "requeued job pending")
        sh(cluster_env, "scancel", requeued)
        for jid in ids[:2]:
            wait_until(lambda jid=jid: state(jid) == "COMPLETED", 120, f"job {jid} completed")
        runs = {jid: sacct_runs(cluster_env, jid) for jid in ids}
        assert len(runs[requeued]) >= 2, runs[requeued]  # the first run is a record of its own
        first_run = gpu_minutes(runs[requeued][0])
        assert first_run >= 8 * 10 / 60, runs[requeued]

        qos_of = {ids[0]: "high", ids[1]: "low", requeued: "normal"}  # (a record that never ran may say Unknown)
        ran_expected = sum(gpu_minutes(run) for rs in runs.values() for run in rs)
        charged_expected = sum(gpu_minutes(run) * factors[qos_of[jid]] for jid, rs in runs.items() for run in rs)
        assert abs(charged_expected - ran_expected) > 3  # the test can tell them apart

        def report():
            out = run_slurmadm(cluster_env, "accounts", "report", "--json", "--since", "1h",
                               "--site", str(site_file))
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            return ({p["project"]: p for p in doc["projects"]}["rep-test"],
                    {o["organization"]: o for o in doc["organizations"]}["ml-students"])

        def caught_up():  # sshare catches up every PriorityCalcPeriod (1 minute on the dev cluster)
            proj, org = report()
            return (proj, org) if abs((proj["gpu_hours_charged"] or 0) * 60 - charged_expected) <= 1.5 else None
        proj, org = wait_until(caught_up, 240, f"charged GPU-minutes near {charged_expected:.1f}")

        # charged follows the UsageFactors (high x2, low x0.5), within sshare's whole minutes
        assert proj["gpu_hours_charged"] * 60 == pytest.approx(charged_expected, abs=1.5)
        # --since is raw GPU-hours and counts the requeued job's first run (sacct --duplicates)
        assert proj["gpu_hours_run_since"] * 60 == pytest.approx(ran_expected, abs=0.05)
        # no budget of its own: the one of ml-students limits it, and is named
        assert proj["budget_account"] == "ml-students" and proj["gpu_hours_budget"] == org["gpu_hours_budget"]
        assert org["gpu_hours_charged"] >= proj["gpu_hours_charged"]

        # a running job: 8 GPUs for a 10-minute limit; left subtracts what it still holds
        running = sbatch("--qos=normal", "-N1", "--gres=gpu:8", "-t", "10", "--wrap", "sleep 300")
        ids.append(running)
        wait_until(lambda: state(running) == "RUNNING", 120, "running job")
        proj, org = wait_until(lambda: (lambda po: po if po[0]["gpu_hours_running"] > 0 else None)(report()),
                               60, "running GPU-hours")
        assert proj["gpu_hours_running"] <= 8 * 10 / 60 + 0.01 and proj["gpus_in_use"] == 8
        assert org["gpu_hours_running"] >= proj["gpu_hours_running"] and org["gpus_in_use"] >= 8
        assert proj["gpu_hours_left"] == pytest.approx(
            org["gpu_hours_budget"] - org["gpu_hours_charged"] - org["gpu_hours_running"], abs=0.01)
        if os.environ.get("SLURMADM_CAPTURE_DIR"):  # refresh the unit tests' fixtures from real Slurm
            cap = Path(os.environ["SLURMADM_CAPTURE_DIR"])
            cap.mkdir(parents=True, exist_ok=True)
            from slurmadm.slurm.accounting import SSHARE_FIELDS
            (cap / "sshare_runmins.txt").write_text(sh(cluster_env, "sshare", "-a", "-P", "-o", SSHARE_FIELDS).stdout)
            (cap / "sacct_requeued.txt").write_text(sh(
                cluster_env, "sacct", "-a", "-X", "--duplicates", "-n", "-P", "-A", "rep-test",
                "-o", "Account,User,AllocTRES,Start,End,State").stdout)

        table = run_slurmadm({**cluster_env, "COLUMNS": "250"}, "accounts", "report", "--since", "1h",
                             "--site", str(site_file))
        assert table.returncode == 0, table.stderr
        assert "charged GPU-h" in table.stdout and "ran GPU-h since 1h" in table.stdout
        assert "(ml-students)" in table.stdout  # the inherited budget is named
    finally:
        for jid in ids:
            sh(cluster_env, "scancel", jid, check=False)
        # leave slurmdbd as the dev site has it (other modules compare it with the site)
        wait_until(lambda: not sh(cluster_env, "squeue", "-h", "-A", "rep-test").stdout.strip(), 120,
                   "rep-test jobs gone")
        sh(cluster_env, "sacctmgr", "-i", "delete", "account", "name=rep-test", check=False)
