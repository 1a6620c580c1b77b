"""Least privilege (issue 24, docs/SECURITY.md), on the dev cluster's own MariaDB.

The session's dev cluster is switched to per-node stores shipping to MariaDB, each fake node as
its own account (store.node_user, granted by `store grants` through the head's account), and
back at the end. The periodic hook that Slurm runs ships each node's runs in the background;
this module then plays root on b200-001: it connects with b200-001's password and tries to
write, rewrite and erase other hosts' records, and checks that MariaDB refuses or re-labels it
and that the head's readers (health history, the webhook's clean-run count, `audit verify`)
are not fooled.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.errors import UnreachableError
from slurmadm.store import central, read
from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration

ME, VICTIM = "b200-001", "b200-002"


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = dict(os.environ)
    e.update(dev_cluster.env())
    dev_cluster.set_central_store(True)
    yield e
    dev_cluster.set_central_store(False)


def head(dc):
    return central.connected(dc.site().store)


def as_node(dc, name=ME):
    return central.connected(dc.site().store, node=name)


def own_rows_arrived(dc, name):
    with head(dc) as c:
        return c.query("SELECT count(*) AS n FROM check_results WHERE origin = ? AND node = ?", (name, name))[0]["n"]


def test_nodes_ship_as_their_own_accounts_which_can_do_nothing_else(dev_cluster, env):
    # Slurm's HealthCheckProgram (every 30 s) ships each node's run as that node's account
    assert wait_for(lambda: own_rows_arrived(dev_cluster, ME) and own_rows_arrived(dev_cluster, VICTIM), 120,
                    interval=1.0), "no periodic health run arrived from the nodes' own accounts"
    with as_node(dev_cluster) as c:
        grants = [next(iter(r.values())) for r in c.query("SHOW GRANTS")]
        assert not any("DELETE" in g or "ALL PRIVILEGES" in g or "GRANT OPTION" in g for g in grants), grants
        for sql in ("DELETE FROM events", "DELETE FROM check_results", "UPDATE events SET reason = 'nothing'",
                    f"UPDATE check_results SET status = 'pass' WHERE node = '{VICTIM}'",
                    "DROP TABLE events", "TRUNCATE TABLE events", "SELECT count(*) FROM events"):
            with pytest.raises(UnreachableError, match="denied"):
                c.execute(sql)
            c.rollback()
    # the doctor, on the node, agrees; and warns on the head's account shared by every node
    p = run_slurmadm(env, "doctor", "--node", ME, "--check", "store-privileges", "--json", timeout=180)
    (f,) = json.loads(p.stdout)["findings"]
    assert f["status"] == "ok" and f["data"]["account"] == f"slurmadm-{ME}", f
    p = run_slurmadm(env, "doctor", "--check", "store-privileges", "--json", timeout=180)  # on the head
    (f,) = json.loads(p.stdout)["findings"]
    assert f["status"] == "ok" and not f["data"]["missing"], f


def test_rows_forged_from_one_nodes_account_are_relabelled_refused_or_ignored(dev_cluster, env):
    now = time.time()
    with as_node(dev_cluster) as c:
        # three "clean periodic runs" of the victim, claimed to come from the victim
        c.executemany("INSERT INTO check_results (origin, store_id, id, ts, run_id, node, context, check_id, status, "
                      "severity, detail, value, duration_ms) VALUES (?, 'forged', ?, ?, ?, ?, 'periodic', "
                      "'gpu-count', 'pass', 'critical', 'forged', NULL, 1)",
                      [(VICTIM, 900000 + i, now + i, f"forged-{i}", VICTIM) for i in range(3)])
        # an audit event in the head's name, and a heartbeat for the victim
        c.execute("INSERT INTO events (origin, store_id, id, ts, actor, action, target, reason, detail, prev_hash, "
                  "hash) VALUES ('head', 'forged', 1, ?, 'root', 'node.resume', ?, 'forged', '{}', '', '')",
                  (now, VICTIM))
        c.execute("INSERT INTO hosts (host, last_arrival, records, version) VALUES (?, ?, 0, 'x') "
                  "ON DUPLICATE KEY UPDATE last_arrival = VALUES(last_arrival)", (VICTIM, now + 3600))
        c.commit()
    with head(dev_cluster) as h:  # a row of the victim's own (the head may write any)
        h.execute("INSERT INTO node_state (origin, node, `key`, value, ts) VALUES (?, ?, 'drill', '1', 0) "
                  "ON DUPLICATE KEY UPDATE value = '1'", (VICTIM, VICTIM))
        h.commit()
    with as_node(dev_cluster) as c:
        # the trigger refuses the forger's update of another origin's row
        with pytest.raises(UnreachableError, match="may change only its own rows"):
            c.execute("UPDATE node_state SET value = '99' WHERE origin = ? AND `key` = 'drill'", (VICTIM,))
        c.rollback()
        # and its upsert "of the victim's row" lands as a row of its own
        c.execute("INSERT INTO node_state (origin, node, `key`, value, ts) VALUES (?, ?, 'drill', '99', 0) "
                  "ON DUPLICATE KEY UPDATE value = VALUES(value)", (VICTIM, VICTIM))
        c.commit()
    with head(dev_cluster) as c:
        assert {(r["origin"], r["value"]) for r in c.query("SELECT origin, value FROM node_state WHERE `key` = "
                                                         "'drill'")} == {(VICTIM, "1"), (ME, "99")}
        forged = c.query("SELECT DISTINCT origin FROM check_results WHERE store_id = 'forged'")
        assert forged == [{"origin": ME}]  # MariaDB recorded who shipped them, not the claim
        assert c.query("SELECT origin FROM events WHERE store_id = 'forged'") == [{"origin": ME}]
        hosts = {r["host"]: r["last_arrival"] for r in c.query("SELECT host, last_arrival FROM hosts")}
        assert hosts.get(VICTIM, 0) < now + 3600  # the victim's heartbeat is not the forger's to write
        r = read.Reader(c, central=True, host="head")
        assert not [x for x in read.history(r, node=VICTIM, limit=100000) if x["run_id"].startswith("forged")]

        @contextmanager
        def results():
            yield read.Reader(c, central=True, host="head")

        from slurmadm.monitor.webhook import Isolator

        iso = Isolator(site=dev_cluster.site(), backend=None, store_factory=None, results_factory=results)
        own = iso.clean_runs_since(VICTIM, now - 0.5)
        assert own == 0  # the forged runs (after now) do not count; the victim's own arrive later


def test_audit_verify_finds_an_event_removed_in_the_middle(dev_cluster, env):
    for i in range(3):  # three events on the head, shipped as the head by the reader
        p = run_slurmadm(env, "store", "migrate", "--reason", f"verify drill {i}")
        assert p.returncode == 0, p.stderr
        with _local(dev_cluster) as s:
            s.audit("test.verify", "drill", f"event {i}")
    p = run_slurmadm(env, "audit", "verify", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["central"] and out["ok"], out
    origins = {c["origin"] for c in out["chains"]}
    assert ME in origins  # the nodes' hook events are chained too
    with head(dev_cluster) as c:
        (mid,) = c.query("SELECT origin, store_id, id FROM events WHERE action = 'test.verify' AND reason = 'event 1'")
        # the head's account may prune, nobody may edit
        with pytest.raises(UnreachableError, match="append-only"):
            c.execute("UPDATE events SET reason = 'nothing' WHERE id = ?", (mid["id"],))
        c.rollback()
        c.execute("DELETE FROM events WHERE origin = ? AND store_id = ? AND id = ?",
                  (mid["origin"], mid["store_id"], mid["id"]))
        c.commit()
    # the head's retention job (nothing that old here): its statements run on MariaDB
    p = run_slurmadm(env, "store", "prune", "--older-than-days", "36500", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["applied"], p.stderr
    p = run_slurmadm(env, "audit", "verify", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 1 and not out["ok"]
    bad = [(c["origin"], pr["kind"], pr["id"]) for c in out["chains"] for pr in c["problems"]]
    assert bad == [(mid["origin"], "gap", mid["id"] + 1)], bad


def test_store_grants_prints_the_statements_without_a_password(dev_cluster, env):
    sec = dev_cluster.site().store
    secret = open(sec.node_password_path(ME)).read().strip()
    p = run_slurmadm(env, "store", "grants")
    assert p.returncode == 0, p.stderr
    assert f"GRANT INSERT ON `slurmadm`.`events` TO '{sec.node_account(ME)}'@'127.0.0.1';" in p.stdout
    assert secret not in p.stdout + p.stderr
    p = run_slurmadm(env, "store", "grants", "--apply", "--reason", "test")
    assert p.returncode == 0, p.stderr
    assert secret not in p.stdout + p.stderr
    log = open(sec.audit_log).read() if sec.audit_log else ""
    assert "store.grants" in log and secret not in log


@contextmanager
def _local(dc):
    from slurmadm.store import Store

    with Store.for_site(dc.site()) as s:
        yield s


def test_the_head_exporter_on_the_dev_cluster_answers_only_over_tls_with_its_user(dev_cluster, env, tmp_path):
    """The real `slurmadm exporter --mode head` process with an exporter-toolkit web config."""
    import socket
    import subprocess
    import sys

    import bcrypt
    import yaml

    from slurmadm.devcluster.redfish_emulator import make_certificate

    make_certificate(tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem")
    (tmp_path / "web.yml").write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "cert.pem", "key_file": "key.pem"},
        "basic_auth_users": {"prometheus": bcrypt.hashpw(b"s3cret-scrape", bcrypt.gensalt(rounds=6)).decode()}}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", "exporter", "--mode", "head", "--listen",
                             f"127.0.0.1:{port}", "--web-config-file", str(tmp_path / "web.yml")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def curl(*args):
        return subprocess.run(["curl", "-s", "--max-time", "20", "--cacert", str(tmp_path / "ca.pem"), *args,
                               f"https://127.0.0.1:{port}/metrics"], capture_output=True, text=True, timeout=60)

    try:
        assert wait_for(lambda: proc.poll() is not None or curl("-o", "/dev/null").returncode == 0, 60), \
            "the head exporter never answered"
        assert proc.poll() is None, proc.stderr.read()
        assert "slurmadm_" in curl("-u", "prometheus:s3cret-scrape").stdout
        assert curl("-o", "/dev/null", "-w", "%{http_code}").stdout == "401"
        assert curl("-o", "/dev/null", "-w", "%{http_code}", "-u", "prometheus:nope").stdout == "401"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_jobs_environment_and_planted_files_do_not_steer_slurms_prolog(dev_cluster, env, tmp_path):
    """Slurm's own Prolog on the dev cluster, for a job that exports a hostile environment and
    after files were planted where a job user can write (its directory, /tmp, /dev/shm): the
    faulty node is still drained by the prolog, and none of the planted code runs as root."""
    import shutil
    from pathlib import Path

    from tests.integration.helpers import sh, slurm_node

    name = "b200-003"
    mark = tmp_path / "shadow-ran"
    shadow = f"open({str(mark)!r}, 'w').write('ran')\n"
    places = [tmp_path / "job", Path("/tmp") / f"slurmadm-i24-{os.getpid()}", Path("/dev/shm") / f"slurmadm-i24-{os.getpid()}"]
    for d in places:
        for f in ("slurmadm/__init__.py", "slurmadm/health/__init__.py", "slurmadm/health/__main__.py",
                  "sitecustomize.py"):
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text(shadow)
    os.chmod(tmp_path, 0o755)
    hostile = ",".join([f"PYTHONPATH={places[1]}", f"PYTHONSTARTUP={places[1]}/sitecustomize.py",
                        f"TMPDIR={places[2]}", f"SLURMADM_SITE={places[0]}/site.toml", "SLURMADM_ACTOR=mallory"])
    job = ""
    try:
        t0 = time.time()
        r = run_slurmadm(env, "dev-cluster", "gpu-fault", name, "--gpu", "1", "--kind", "ecc-uncorrected")
        assert r.returncode == 0, r.stderr
        job = sh(env, "sbatch", "--parsable", f"--export=ALL,{hostile}", "-D", str(places[0]), "-w", name,
                 "--gres=gpu:8", "-o", "/dev/null", "--wrap", "true").strip()
        assert wait_for(lambda: slurm_node(env, name).drained, 90, interval=0.5)
        info = slurm_node(env, name)
        assert info.reason.startswith("slurmadm: ecc-uncorrected: GPU1") and info.reason.endswith("[prolog]"), \
            info.reason
        assert not mark.exists()
        from slurmadm.store import Store

        with Store(dev_cluster.site().store.local_path(name)) as s:  # the node's own record of the drain
            drains = [e for e in s.events(action="node.drain", target=name) if e.ts >= t0]
        assert drains and all(e.actor != "mallory" for e in drains), drains
    finally:
        if job:
            sh(env, "scancel", job, check=False)
        run_slurmadm(env, "dev-cluster", "gpu-fault", name, "--clear")
        if slurm_node(env, name).drained:
            sh(env, "scontrol", "update", f"nodename={name}", "state=resume", check=False)
        for d in places[1:]:
            shutil.rmtree(d, ignore_errors=True)
