"""The head node sees the whole fleet (issue 14), on the dev cluster's own MariaDB.

The session's dev cluster is switched to per-node stores (stores/<node>.db, as on real hosts)
shipping to a `slurmadm` database and user in its MariaDB, and back to the shared SQLite file
at the end. Slurm itself runs the hooks (Prolog; HealthCheckProgram every 30 s, which starts the
shipper in the background); the head's commands run as `slurmadm` in child processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.store import Store, central
from tests.integration.helpers import health_runs, hook, run_slurmadm, sh
from tests.integration.helpers import slurm_node as node

pytestmark = pytest.mark.integration


def fault(env, name, *args):
    p = run_slurmadm(env, "dev-cluster", "gpu-fault", name, *args)
    assert p.returncode == 0, p.stderr


def local_rows(dc, name, table="check_results"):
    with Store(dc.site().store.local_path(name)) as s:
        store_id = s.query("SELECT value FROM store_info WHERE name = 'store_id'")[0]["value"]
        ids = [r["id"] for r in s.query(f"SELECT rowid AS id FROM {table} ORDER BY rowid")]
        queued = s.query("SELECT count(*) AS n FROM outbox")[0]["n"]
    return store_id, ids, queued


def central_ids(dc, name, store_id, table="check_results", col="id"):
    with central.connected(dc.site().store) as c:
        return [r["i"] for r in c.query(f"SELECT {col} AS i FROM {table} WHERE origin = ? AND store_id = ? "
                                        "ORDER BY seq", (name, store_id))]


def restore(dc, e):
    """Every node healthy, undrained and idle (what an earlier module may have left behind)."""
    sh(e, "scancel", "--full", "-u", "root", check=False)
    for n in dc.nodes():
        fault(e, n, "--clear")
        if node(e, n).drained:
            sh(e, "scontrol", "update", f"nodename={n}", "state=resume")
    assert wait_for(lambda: not sh(e, "squeue", "-h").strip(), 60)


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = dict(os.environ)
    e.update(dev_cluster.env())
    restore(dev_cluster, e)
    dev_cluster.set_central_store(True)
    yield e
    if not dev_cluster.daemon("mariadbd").alive():
        dev_cluster.start_database()
    restore(dev_cluster, e)
    dev_cluster.set_central_store(False)


HOOK_TAGS = ("[prolog]", "[periodic]")


def test_a_prolog_drain_reaches_the_heads_audit_log_and_health_status(dev_cluster, env):
    interval = dev_cluster.site().slurm.health_check_interval
    fault(env, "b200-002", "--gpu", "5", "--kind", "ecc-uncorrected")
    t0 = time.time()
    job = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-002", "--gres=gpu:8", "-J", "victim",
             "--wrap", "true").strip()
    assert wait_for(lambda: node(env, "b200-002").drained, 60, interval=0.5)
    # the victim's prolog drains it, unless the node's periodic HealthCheckProgram ran between the
    # fault and the job (a loaded machine: seen in a full suite); either hook's drain must ship
    hook = next((h for h in HOOK_TAGS if node(env, "b200-002").reason.endswith(h)), None)
    assert hook is not None, node(env, "b200-002").reason
    drained = time.monotonic()

    def arrived():
        p = run_slurmadm(env, "audit", "log", "--json", "--target", "b200-002", "--action", "node.drain")
        assert p.returncode == 0, p.stderr
        return [e for e in json.loads(p.stdout) if e["ts"] >= t0 and e["reason"].endswith(hook)]

    # one periodic interval for the node's HealthCheckProgram to start the shipper, plus room
    # for a loaded machine: polled, not slept
    assert wait_for(arrived, 2 * interval + 60, interval=1), "the drain never reached the central store"
    took = time.monotonic() - drained
    events = arrived()
    assert [e["host"] for e in events] == ["b200-002"]
    assert events[0]["reason"].startswith("slurmadm: ecc-uncorrected: GPU5")
    print(f"drain visible on the head {took:.1f} s after it happened (interval {interval} s)")

    p = run_slurmadm(env, "health", "status", "--json", "--nodes", "b200-002")
    assert p.returncode == 1  # a failing check
    ecc = [r for r in json.loads(p.stdout) if r["check_id"] == "ecc-uncorrected"]
    assert ecc and ecc[0]["status"] == "fail" and ecc[0]["host"] == "b200-002"

    # every node ships from its own periodic runs: none is reported silent
    p = run_slurmadm(env, "store", "status", "--json")
    st = json.loads(p.stdout)
    assert p.returncode == 0 and st["silent"] == {}, p.stdout
    assert {h["host"] for h in st["hosts"]} >= set(dev_cluster.nodes())

    # it came from b200-002's own store, not the head's
    head = socket.gethostname().split(".")[0]
    with Store(dev_cluster.site().store.local_path(head)) as s:
        assert not s.events(target="b200-002", action="node.drain")
    sh(env, "scancel", job)
    fault(env, "b200-002", "--clear")
    sh(env, "scontrol", "update", "nodename=b200-002", "state=resume")


def test_mariadb_down_prologs_unaffected_and_every_record_arrives_once(dev_cluster, env):
    up = [hook(dev_cluster, "prolog.sh", "b200-001") for _ in range(7)]
    assert all(p.returncode == 0 for p, _ in up), [p.stderr for p, _ in up]
    assert dev_cluster.daemon("mariadbd").stop()
    # the worst network: the database port answers TCP but never speaks (a hung server, a
    # firewall that drops), so anything in a prolog that connected would wait out its timeout
    hole = socket.socket()
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hole.bind(("127.0.0.1", dev_cluster.site().store.central().port))
    hole.listen(128)
    try:
        down = [hook(dev_cluster, "prolog.sh", "b200-001") for _ in range(7)]
        assert all(p.returncode == 0 for p, _ in down), [p.stderr for p, _ in down]
        # a job on a healthy node runs while the central store is gone
        out = sh(env, "sbatch", "--parsable", "--wait", "-o", "/dev/null", "-w", "b200-001", "--gres=gpu:8",
                 "--wrap", "true", timeout=120)
        assert out.strip()
        # a fault meanwhile drains as always (Slurm is up) and is recorded locally: the node's
        # HealthCheckProgram run as slurmd runs it (the first test and test_health.py cover Slurm
        # starting it every HealthCheckInterval; its own runs go on meanwhile, harmlessly)
        injected = time.time()
        fault(env, "b200-003", "--gpu", "2", "--kind", "row-remap-failed")
        hc = hook(dev_cluster, "healthcheck.sh", "b200-003")[0]
        assert hc.returncode == 0, hc.stderr
        assert node(env, "b200-003").reason.startswith("slurmadm: row-remap"), \
            (node(env, "b200-003"), hc.stdout, hc.stderr, health_runs(dev_cluster, "b200-003", injected))
        # what the nodes recorded meanwhile waits in their queues
        assert all(local_rows(dev_cluster, n)[2] for n in ("b200-001", "b200-003"))
        p = run_slurmadm(env, "audit", "log")
        assert p.returncode == 3 and "central store" in p.stderr  # the head says where the problem is
    finally:
        hole.close()
        dev_cluster.start_database()
    med_up, med_down = statistics.median(t for _, t in up), statistics.median(t for _, t in down)
    print(f"prolog median: {med_up * 1000:.0f} ms with MariaDB up, {med_down * 1000:.0f} ms with it hung")
    # a prolog that touched the network would wait connect_timeout_s (5 s) here; the margin is load
    assert med_down <= 2 * med_up + 1.0, (med_up, med_down)

    # the periodic runs ship the backlog in the background: each node's, run here as slurmd runs
    # it (a shipper still stuck on the hole holds its node's lock until it fails: then Slurm's
    # next periodic run starts the one that ships); then every record is there once
    for n in dev_cluster.nodes():
        assert hook(dev_cluster, "healthcheck.sh", n)[0].returncode == 0

    def drained_queues():
        return all(local_rows(dev_cluster, n)[2] == 0 for n in dev_cluster.nodes())

    assert wait_for(drained_queues, 2 * dev_cluster.site().slurm.health_check_interval + 90, interval=0.5)
    for n in dev_cluster.nodes():
        for table in ("check_results", "events"):
            store_id, ids, _ = local_rows(dev_cluster, n, table)
            got = central_ids(dev_cluster, n, store_id, table)
            upto = [i for i in got if i <= ids[-1]] if ids else []
            assert upto == ids, (n, table, len(upto), len(ids))  # all there, once each, in order
    with central.connected(dev_cluster.site().store) as c:
        drains = c.query("SELECT origin, reason FROM events WHERE action = 'node.drain' AND target = 'b200-003'")
    assert drains and drains[-1]["origin"] == "b200-003" and "row-remap" in drains[-1]["reason"]
    fault(env, "b200-003", "--clear")
    sh(env, "scontrol", "update", "nodename=b200-003", "state=resume")


def test_two_hosts_shipping_at_once_and_one_killed_midway_lose_and_double_nothing(dev_cluster, env):
    site = dev_cluster.site()
    total = 30_000
    hosts = ("shiptest-a", "shiptest-b")  # not Slurm nodes: no periodic shipper races these two
    for h in hosts:
        with Store(site.store.local_path(h), ship=True) as s, s.transaction() as db:
            db.executemany(
                "INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value, "
                "duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [(time.time(), f"r{i // 14}", h, "periodic", f"check-{i % 14}", "pass", "critical", "ok", None, 1.0)
                 for i in range(total)])

    def shipper(h):
        return subprocess.Popen([sys.executable, "-I", "-m", "slurmadm.store.ship", "--node", h, "--site",
                                 str(dev_cluster.site_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def arrived(h):
        with central.connected(site.store) as c:
            return c.query("SELECT count(*) AS n FROM check_results WHERE origin = ?", (h,))[0]["n"]

    a, b = shipper(hosts[0]), shipper(hosts[1])
    assert wait_for(lambda: arrived(hosts[0]) > 0 or a.poll() is not None, 60, interval=0.02)
    a.send_signal(signal.SIGKILL)
    a.wait(30)
    out_b, err_b = b.communicate(timeout=300)
    assert b.returncode == 0, err_b
    partial = arrived(hosts[0])
    assert 0 < partial < total, f"the shipper was not killed midway ({partial} of {total} had arrived)"

    again = shipper(hosts[0])
    out_a, err_a = again.communicate(timeout=300)
    assert again.returncode == 0, err_a
    for h in hosts:
        store_id, ids, queued = local_rows(dev_cluster, h)
        assert queued == 0
        assert central_ids(dev_cluster, h, store_id) == ids  # every row once, in order
    assert json.loads(out_a)["shipped"] >= total - partial


def test_migrate_is_a_no_op_when_current_and_a_newer_schema_is_refused(dev_cluster, env):
    p = run_slurmadm(env, "store", "migrate", "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["from_version"] == plan["to_version"] and plan["statements"] == []
    store = dev_cluster.site().store
    with central.connected(store) as c:
        c.execute("UPDATE schema_info SET value = '99' WHERE name = 'version'")
        c.commit()
    try:
        p = run_slurmadm(env, "audit", "log")
        assert p.returncode == 2
        assert "schema version 99 is newer than this slurmadm" in p.stderr and "upgrade slurmadm" in p.stderr
        assert len(p.stderr.strip().splitlines()) <= 2  # one line (and the head's own not-shipped warning)
        p = run_slurmadm(env, "store", "ship", "--node", "shiptest-c")  # no periodic shipper holds its lock
        assert p.returncode == 2 and "newer than this slurmadm" in p.stderr
    finally:
        with central.connected(store) as c:
            c.execute("UPDATE schema_info SET value = ? WHERE name = 'version'", (str(central.schema.SCHEMA_VERSION),))
            c.commit()
    password = open(store.password_file).read().strip()
    for args in (("store", "status", "--json"), ("audit", "log", "--json", "--limit", "5")):
        p = run_slurmadm(env, *args)
        assert p.returncode in (0, 1) and password not in p.stdout + p.stderr


def test_the_head_exporter_shows_every_nodes_records_from_mariadb(dev_cluster, env):
    """Issue 13/14: the head exporter's health, burn-in and drift metrics come from the central
    store. A prolog on b200-001 fails a GPU check and b200-003 has a burn-in verdict, each written
    on that node's own store; Slurm's periodic runs ship them; the head's exporter (a real
    `slurmadm exporter --mode head` process) shows them and every node's arrival, none of which
    the head's own store file holds. (Drift counts come from the same latest-verdict read:
    tests/unit/monitor/test_exporter.py.)"""
    from slurmadm.devcluster.devsite import Ports
    from slurmadm.exporter.storefacts import LocalStoreFacts
    from tests.unit.monitor.test_exporter import value

    site = dev_cluster.site()
    interval = site.slurm.health_check_interval
    fault(env, "b200-001", "--gpu", "3", "--kind", "ecc-uncorrected")
    p, _ = hook(dev_cluster, "prolog.sh", "b200-001")
    assert p.returncode != 0  # the node fault fails the prolog (and drains the node)
    with Store(site.store.local_path("b200-003"), ship=True) as s, s.transaction() as db:
        db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, ts) VALUES (?, 'b200-003', 'idle', "
                   "'fail', ?)", (f"it-{time.time():.0f}", 1_700_000_000.0))
    port = Ports(dev_cluster.record()["port_base"]).monitor_head_exporter + 5  # beside the monitor stack's ports
    exporter = subprocess.Popen([sys.executable, "-m", "slurmadm", "exporter", "--mode", "head", "--listen",
                                 f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def scrape() -> str:
            import urllib.request

            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    return r.read().decode()
            except OSError:
                assert exporter.poll() is None, exporter.stderr.read().decode()[-600:]
                return ""

        def shows() -> bool:
            text = scrape()
            try:
                return (value(text, "slurmadm_store_check_failing", node="b200-001", check="ecc-uncorrected") == 1
                        and value(text, "slurmadm_burnin_last_timestamp_seconds", node="b200-003",
                                  verdict="fail") == 1_700_000_000.0
                        and all(value(text, "slurmadm_store_host_last_arrival_timestamp_seconds", host=n) > 0
                                for n in dev_cluster.nodes()))
            except KeyError:
                return False
        # the periodic runs ship in the background: the two nodes' run here as slurmd runs them
        # (Slurm's own, every `interval` s, would do as well, later), then polled
        for n in ("b200-001", "b200-003"):
            assert hook(dev_cluster, "healthcheck.sh", n)[0].returncode == 0
        assert wait_for(shows, 2 * interval + 90, interval=0.5), scrape()[-3000:]
        text = scrape()
        assert value(text, "slurmadm_store_node_checks_failing", node="b200-001") >= 1
        assert value(text, "slurmadm_store_silent_nodes") == 0
        assert value(text, "slurmadm_exporter_source_stale", source="store") == 0
        # none of it is in the head's own store file
        head_store = LocalStoreFacts(site.store.local_path(socket.gethostname().split(".")[0])).read()
        assert "b200-001" not in head_store["failing"] and "b200-003" not in head_store["burnin"]
    finally:
        exporter.terminate()
        exporter.wait(10)
        fault(env, "b200-001", "--clear")
        sh(env, "scontrol", "update", "nodename=b200-001", "state=resume", check=False)


def test_a_threshold_replayed_on_every_nodes_stored_values_in_mariadb(dev_cluster, env):
    """`health observe --what-if` (issue-less ask 8: a new threshold tried on the fleet's history)
    reads every node's thermal runs from MariaDB, as Slurm's periodic runs shipped them: the
    stand-in GPUs run at 35-45 C, so a 30 C limit would have drained every node and the site's
    own (87 C) none; each node's worst value is its hottest GPU's reading."""
    nodes = set(dev_cluster.nodes())

    def replay(limit: str) -> dict:
        p = run_slurmadm(env, "health", "observe", "--since", "2h", "--what-if", f"max_gpu_temp_c={limit}", "--json")
        assert p.returncode == 0, p.stderr
        (row,) = json.loads(p.stdout)
        return row

    # the periodic runs ship in the background: polled until every node's runs are there
    assert wait_for(lambda: set(replay("30")["would_drain"]) >= nodes, 2 * dev_cluster.site().slurm
                    .health_check_interval + 90, interval=1), replay("30")
    hot = replay("30")
    assert hot["check_id"] == "thermal" and hot["current"] == [87.0] and hot["drains_now"] == []
    assert all(35 <= n["worst"] <= 45 and n["would_fail"] == n["runs"] >= 1 for n in hot["nodes"]), hot["nodes"]
    site = replay("87")
    # the periodic runs keep shipping between the two reads: the count can only grow
    assert site["would_drain"] == [] and site["nodes_seen"] == hot["nodes_seen"] and site["runs"] >= hot["runs"]
    assert site["nodes"] == [], site["nodes"]  # listed only when over a threshold, proposed or current
