"""Stragglers on the real dev cluster (issue 28): the stand-in straggler fault makes one node's
burn-in stress and single-node all-reduce slower without failing any check; a sweep over all
nodes finds it slow and holds it out of service for a re-test (`burnin-suspect`), the next
sweep re-tests it, finds it slow again and drains it `burnin-straggler` through scontrol, and
once the fault is cleared a clean sweep re-qualifies and resumes it.

The dev site leaves fleet verdicts off; this test runs the sweeps with a copy of it that turns them
on for the one metric the machine's load does not move: the stand-in GPUs' matmul rate
(`stress-tflops`: 1,000 TFLOPS less a GPU's `slow` fault, burnin/node.py), judged with the site
model's default thresholds. The CPU stand-in's own rate and the all-reduces of four concurrent
gloo jobs on two cores vary 2x from contention alone (tests/unit/burnin/test_fleet.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster.daemons import wait_for
from tests.integration.helpers import run_slurmadm
from tests.integration.test_burnin import NODES, burnin, burnin_env, clean, node_states, settled  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

SLOW = "b200-003"


def straggler_site(dev_cluster, tmp_path):
    data = tomllib.loads(dev_cluster.site_path.read_text())
    # the model's default thresholds (warn 92%, slow 85%, mad_k 3): the three healthy nodes agree
    # exactly (MAD 0), so the share decides, and GPU 0 at 30% of the rate is far past the slow line
    data["burnin"]["straggler"] = {"enabled": True, "min_nodes": 4, "metrics": ["stress-tflops"],
                                   "drain_after": 2}
    path = tmp_path / "site-straggler.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def record(summary: dict) -> None:
    """$SLURMADM_RECORD_DIR set: keep the sweep's summary (how tests/fixtures/burnin/sweep-straggler.json
    was made)."""
    d = os.environ.get("SLURMADM_RECORD_DIR")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        (Path(d) / "sweep-straggler.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


def sweep(env) -> dict:
    try:  # a loaded CI machine can take minutes per sweep; what it was doing is kept if it hangs
        res = burnin(env, "run", "--json", timeout=600)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr
        raise AssertionError(f"sweep still running after {exc.timeout} s; its progress:\n{err}") from None
    assert res.returncode in (0, 1), res.stderr + res.stdout
    return json.loads(res.stdout)


def held_now(env) -> list[tuple[str, str, str]]:
    """`slurmadm burnin held --json`: (node, kind, check id) of what burn-in holds now."""
    res = burnin(env, "held", "--json")
    assert res.returncode == 0, res.stderr
    return [(r["node"], r["kind"], r["check_id"]) for r in json.loads(res.stdout)]


def test_a_straggler_warns_then_is_drained_and_a_clean_sweep_resumes_it(burnin_env, dev_cluster, tmp_path):
    clean(burnin_env)
    env = {**burnin_env, "SLURMADM_SITE": str(straggler_site(dev_cluster, tmp_path))}
    assert burnin(env, "baseline", "reset", "--reason", "straggler test").returncode == 0
    fault = run_slurmadm(env, "dev-cluster", "gpu-fault", SLOW, "--gpu", "0", "--kind", "slow", "--value", "70")
    assert fault.returncode == 0, fault.stderr
    try:
        # 1: every check passes, the node is slow against the fleet: held for the next sweep's re-test
        s1 = sweep(env)
        by = {n["node"]: n for n in s1["nodes"]}
        assert s1["exit_code"] == 0 and {n["verdict"] for n in s1["nodes"]} == {"pass"}, s1
        shares = {n: by[n]["fleet"]["metrics"]["stress-tflops"]["share"] for n in NODES}
        assert by[SLOW]["fleet"]["level"] == "slow" and shares == {n: 0.3 if n == SLOW else 1.0 for n in NODES}, shares
        held = ("slurmadm: burnin-suspect: stress-tflops 300 = 30% of fleet median 1000 (slow in 1 sweep of 2; "
                "held for the next sweep's re-test) [burnin]")
        assert (by[SLOW]["slow_streak"], by[SLOW]["action"], by[SLOW]["reason"]) == (1, "held for a re-test", held)
        assert all(by[n]["action"] == "" for n in NODES if n != SLOW)
        tests = {t["test"]: t for t in by[SLOW]["tests"]}
        assert all("stand-in straggler: reported 70% slower" in tests[t]["detail"] for t in ("stress", "allreduce-node"))
        assert tests["allreduce-node"]["status"] == "pass"
        state, shown = settled(burnin_env)[SLOW]
        assert state.startswith("drain") and shown == held
        assert all(settled(burnin_env)[n][0] == "idle" for n in NODES if n != SLOW)
        status = json.loads(burnin(env, "status", "--json").stdout)[0]
        assert status["id"] == s1["sweep_id"] and status["stragglers"] == [SLOW]
        assert held_now(env) == [(SLOW, "suspect", "burnin-suspect")]  # `burnin held`, from Slurm
        html = open(s1["report"]).read()
        assert "1 straggler" in html and f"dist-{dev_cluster.site().node_group_of[SLOW].profile}-stress-tflops" in html

        # 2: re-tested (its own drain), slow again: drained with the straggler reason
        s2 = sweep(env)
        record(s2)
        by = {n["node"]: n for n in s2["nodes"]}
        assert by[SLOW]["why"] == "requalify" and by[SLOW]["prior_reason"] == held
        assert s2["exit_code"] == 1 and by[SLOW]["action"] == "drained" and by[SLOW]["slow_streak"] == 2
        reason = by[SLOW]["reason"]
        assert re.fullmatch(r"slurmadm: burnin-straggler: stress-tflops 300 = 30% of fleet median 1000 "
                            r"\[burnin\]", reason), reason
        state, shown = settled(burnin_env)[SLOW]
        assert state.startswith("drain") and shown == reason
        assert all(by[n]["action"] == "" for n in NODES if n != SLOW)
        assert held_now(env) == [(SLOW, "straggler", "burnin-straggler")]
    finally:
        run_slurmadm(env, "dev-cluster", "gpu-fault", SLOW, "--clear", "--kind", "slow")
    # 3: fault cleared: the next sweep re-qualifies it (our own drain) and resumes it
    try:
        s3 = sweep(env)
        by = {n["node"]: n for n in s3["nodes"]}
        assert by[SLOW]["why"] == "requalify" and by[SLOW]["prior_reason"] == reason
        assert by[SLOW]["fleet"]["level"] != "slow" and by[SLOW]["action"] == "resumed", by[SLOW]
        assert s3["exit_code"] == 0
        assert settled(burnin_env)[SLOW][0] == "idle"
        hist = json.loads(burnin(env, "history", SLOW, "--json").stdout)["sweeps"]
        assert [h["sweep_id"] for h in hist[:3]] == [s3["sweep_id"], s2["sweep_id"], s1["sweep_id"]]
        assert [h["fleet"]["level"] == "slow" for h in hist[:3]] == [False, True, True]
    finally:
        burnin(env, "baseline", "reset", "--reason", "straggler test done")
        clean(burnin_env)


def test_a_busy_node_due_for_burn_in_is_held_and_the_next_sweep_tests_and_resumes_it(burnin_env, dev_cluster,
                                                                                   tmp_path):
    """burnin.due_days on real Slurm: a sweep finds b200-002 running a job and not burned in
    lately, drains it `burnin-due` (the job keeps running: DRAINING), tests the idle ones; once
    the job has ended, the next sweep takes b200-002 first (its own drain), tests it and resumes it."""
    clean(burnin_env)
    data = tomllib.loads(dev_cluster.site_path.read_text())
    data["burnin"]["due_days"] = 1e-9  # any node tested before this sweep is due
    data["burnin"]["max_nodes"] = 4
    path = tmp_path / "site-due.toml"
    path.write_text(tomli_w.dumps(data))
    env = {**burnin_env, "SLURMADM_SITE": str(path)}
    busy = "b200-002"
    assert burnin(env, "run", "--nodes", busy, "--json").returncode == 0  # burned in once: the history starts
    job = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-w", busy, "--wrap", "sleep 600"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    try:
        assert wait_for(lambda: node_states(env)[busy][0] in ("allocated", "mixed"), 60), node_states(env)
        plan = json.loads(burnin(env, "run", "--dry-run", "--json").stdout)
        assert list(plan["would_hold"]) == [busy] and busy not in plan["selection"]["chosen"]
        s1 = sweep(env)
        held = s1["held_for_next"][busy]
        assert held["action"] == "held for the next sweep" and busy not in {n["node"] for n in s1["nodes"]}
        assert re.fullmatch(r"slurmadm: burnin-due: last burned in \d+ min ago \(burnin\.due_days 1e-09\); held "
                            r"for the next sweep \[burnin\]", held["reason"]), held
        state, shown = node_states(env)[busy]
        assert state == "draining" and shown == held["reason"]  # its job still runs
        rows = json.loads(burnin(env, "held", "--json").stdout)
        assert [(r["node"], r["kind"]) for r in rows] == [(busy, "due")] and "+DRAIN" in rows[0]["state"], rows
        assert rows[0]["since"] > 0 and rows[0]["next"] == "the next sweep's test (resumed on a pass)"
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)
    state, shown = settled(burnin_env)[busy]
    assert state == "drained" and shown == held["reason"]
    s2 = sweep(env)
    by = {n["node"]: n for n in s2["nodes"]}
    assert by[busy]["why"] == "requalify" and by[busy]["prior_reason"] == held["reason"]
    assert by[busy]["verdict"] == "pass" and by[busy]["action"] == "resumed", by[busy]
    assert settled(burnin_env)[busy][0] == "idle"
    assert held_now(env) == []
    clean(burnin_env)
