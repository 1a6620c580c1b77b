"""Issue 4 against the dev cluster's real slurmdbd/slurmctld: apply the example site, sacctmgr says
the same, a second plan is empty, edits plan exactly, quotas hold jobs with AssocGrpGRES, a high
QOS job preempts a low one, prune spares associations with jobs, report adds up."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.accounts import apply_lock, batches, lock_path, plan_for
from slurmadm.site import load_site
from slurmadm.slurm.accounting import Sacctmgr
from tests.integration.helpers import run_slurmadm, wait_until

pytestmark = pytest.mark.integration

ALICE, BOB = "sadm-alice", "sadm-bob"  # Unix users the job tests run as (created if missing)


# ------------------------------------------------------------------------------------ helpers


def sh(env, *argv, timeout=60, check=True) -> str:
    proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr}{proc.stdout}")
    return proc.stdout


def accounts(env, *args, timeout=300):
    return run_slurmadm(env, "accounts", *args, timeout=timeout)




def assocs(env) -> dict[tuple[str, str], dict[str, str]]:
    """sacctmgr's own view, parsed here independently of slurmadm's parser."""
    fields = ["Account", "User", "ParentName", "Share", "GrpTRES", "GrpTRESMins", "QOS", "DefaultQOS"]
    out = sh(env, "sacctmgr", "-n", "-P", "show", "assoc", "wopl", f"format={','.join(fields)}")
    rows = {}
    for line in out.splitlines():
        values = dict(zip(fields, line.split("|"), strict=True))
        rows[(values["Account"], values["User"])] = values
    return rows


def default_accounts(env) -> dict[str, str]:
    out = sh(env, "sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount")
    return dict(line.split("|") for line in out.splitlines())


def jobs(env) -> dict[str, dict[str, str]]:
    out = sh(env, "squeue", "-h", "-a", "-o", "%i|%u|%a|%q|%T|%r|%N")
    keys = ["id", "user", "account", "qos", "state", "reason", "nodes"]
    return {row["id"]: row for row in (dict(zip(keys, ln.split("|"), strict=True)) for ln in out.splitlines())}


def submit(env, user, account, gres, *extra, seconds=600) -> str:
    out = sh(env, "runuser", "-u", user, "--", "sbatch", "--parsable", "-A", account, "-t", "10",
             f"--gres=gpu:{gres}", "--mem=100M", "-o", "/dev/null", "--chdir=/tmp", *extra, "--wrap", f"sleep {seconds}")
    return out.strip().split(";")[0]


def write_site(path: Path, data: dict) -> str:
    path.write_text(tomli_w.dumps(data))
    return str(path)


def project(name, org, members, **kw) -> dict:
    return {"name": name, "organization": org, "members": members, "qos": kw.pop("qos", ["normal"]),
            "default_qos": kw.pop("default_qos", "normal"), **kw}


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def job_users(dev_cluster):
    """Two Unix users for jobs (the munge socket is reachable by them without any chmod)."""
    created = []
    for name in (ALICE, BOB):
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True, timeout=30)
            created.append(name)
    yield (ALICE, BOB)  # the dev cluster's munge socket is reachable by every user, as /run/munge
    env = {**os.environ, **dev_cluster.env()}
    for name in (ALICE, BOB):
        subprocess.run(["scancel", "-u", name], env=env, timeout=30, check=False)
    for name in created:
        subprocess.run(["userdel", name], timeout=30, check=False)


@pytest.fixture()
def base(dev_cluster) -> dict:
    """The dev site's TOML data (derived from site.example.toml, quotas clipped to 32 GPUs)."""
    return tomllib.loads(dev_cluster.site_path.read_text())


@pytest.fixture()
def no_jobs(cluster_env, job_users):
    yield
    for user in job_users:
        sh(cluster_env, "scancel", "-u", user, check=False)
    wait_until(lambda: not any(j["user"] in job_users for j in jobs(cluster_env).values()), 60, "jobs gone")


