"""`slurmadm health` read commands and usage errors (CliRunner; store filled with plain rows)."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.store import Store
from tests.unit.siteedit import put, site_file

pytestmark = pytest.mark.unit



@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    path = site_file(tmp_path, monkeypatch, put("health.results_log", str(tmp_path / "health.jsonl")))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    return path


def add(site_path, node, check_id, status, value=None, detail="x", ts=None, context="periodic"):
    with Store(tomllib.loads(site_path.read_text())["store"]["path"]) as store, store.transaction() as db:
        db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value,"
                   " duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (ts or time.time(), "r", node, context, check_id, status, "critical", detail, value, 1.0))


def invoke(*args):
    return CliRunner().invoke(cli, ["health", *args])


def test_checks_lists_the_action_table_with_site_overrides(site):
    r = invoke("checks", "--json")
    assert r.exit_code == 0, r.output
    rows = {x["id"]: x for x in json.loads(r.output)}
    assert rows["ecc-uncorrected"]["on_fail"] == "drain" and rows["ecc-uncorrected"]["severity"] == "critical"
    assert rows["persistence-mode"]["on_fail"] == "warn" and rows["persistence-mode"]["contexts"] == ["periodic", "run"]
    assert rows["gpu-processes"]["contexts"] == ["epilog"]
    assert rows["nccl-allreduce"]["timeout_s"] == 120.0


def test_status_shows_latest_per_check_and_exits_1_on_failure(site):
    add(site, "b200-001", "xid", "fail", ts=time.time() - 100)
    add(site, "b200-001", "xid", "pass")
    add(site, "b200-002", "ecc-uncorrected", "pass")
    r = invoke("status", "--json")
    assert r.exit_code == 0
    assert {(x["node"], x["check_id"], x["status"]) for x in json.loads(r.output)} == {
        ("b200-001", "xid", "pass"), ("b200-002", "ecc-uncorrected", "pass")}
    add(site, "b200-002", "ecc-uncorrected", "fail", detail="GPU5 volatile uncorrected ECC=2 [x]")
    r = invoke("status")
    assert r.exit_code == 1 and "ECC=2 [x]" in r.output  # printed as text, not rich markup
    assert invoke("status", "--nodes", "b200-[001-400]").exit_code == 2


def test_history_filters(site):
    add(site, "b200-001", "xid", "fail")
    add(site, "b200-001", "xid", "pass")
    add(site, "b200-002", "xid", "pass")
    r = invoke("history", "--node", "b200-001", "--status", "fail", "--json")
    assert [(x["node"], x["status"]) for x in json.loads(r.output)] == [("b200-001", "fail")]
    r = invoke("history", "--check", "ecc", "--json")
    assert r.exit_code == 2 and "unknown check id 'ecc'" in r.output


def test_calibrate_median_of_each_nodes_latest_result(site):
    for i, bw in enumerate([700.0, 720.0, 740.0, 760.0, 200.0], start=1):
        add(site, f"b200-{i:03d}", "nccl-allreduce", "pass" if bw > 300 else "fail", value=bw, ts=time.time() - 50)
    add(site, "b200-001", "nccl-allreduce", "pass", value=710.0)  # the newer result of b200-001 counts
    r = invoke("calibrate", "--json")
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.output)
    # b200-005's failing 200 GB/s is left out; b200-001 counts with its newer 710
    assert row["model"] == "b200" and row["nodes"] == 4 and row["median_gbps"] == 730.0
    assert row["suggested_floor_gbps"] == 620.5 and row["current_floor_gbps"] == 300.0
    assert invoke("calibrate", "--model", "h100").exit_code == 2


def test_calibrate_takes_burnin_sweeps_as_the_fleet_collection(site):
    """On a cluster whose nodes keep local stores, the head node's store holds the nightly sweeps'
    per-node all-reduce: calibrate counts those too, newest result per node whichever source."""
    from slurmadm.burnin import history  # noqa: F401  (the burn-in tables)

    now = time.time()
    with Store(tomllib.loads(site.read_text())["store"]["path"]) as store, store.transaction() as db:
        for node, verdict, bw, age in [("b200-010", "pass", 800.0, 20), ("b200-011", "pass", 820.0, 20),
                                       ("b200-012", "fail", 100.0, 20), ("b200-001", "pass", 900.0, 10)]:
            db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, busbw, ts) VALUES (?,?,?,?,?,?)",
                       ("20261129-013000", node, "idle", verdict, bw, now - age))
    add(site, "b200-001", "nccl-allreduce", "pass", value=700.0, ts=now - 50)  # older than its sweep
    add(site, "b200-002", "nccl-allreduce", "pass", value=780.0, ts=now - 5)
    r = invoke("calibrate", "--json")
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.output)
    # b200-001 900 (burn-in, newer), 002 780 (health), 010 800, 011 820; 012 failed: left out
    assert row["nodes"] == 4 and row["median_gbps"] == 810.0 and row["min_gbps"] == 780.0
    assert row["from_burnin"] == 3 and row["from_health_checks"] == 1


def test_calibrate_without_results_says_what_to_do(site):
    r = invoke("calibrate")
    assert r.exit_code == 1 and "no NCCL all-reduce results yet" in r.output


def test_run_with_unknown_check_is_one_line(site):
    r = invoke("run", "--node", "b200-001", "--checks", "ecc,xid")
    assert r.exit_code == 2 and r.output.strip().count("\n") == 0 and "unknown check id(s) ecc" in r.output


def test_run_for_a_node_outside_the_site(site):
    r = invoke("run", "--node", "gpu-999")
    assert r.exit_code == 2 and "'gpu-999' is not one of the site's nodes" in r.output
