"""`slurmadm deploy` on the session dev cluster's fake nodes: each node has its own sshd in its
own mount namespace, with its own /opt (empty at first), so `deploy.prefix = /opt/slurmadm` is a
prefix of its own on every node and the head's /opt never changes. Real `pip wheel` on the head
(twice per module: this checkout, and a copy with another version for the upgrade), real
virtualenvs on the nodes from the copied wheelhouse with `--no-index` and no pip configuration,
real Slurm running the deployed prolog (slurm.conf's Prolog pointed at the deployed hooks by
`slurmadm config apply`), the real `slurmadm doctor` of each release on each node.

The module leaves the cluster as it found it: Prolog/Epilog/HealthCheckProgram back to the dev
cluster's hooks, /opt/slurmadm gone from every node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster.daemons import wait_for
from slurmadm.slurm.cli_backend import CliBackend
from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]
REPO = Path(__file__).resolve().parents[2]
SECRET = "hunter2-deploy-secret-value"


def _sh(env, *argv, timeout=60, check=True):
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def world(dev_cluster, tmp_path_factory):
    """The deploy site (the dev site, its hooks in the nodes' own /opt/slurmadm/prolog_epilog),
    and two wheelhouses built once: release A (this checkout) and B (the same, version +1)."""
    tmp = tmp_path_factory.mktemp("deploy")
    env = {**os.environ, **dev_cluster.env()}
    data = tomllib.loads(Path(dev_cluster.site_path).read_text())
    data["slurm"]["prolog_dir"] = "/opt/slurmadm/prolog_epilog"
    data["deploy"] = {
        "prefix": "/opt/slurmadm",
        "wheelhouse_dir": str(tmp / "wheelhouse"),
        "unit_dir": "/opt/slurmadm/systemd",  # the node's own (its /opt), not the host's systemd
        # what the dev cluster's own slurmadm.env gives its hooks (stand-in NVML, SLURM_CONF)
        "env": {k: v for k, v in dev_cluster.env().items() if k != "SLURMADM_SITE"},
        "install_timeout_s": 600.0,
        # a secret: the nodes see the head's file at the same path (only /opt is their own), so
        # the deploy writes the very file over SFTP, as it would to a node's disk: 0600 after
        "secrets": [str(tmp / "deploy-secret")],
    }
    (tmp / "deploy-secret").write_text(SECRET)
    (tmp / "deploy-secret").chmod(0o644)
    site_file = tmp / "deploy-site.toml"
    site_file.write_text(tomli_w.dumps(data))
    env["SLURMADM_SITE"] = str(site_file)
    # release A: this checkout; release B: a copy whose version is one higher
    p = run_slurmadm(env, "deploy", "build", "--json", timeout=900)
    assert p.returncode == 0, p.stderr
    a = json.loads(p.stdout)
    src = tmp / "src-b"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv*", "tests", "bench", "__pycache__",
                                                             "*.egg-info", "build", "dist"))
    init = src / "slurmadm" / "__init__.py"
    text = init.read_text()
    old = text.split('__version__ = "', 1)[1].split('"', 1)[0]
    init.write_text(text.replace(f'__version__ = "{old}"', f'__version__ = "{old}.post1"'))
    p = run_slurmadm(env, "deploy", "build", "--source", str(src), "--json", timeout=900)
    assert p.returncode == 0, p.stderr
    b = json.loads(p.stdout)
    assert a["release"] != b["release"] and b["version"] == f"{old}.post1"
    yield {"env": env, "site": site_file, "a": a, "b": b, "tmp": tmp}
    # back as found: the dev cluster's hooks in slurm.conf, no /opt/slurmadm on the nodes
    run_slurmadm(env | {"SLURMADM_SITE": str(dev_cluster.site_path)}, "config", "apply", "--reason", "test_deploy done")
    run_slurmadm(env, "fleet", "run", ",".join(NODES), "--", "rm", "-rf", "/opt/slurmadm")
    dev_cluster.p("nodes", "b200-003", "bin", "scontrol").unlink(missing_ok=True)


def on_nodes(env, command: str) -> dict[str, str]:
    p = run_slurmadm(env, "fleet", "run", ",".join(NODES), "--json", "--", command)
    assert p.returncode in (0, 1), p.stderr
    return {r["node"]: r["output"].strip() for r in json.loads(p.stdout)["nodes"]}


def prolog_runs(dev_cluster) -> dict[str, int]:
    """Per node, how many prolog health runs are in health.results_log (a run only the deployed
    release's python can make: the hooks Slurm runs exist only under the node's own /opt)."""
    path = Path(dev_cluster.site().health.results_log)
    runs: dict[str, set] = {n: set() for n in NODES}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("context") == "prolog" and r.get("node") in runs:
                runs[r["node"]].add(r.get("run_id"))
    return {n: len(v) for n, v in runs.items()}


def drained(env) -> list[str]:
    return [n.name for n in CliBackend(env={"SLURM_CONF": env["SLURM_CONF"]}).nodes(NODES) if n.drained]


def test_fresh_deploy_of_four_nodes_then_nothing_to_do(world, dev_cluster):
    env, a = world["env"], world["a"]
    assert not Path("/opt/slurmadm").exists()  # the head's /opt: never touched by the nodes
    assert set(on_nodes(env, "ls /opt | wc -l").values()) == {"0"}  # from nothing
    p = run_slurmadm(env, "deploy", "plan", "--wheelhouse", a["wheelhouse"], "--json", timeout=300)
    assert p.returncode == 1, p.stderr
    plans = {n["node"]: {c["action"] for c in n["changes"]} for n in json.loads(p.stdout)["nodes"]}
    assert plans == {n: {"install", "switch", "write", "link"} for n in NODES}
    secret = str(world["tmp"] / "deploy-secret")
    assert {c["detail"] for n in json.loads(p.stdout)["nodes"] for c in n["changes"] if c["path"] == secret} == {
        "mode 644 -> 600"}

    p = run_slurmadm(env, "deploy", "apply", "--wheelhouse", a["wheelhouse"], "--reason", "fresh", "--json",
                     timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["state"] == "done" and {r["node"] for r in out["results"]} == set(NODES)
    # one fleet table: every check folded over the four nodes
    rows = {(r["check"], r["status"]): r["nodes"] for r in out["doctor"]}
    assert rows[("site", "ok")] == "b200-[001-004]" and rows[("nvml", "ok")] == "b200-[001-004]", out["doctor"]
    assert not [r for r in out["doctor"] if r["status"] == "fail"]
    # the hooks are there, and slurm.conf does not run them yet (config apply comes after): a warning
    assert rows[("hooks", "warn")] == "b200-[001-004]", out["doctor"]
    assert set(on_nodes(env, "readlink /opt/slurmadm/current").values()) == {f"releases/{a['release']}"}
    assert set(on_nodes(env, "/opt/slurmadm/current/bin/slurmadm --version").values()) == {
        f"slurmadm, version {a['version']}"}
    assert not Path("/opt/slurmadm").exists()
    assert (world["tmp"] / "deploy-secret").stat().st_mode & 0o777 == 0o600
    assert (world["tmp"] / "deploy-secret").read_text() == SECRET
    audit = run_slurmadm(env, "audit", "log", "--json", "--limit", "200").stdout
    assert "deploy.node" in audit and SECRET not in audit and SECRET not in p.stdout + p.stderr
    # idempotent: nothing left to do, and a second apply changes nothing
    p = run_slurmadm(env, "deploy", "plan", "--wheelhouse", a["wheelhouse"], timeout=300)
    assert p.returncode == 0 and p.stdout.count("up to date") == 1 and "b200-[001-004] (4): up to date" in p.stdout, p.stdout
    # Slurm runs the deployed hooks from now on (config apply of the hook paths)
    p = run_slurmadm(env, "config", "apply", "--reason", "hooks from slurmadm deploy")
    assert p.returncode == 0, p.stdout + p.stderr
    conf = _sh(env, "scontrol", "show", "config").stdout
    assert "/opt/slurmadm/prolog_epilog/prolog.sh" in conf
    before = prolog_runs(dev_cluster)
    job = _sh(env, "sbatch", "--parsable", "-N4", "-t", "2", "--wrap", "true").stdout.strip()
    assert wait_for(lambda: "COMPLETED" in _sh(env, "sacct", "-n", "-X", "-j", job, "-o", "State").stdout,
                    timeout=120, interval=1.0), _sh(env, "scontrol", "show", "job", job, check=False).stdout
    # PrologFlags=DeferBatch: the batch script started only after the prolog passed on all four
    # (with Alloc alone it starts once the batch host's did, and the job can be COMPLETED while
    # the other three still run theirs: seen on 26.05 under load)
    after = prolog_runs(dev_cluster)
    assert all(after[n] > before[n] for n in NODES), (before, after)
    assert not drained(env)


def test_upgrade_one_node_fails_its_doctor_jobs_keep_passing_their_prolog(world, dev_cluster):
    env, a, b = world["env"], world["a"], world["b"]
    # this release goes out as one virtualenv built on the head (deploy.install = "tarball"),
    # the fresh one was built on each node: both ways run for real in this module
    data = tomllib.loads(world["site"].read_text())
    data["deploy"]["install"] = "tarball"
    world["site"].write_text(tomli_w.dumps(data))
    # b200-003 cannot reach slurmctld any more (its own scontrol says so): its doctor fails
    fake = dev_cluster.p("nodes", "b200-003", "bin", "scontrol")
    fake.write_text('#!/bin/sh\nif [ "$1" = ping ]; then echo "Slurmctld(primary) at x is DOWN"; exit 1; fi\n'
                    'exec /usr/bin/scontrol "$@"\n')
    fake.chmod(0o755)
    jobs: list[str] = []
    stop = threading.Event()

    def submit() -> None:  # one-node jobs, all the time the upgrade runs
        while not stop.is_set():
            p = _sh(env, "sbatch", "--parsable", "-N1", "-t", "2", "--wrap", "true", check=False)
            if p.returncode == 0:
                jobs.append(p.stdout.strip())
            stop.wait(0.5)

    before = prolog_runs(dev_cluster)
    t = threading.Thread(target=submit, daemon=True)
    t.start()
    try:
        p = run_slurmadm(env, "deploy", "apply", "--wheelhouse", b["wheelhouse"], "--reason", "upgrade", "--json",
                         timeout=900)
    finally:
        stop.set()
        t.join()
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["state"] == "stopped", out["detail"]
    phases = {n["node"]: n["phase"] for n in out["nodes"]}
    assert phases == {"b200-001": "done", "b200-002": "done", "b200-003": "failed", "b200-004": "pending"}
    bad = {r["node"]: r for r in out["results"]}["b200-003"]
    assert bad["reverted"] and bad["release"] == a["release"] and "slurmctld" in bad["error"]
    assert {(r["check"], r["status"], r["nodes"]) for r in out["doctor"]} >= {("slurmctld", "fail", "b200-003")}
    cur = on_nodes(env, "readlink /opt/slurmadm/current")
    assert cur == {"b200-001": f"releases/{b['release']}", "b200-002": f"releases/{b['release']}",
                   "b200-003": f"releases/{a['release']}", "b200-004": f"releases/{a['release']}"}
    # the same status as any rollout
    p = run_slurmadm(env, "fleet", "rollout", "status", out["name"], "--json")
    assert json.loads(p.stdout)["rollouts"][0]["state"] == "stopped"
    # every job submitted during the upgrade passed its prolog and ran
    assert len(jobs) >= 3, jobs

    def finished() -> bool:
        states = _sh(env, "sacct", "-n", "-X", "-P", "-j", ",".join(jobs), "-o", "JobID,State").stdout.split()
        return len(states) >= len(jobs) and all(s.endswith("|COMPLETED") for s in states)

    assert wait_for(finished, timeout=180, interval=2.0), _sh(
        env, "sacct", "-n", "-X", "-P", "-j", ",".join(jobs), "-o", "JobID,State,Restarts,NodeList").stdout
    # no prolog failed: a failed prolog requeues the job, which --duplicates lists as REQUEUED
    every = _sh(env, "sacct", "-n", "-X", "-P", "-D", "-j", ",".join(jobs), "-o", "State").stdout.split()
    assert set(every) == {"COMPLETED"} and len(every) == len(jobs), sorted(set(every))
    after = prolog_runs(dev_cluster)
    assert sum(after.values()) - sum(before.values()) >= len(jobs), (before, after, len(jobs))
    assert not drained(env)


def test_rollback_and_drift_name_the_node_left_behind(world, dev_cluster):
    env, a, b = world["env"], world["a"], world["b"]
    p = run_slurmadm(env, "fleet", "drift", ",".join(NODES), "--json", timeout=120)
    diffs = {d["fact"]: d for d in json.loads(p.stdout)["drift"]}
    assert "slurmadm" in diffs, diffs.keys()
    p = run_slurmadm(env, "deploy", "rollback", "b200-001,b200-002", "--reason", "back", "--json", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert set(on_nodes(env, "readlink /opt/slurmadm/current").values()) == {f"releases/{a['release']}"}
    # the tarball-made release runs at its node's path (its scripts' #! lines point there)
    got = on_nodes(env, f"head -1 /opt/slurmadm/releases/{b['release']}/bin/slurmadm; "
                        f"/opt/slurmadm/releases/{b['release']}/bin/slurmadm --version")
    assert got["b200-001"] == (f"#!/opt/slurmadm/releases/{b['release']}/bin/python\n"
                               f"slurmadm, version {b['version']}"), got
    p = run_slurmadm(env, "fleet", "drift", ",".join(NODES), "--json", timeout=120)
    facts = [d["fact"] for d in json.loads(p.stdout)["drift"]]
    assert "slurmadm" not in facts and not [f for f in facts if "prolog_epilog" in f], facts