def converge(env, site: str) -> None:
    r = accounts(env, "apply", "--prune", "--site", site)
    assert r.returncode == 0, r.stderr
    r = accounts(env, "plan", "--check", "--site", site)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------- tests


def test_apply_example_site_then_sacctmgr_matches_and_a_second_plan_is_empty(cluster_env, dev_cluster, base):
    site = str(dev_cluster.site_path)
    r = accounts(cluster_env, "apply", "--prune", "--site", site, "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["backups"] and f"\nCluster - '{base['cluster']['name']}'" in Path(result["backups"][0]).read_text()

    rows = assocs(cluster_env)
    orgs = {o["name"]: o for o in base["organizations"]}
    for org in base["organizations"]:
        row = rows[(org["name"], "")]
        assert row["ParentName"] == org.get("parent", "root")
        assert row["Share"] == str(org["fairshare"])
        assert row["GrpTRES"] == (f"gres/gpu={org['gpu_quota']}" if "gpu_quota" in org else "")
        assert row["GrpTRESMins"] == (f"gres/gpu={org['gpu_hours'] * 60}" if "gpu_hours" in org else "")
    memberships: dict[str, list[str]] = {}
    for proj in base["projects"]:
        row = rows[(proj["name"], "")]
        assert row["ParentName"] == proj["organization"] and proj["organization"] in orgs
        assert row["Share"] == str(proj.get("fairshare", 1))
        assert row["GrpTRES"] == (f"gres/gpu={proj['gpu_quota']}" if "gpu_quota" in proj else "")
        assert row["GrpTRESMins"] == (f"gres/gpu={proj['gpu_hours'] * 60}" if "gpu_hours" in proj else "")
        assert set(row["QOS"].split(",")) == set(proj["qos"]) and row["DefaultQOS"] == proj["default_qos"]
        members = list(proj["members"]) + [u["name"] for u in base.get("users", [])
                                           if proj["name"] in u.get("projects", [])]
        assert sorted(u for (a, u) in rows if a == proj["name"] and u) == sorted(members)
        for user in members:
            memberships.setdefault(user, []).append(proj["name"])
            urow = rows[(proj["name"], user)]
            cap = proj.get("member_gpu_caps", {}).get(user, proj.get("user_gpu_cap"))
            assert urow["GrpTRES"] == (f"gres/gpu={cap}" if cap else "")
            assert urow["Share"] == str(proj.get("member_fairshare", 1))
            assert urow["QOS"] == "" and urow["DefaultQOS"] == ""  # inherited from the project
    declared = set(orgs) | {p["name"] for p in base["projects"]}
    assert {a for (a, _u) in rows} == declared | {"root"}
    defaults = default_accounts(cluster_env)
    assert defaults["alice"] == "ml-llm"  # users[].default_project
    assert defaults["bob"] == "phys-lattice" and defaults["root"] == "root"
    coordinators = {a: set(c.split(",")) - {""} for a, c in (line.split("|") for line in sh(
        cluster_env, "sacctmgr", "-n", "-P", "show", "account", "withcoord", "format=Account,Coordinators").splitlines())}
    declared = {x["name"]: set(x.get("coordinators", [])) for x in base["organizations"] + base["projects"]}
    assert declared["ml"] == {"frank"} and declared["phys-lattice"] == {"alice"}
    up = {o["name"]: o.get("parent") for o in base["organizations"]} | {
        p["name"]: p["organization"] for p in base["projects"]}

    def effective(name):  # a coordinator of an account coordinates everything below it
        return declared[name] | (effective(up[name]) if up[name] else set())

    assert {a: c for a, c in coordinators.items() if a != "root"} == {a: effective(a) for a in declared}
    assert coordinators["ml-thesis"] == {"frank"}  # ml > ml-students > ml-thesis

    qos = {line.split("|")[0]: line.split("|") for line in sh(
        cluster_env, "sacctmgr", "-n", "-P", "show", "qos",
        "format=Name,Priority,Preempt,PreemptMode,UsageFactor,MaxTRESPU,Flags").splitlines()}
    assert qos["high"][1:4] == ["1000", "low", "cluster"] and qos["low"][3:5] == ["requeue", "0.500000"]
    assert qos["normal"][5:7] == ["gres/gpu=32", "DenyOnLimit"]  # 256 clipped to the dev cluster's 32

    again = accounts(cluster_env, "plan", "--check", "--json", "--site", site)
    assert again.returncode == 0 and json.loads(again.stdout)["changes"] == 0
    noop = accounts(cluster_env, "apply", "--json", "--site", site)
    assert noop.returncode == 0 and json.loads(noop.stdout)["applied"] == []

    events = json.loads(run_slurmadm(cluster_env, "audit", "log", "--json", "--action", "accounts.*",
                                     "--site", site, "--limit", "1000").stdout)
    targets = {e["target"] for e in events}
    assert {"account:phys-lattice", "user:alice@ml-llm", "qos:high"} <= targets


def test_edits_plan_exactly_those_changes(cluster_env, dev_cluster, base, tmp_path):
    site = str(dev_cluster.site_path)
    converge(cluster_env, site)
    by = {p["name"]: p for p in base["projects"]}
    by["phys-astro"]["gpu_quota"] = 16  # change a quota
    by["bio-fold"]["members"] = ["erin"]  # move dave ...
    by["phys-astro"]["members"] = ["carol", "dave"]  # ... to phys-astro
    by["phys-lattice"]["coordinators"] = ["bob"]  # a new PI
    base["projects"] = [p for p in base["projects"] if p["name"] != "ml-vision"]  # drop a project
    base["users"] = [u for u in base["users"] if u["name"] != "grace"]
    edited = write_site(tmp_path / "edited.toml", base)

    r = accounts(cluster_env, "plan", "--json", "--check", "--site", edited)
    assert r.returncode == 1
    ops = [(op["kind"], op["target"]) for op in json.loads(r.stdout)["ops"]]
    assert ops == [
        ("modify-account", "account:phys-astro"),
        ("add-user", "user:dave@phys-astro"),
        ("default-account", "user:dave"),
        ("remove-coordinators", "account:phys-lattice"),
        ("add-coordinators", "account:phys-lattice"),
        ("delete-user", "user:dave@bio-fold"),
        ("delete-user", "user:grace@ml-vision"),
        ("delete-user", "user:heidi@ml-vision"),
        ("delete-account", "account:ml-vision"),
    ]
    quota = json.loads(r.stdout)["ops"][0]["changes"]
    assert quota == [{"field": "GrpTRES", "old": "gres/gpu=32", "new": "gres/gpu=16"}]

    # without --prune only the first five happen; the plan then holds just the deletions
    assert accounts(cluster_env, "apply", "--site", edited).returncode == 0
    left = json.loads(accounts(cluster_env, "plan", "--json", "--site", edited).stdout)["ops"]
    assert [op["kind"] for op in left] == ["delete-user"] * 3 + ["delete-account"]
    rows = assocs(cluster_env)
    assert rows[("phys-astro", "")]["GrpTRES"] == "gres/gpu=16"
    assert ("phys-astro", "dave") in rows and default_accounts(cluster_env)["dave"] == "phys-astro"
    assert sh(cluster_env, "sacctmgr", "-n", "-P", "show", "account", "phys-lattice", "withcoord",
              "format=Coordinators").strip() == "bob"

    r = accounts(cluster_env, "apply", "--prune", "--site", edited)
    assert r.returncode == 0, r.stderr
    rows = assocs(cluster_env)
    assert not any(a == "ml-vision" for a, _u in rows) and ("bio-fold", "dave") not in rows
    assert "heidi" not in default_accounts(cluster_env)  # her last association went, and she with it
    assert accounts(cluster_env, "plan", "--check", "--site", edited).returncode == 0


def test_an_interrupted_apply_converges_when_run_again(cluster_env, dev_cluster, base, tmp_path):
    converge(cluster_env, str(dev_cluster.site_path))
    base["qos"].append({"name": "scavenger", "priority": 1, "preempt_mode": "requeue"})
    base["organizations"].append({"name": "chem", "fairshare": 10, "gpu_quota": 16})
    for i in range(12):
        base["projects"].append(project(f"chem-{i:02d}", "chem", [f"chem{i:02d}a", f"chem{i:02d}b", "carol"],
                                        gpu_quota=8, qos=["normal", "scavenger"]))
    for proj in base["projects"]:
        if proj["name"] == "bio-fold":
            proj["gpu_quota"] = 24
            proj["user_gpu_cap"] = 8
    edited = write_site(tmp_path / "edited.toml", base)

    site = load_site(edited)
    sacctmgr = Sacctmgr(site.cluster.name, env={"SLURM_CONF": cluster_env["SLURM_CONF"]})
    _w, have, plan = plan_for(site, sacctmgr)
    calls = batches(plan.runnable(prune=True), plan.cluster, have)
    assert len(plan.ops) > 40 and len(calls) < 10  # 12 projects, 25 users: a handful of calls
    for batch in calls[: len(calls) // 2]:  # the apply "dies" half way
        if batch.load_text:
            path = tmp_path / "partial.cfg"
            path.write_text(batch.load_text)
            sacctmgr.load(str(path))
        else:
            sacctmgr.execute(batch.argv)
    half = json.loads(accounts(cluster_env, "plan", "--json", "--site", edited).stdout)["changes"]
    assert 0 < half < len(plan.ops)

    r = accounts(cluster_env, "apply", "--site", edited)
    assert r.returncode == 0, r.stderr
    assert accounts(cluster_env, "plan", "--check", "--site", edited).returncode == 0
    rows = assocs(cluster_env)
    assert rows[("chem-11", "chem11b")] and rows[("bio-fold", "erin")]["GrpTRES"] == "gres/gpu=8"
    converge(cluster_env, str(dev_cluster.site_path))  # and back: prune removes chem again
    assert not any(a.startswith("chem") for a, _u in assocs(cluster_env))


def test_gpu_quota_and_user_cap_hold_jobs_with_assoc_grp_gres(cluster_env, base, tmp_path, no_jobs, job_users):
    alice, bob = job_users
    base["projects"] += [
        project("quota-test", "ops", [alice], gpu_quota=8),
        project("cap-test", "ops", [alice, bob], gpu_quota=16, user_gpu_cap=4),
    ]
    converge(cluster_env, write_site(tmp_path / "site.toml", base))

    big = submit(cluster_env, alice, "quota-test", 6)  # inside the quota of 8
    wait_until(lambda: jobs(cluster_env)[big]["state"] == "RUNNING", what="6-GPU job running")
    over = submit(cluster_env, alice, "quota-test", 4)  # 6 + 4 > 8
    fits = submit(cluster_env, alice, "quota-test", 2)  # 6 + 2 = 8
    wait_until(lambda: jobs(cluster_env)[fits]["state"] == "RUNNING", what="2-GPU job running")
    over_job = wait_until(lambda: (j := jobs(cluster_env)[over])["reason"] == "AssocGrpGRES" and j, what="AssocGrpGRES")
    assert over_job["state"] == "PENDING"

    capped = submit(cluster_env, alice, "cap-test", 4)  # alice's cap is 4 GPUs in cap-test
    wait_until(lambda: jobs(cluster_env)[capped]["state"] == "RUNNING", what="alice's 4-GPU job")
    beyond = submit(cluster_env, alice, "cap-test", 1)
    other = submit(cluster_env, bob, "cap-test", 4)  # bob has his own cap
    wait_until(lambda: jobs(cluster_env)[other]["state"] == "RUNNING", what="bob's 4-GPU job")
    wait_until(lambda: jobs(cluster_env)[beyond]["reason"] == "AssocGrpGRES", what="alice over her cap")
    assert jobs(cluster_env)[beyond]["state"] == "PENDING" and jobs(cluster_env)[over]["state"] == "PENDING"

    # the report counts what runs now
    r = accounts(cluster_env, "report", "--json", "--site", str(tmp_path / "site.toml"))
    assert r.returncode == 0, r.stderr
    rep = {p["project"]: p for p in json.loads(r.stdout)["projects"]}
    assert (rep["quota-test"]["gpu_quota"], rep["quota-test"]["gpus_in_use"]) == (8, 8)
    assert (rep["cap-test"]["gpu_quota"], rep["cap-test"]["gpus_in_use"]) == (16, 8)
    assert rep["cap-test"]["members"] == sorted([alice, bob])


def test_a_high_qos_job_preempts_a_low_qos_job(cluster_env, base, tmp_path, no_jobs, job_users):
    alice, bob = job_users
    base["projects"].append(project("preempt-test", "ops", [alice, bob], qos=["normal", "high", "low"]))
    converge(cluster_env, write_site(tmp_path / "site.toml", base))

    low = [submit(cluster_env, alice, "preempt-test", 8, "--qos=low") for _ in range(4)]  # every GPU
    wait_until(lambda: all(jobs(cluster_env)[j]["state"] == "RUNNING" for j in low), what="4 low jobs running")
    placed = {j: jobs(cluster_env)[j]["nodes"] for j in low}
    high = submit(cluster_env, bob, "preempt-test", 8, "--qos=high")
    wait_until(lambda: jobs(cluster_env)[high]["state"] == "RUNNING", what="the high job running")
    now = jobs(cluster_env)
    requeued = [j for j in low if now[j]["state"] != "RUNNING"]
    assert len(requeued) == 1, now
    assert now[high]["nodes"] == placed[requeued[0]]  # it took the low job's node
    info = sh(cluster_env, "scontrol", "show", "job", requeued[0])
    assert "Restarts=1" in info and "JobState=PENDING" in info  # requeued (PreemptMode=requeue)


def test_prune_spares_an_account_with_jobs(cluster_env, base, tmp_path, no_jobs, job_users):
    alice, _bob = job_users
    with_busy = dict(base, projects=base["projects"] + [project("busy-test", "ops", [alice])])
    converge(cluster_env, write_site(tmp_path / "with.toml", with_busy))
    job = submit(cluster_env, alice, "busy-test", 1)
    wait_until(lambda: jobs(cluster_env)[job]["state"] == "RUNNING", what="job in busy-test")

    without = write_site(tmp_path / "without.toml", base)
    plan = json.loads(accounts(cluster_env, "plan", "--json", "--site", without).stdout)
    blocked = {op["target"]: op.get("blocked") for op in plan["ops"]}
    assert blocked["account:busy-test"] and blocked[f"user:{alice}@busy-test"]
    r = accounts(cluster_env, "apply", "--prune", "--json", "--site", without)
    assert r.returncode == 0, r.stderr
    skipped = {op["target"] for op in json.loads(r.stdout)["skipped"]}
    assert {"account:busy-test", f"user:{alice}@busy-test"} <= skipped
    assert ("busy-test", alice) in assocs(cluster_env)

    sh(cluster_env, "scancel", job)
    wait_until(lambda: job not in jobs(cluster_env), 60, "job gone")
    assert accounts(cluster_env, "apply", "--prune", "--site", without).returncode == 0
    assert not any(a == "busy-test" for a, _u in assocs(cluster_env))


def test_report_gpu_hours_since(cluster_env, base, tmp_path, no_jobs, job_users):
    alice, _bob = job_users
    base["projects"].append(project("report-test", "ops", [alice], gpu_quota=8, gpu_hours=100,
                                    coordinators=["bob"]))
    site = write_site(tmp_path / "site.toml", base)
    converge(cluster_env, site)
    sh(cluster_env, "runuser", "-u", alice, "--", "sbatch", "--wait", "-A", "report-test", "-t", "5",
       "--gres=gpu:4", "-o", "/dev/null", "--chdir=/tmp", "--wrap", "sleep 3", timeout=120)
    r = accounts(cluster_env, "report", "--json", "--since", "1h", "--site", site)
    assert r.returncode == 0, r.stderr
    rep = {p["project"]: p for p in json.loads(r.stdout)["projects"]}["report-test"]
    ran = sh(cluster_env, "sacct", "-a", "-X", "-n", "-P", "-A", "report-test", "-o", "AllocTRES,Start,End,State")
    assert 4 * 3 / 3600 <= rep["gpu_hours_run_since"] < 4 * 60 / 3600, ran  # 4 GPUs for ~3 s
    assert rep["gpu_hours_budget"] == 100.0 and rep["budget_account"] == "report-test"
    assert rep["members"] == [alice] and rep["coordinators"] == ["bob"]
    assert rep["gpu_hours_left"] == pytest.approx(
        100.0 - (rep["gpu_hours_charged"] or 0.0) - rep["gpu_hours_running"], abs=0.01)
    csv_out = accounts(cluster_env, "report", "--csv", "--site", site).stdout.splitlines()
    assert csv_out[0].startswith("project,organization,gpu_quota,gpus_in_use")
    assert any(line.startswith("report-test,ops,8,0,100.0,report-test,") for line in csv_out)


def test_a_second_apply_waits_for_no_one(cluster_env, dev_cluster):
    site = load_site(dev_cluster.site_path)
    with apply_lock(lock_path(site)):
        r = accounts(cluster_env, "apply", "--site", str(dev_cluster.site_path))
    assert r.returncode == 1 and "another `accounts apply` is running" in r.stderr


def test_sacctmgr_load_drops_changes_it_reports_when_a_default_account_also_changes(cluster_env, dev_cluster, tmp_path):
    """Why apply never lets `sacctmgr load` modify anything: this load prints 'Changed fairshare'
    yet the fairshare stays, because the same file also changes a user's default account."""
    cluster = load_site(dev_cluster.site_path).cluster.name
    sh(cluster_env, "sacctmgr", "-i", "add", "account", "name=ld-a,ld-b", "parent=root")
    sh(cluster_env, "sacctmgr", "-i", "add", "user", "name=ld-user", "account=ld-a")
    try:
        cfg = tmp_path / "load.cfg"
        cfg.write_text(f"Cluster - '{cluster}'\nParent - 'root'\nAccount - 'ld-a':Fairshare=45\n"
                       "Parent - 'ld-b'\nUser - 'ld-user':DefaultAccount='ld-b'\n")
        out = sh(cluster_env, "sacctmgr", "-i", "load", f"file={cfg}")
        assert "Changed fairshare" in out and "Changed Default Account" in out
        rows = assocs(cluster_env)
        assert rows[("ld-a", "")]["Share"] == "1"  # not 45
        assert default_accounts(cluster_env)["ld-user"] == "ld-b" and ("ld-b", "ld-user") in rows
    finally:
        sh(cluster_env, "sacctmgr", "-i", "delete", "user", "name=ld-user", check=False)
        sh(cluster_env, "sacctmgr", "-i", "delete", "account", "name=ld-a,ld-b", check=False)


def test_apply_returns_once_slurmctld_enforces_it(cluster_env, base, tmp_path, no_jobs, job_users):
    """slurmdbd hands new associations to slurmctld asynchronously: apply waits until `scontrol
    show assoc_mgr` has them, so a job submitted right after is not refused "Invalid account or
    account/partition combination"."""
    alice, _bob = job_users
    base["projects"].append(project("enforce-test", "ops", [alice], gpu_quota=8))
    site = write_site(tmp_path / "site.toml", base)
    r = accounts(cluster_env, "apply", "--json", "--site", site)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["enforced"] is True and out["not_yet_in_slurmctld"] == [] and out["enforced_after_s"] is not None
    mgr = sh(cluster_env, "scontrol", "show", "assoc_mgr", "accounts=enforce-test", "flags=assoc")
    assert "Account=enforce-test" in mgr and f"UserName={alice}(" in mgr
    sh(cluster_env, "runuser", "-u", alice, "--", "sbatch", "--test-only", "-A", "enforce-test", "-t", "5",
       "--gres=gpu:1", "-o", "/dev/null", "--chdir=/tmp", "--wrap", "true")
