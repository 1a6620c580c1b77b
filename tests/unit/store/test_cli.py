"""`slurmadm store ...` and the head's reads with a central store (a central SQLite file; the
same commands against MariaDB: tests/integration/test_store_central.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.store import Store, schema
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit


@pytest.fixture()
def site(tmp_path, monkeypatch):
    text = edited(put("store", {"path": f"{tmp_path}/stores/{{node}}.db", "url": f"sqlite://{tmp_path}/central.db",
                                "audit_log": f"{tmp_path}/audit.jsonl", "stale_after_minutes": 10}),
                  put("health.results_log", f"{tmp_path}/health.jsonl"))
    path = tmp_path / "site.toml"
    path.write_text(text)
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    return path


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def node_records(tmp_path, node, *, drain=True):
    with Store(f"{tmp_path}/stores/{node}.db", ship=True) as s:
        with s.transaction() as db:
            db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (time.time(), "r1", node, "prolog", "ecc-uncorrected", "fail" if drain else "pass",
                        "critical", "GPU5 volatile DBE=2", None, 1.0))
        if drain:
            s.audit("node.drain", node, "slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]")


def test_reads_before_migrate_say_what_to_do(site):
    res = run("audit", "log")
    assert res.exit_code == 2
    assert f"schema version 0, this slurmadm needs {schema.SCHEMA_VERSION}: run `slurmadm store migrate`" in res.output


def test_migrate_dry_run_changes_nothing_then_migrates_once_and_audits(site, tmp_path):
    dry = run("store", "migrate", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.output)["applied"] is False
    assert not (tmp_path / "central.db").exists() or run("store", "status", "--json").exit_code == 1
    first = json.loads(run("store", "migrate", "--json").output)
    again = json.loads(run("store", "migrate", "--json").output)
    assert (first["from_version"], first["to_version"], first["applied"]) == (0, schema.SCHEMA_VERSION, True)
    assert again["statements"] == [] and again["applied"] is False
    events = json.loads(run("audit", "log", "--json", "--action", "store.*").output)
    assert [e["action"] for e in events] == ["store.migrate"]


def test_a_nodes_drain_reaches_the_heads_audit_log_and_health_status(site, tmp_path):
    run("store", "migrate")
    node_records(tmp_path, "b200-093")
    node_records(tmp_path, "b200-001", drain=False)
    for node, n in (("b200-093", 2), ("b200-001", 1)):  # what the periodic run starts in the background
        p = subprocess.run([sys.executable, "-I", "-m", "slurmadm.store.ship", "--node", node, "--site", str(site)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["shipped"] == n
    log = json.loads(run("audit", "log", "--json", "--target", "b200-093").output)
    assert [(e["host"], e["action"]) for e in log] == [("b200-093", "node.drain")]
    res = run("health", "status", "--json", "--nodes", "b200-[001,093]")
    assert res.exit_code == 1  # a failing check
    rows = json.loads(res.stdout)
    assert {(r["host"], r["node"], r["status"]) for r in rows} == {("b200-093", "b200-093", "fail"),
                                                                   ("b200-001", "b200-001", "pass")}
    hist = json.loads(run("health", "history", "--json", "--node", "b200-093").output)
    assert [r["host"] for r in hist] == ["b200-093"]


def test_silent_nodes_are_reported(site, tmp_path):
    run("store", "migrate")
    node_records(tmp_path, "b200-001", drain=False)
    run("store", "ship", "--node", "b200-001")
    res = CliRunner().invoke(cli, ["store", "status", "--json"])
    out = json.loads(res.stdout)
    assert res.exit_code == 1
    assert "b200-001" not in out["silent"] and "b200-002" in out["silent"]
    assert [h["host"] for h in out["hosts"] if h["host"] == "b200-001"] == ["b200-001"]
    status = CliRunner().invoke(cli, ["health", "status", "--nodes", "b200-[001-004]"])
    assert "b200-[002-004]: no records ever arrived at the central store" in status.stderr


def test_the_head_ships_its_own_records_before_reading(site, tmp_path, monkeypatch):
    run("store", "migrate")
    monkeypatch.setattr("socket.gethostname", lambda: "head-01")
    with Store(f"{tmp_path}/stores/head-01.db", ship=True) as s:
        s.audit("accounts.add-user", "user:ann@p", "site")
    log = json.loads(run("audit", "log", "--json").output)
    assert ("head-01", "accounts.add-user") in {(e["host"], e["action"]) for e in log}


def test_burnin_status_and_calibrate_read_every_hosts_records(site, tmp_path, monkeypatch):
    from slurmadm.burnin import history

    run("store", "migrate")
    monkeypatch.setattr("socket.gethostname", lambda: "head-01")
    with Store(f"{tmp_path}/stores/head-01.db", ship=True) as s:  # the head ran a sweep
        history.start_sweep(s, "20261201-013000", pid=1, host="head-01", actor="root", nodes="b200-[001-002]")
        history.finish_sweep(s, "20261201-013000", status="done", report="/r.html", summary={
            "nodes": [{"node": n, "why": "idle", "verdict": "pass", "job_id": "1", "busbw_gbps": bw, "action": "",
                       "reason": "", "tests": []} for n, bw in (("b200-001", 700.0), ("b200-002", 720.0))],
            "pairs": []})
    with Store(f"{tmp_path}/stores/b200-003.db", ship=True) as s, s.transaction() as db:  # a node's NCCL check
        db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value,"
                   " duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (time.time(), "r", "b200-003", "run", "nccl-allreduce", "pass", "critical", "", 710.0, 1.0))
    assert run("store", "ship", "--node", "b200-003").exit_code == 0
    sweeps = json.loads(run("burnin", "status", "--json").output)
    assert [(s["id"], s["origin"], s["passed"]) for s in sweeps] == [("20261201-013000", "head-01", 2)]
    cal = json.loads(run("health", "calibrate", "--json").output)
    assert cal[0]["nodes"] == 3 and cal[0]["median_gbps"] == 710.0
    assert (cal[0]["from_burnin"], cal[0]["from_health_checks"]) == (2, 1)


def test_ship_dry_run_shows_the_queue_and_ships_nothing(site, tmp_path):
    run("store", "migrate")
    node_records(tmp_path, "b200-093")
    plan = json.loads(run("store", "ship", "--dry-run", "--json", "--node", "b200-093").output)
    assert plan["queued"] == {"check_results": 1, "events": 1}
    assert json.loads(run("audit", "log", "--json", "--host", "b200-093").output) == []
    done = json.loads(run("store", "ship", "--json", "--node", "b200-093").output)
    assert done["shipped"] == 2 and done["remaining"] == 0
    assert json.loads(run("store", "ship", "--dry-run", "--json", "--node", "b200-093").output)["queued"] == {}
