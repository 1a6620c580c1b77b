"""`slurmadm repair run` end to end on the session's dev cluster (issue 34): the stand-in GPUs'
reset, reset-fail and corrupt faults, the health hook's drains, real Slurm jobs and reboots.

- b200-003: a reset-class XID (119, GSP RPC timeout) -> GPU reset over SSH -> qualification job
  -> resumed; then the same GPU's third incident within the window -> an RMA candidate, left
  drained, its serial a lemon.
- b200-002: a reset that fails -> the ladder's reboot (scontrol reboot), back with a new BootTime.
- b200-004: silent corruption (`--kind corrupt`): the reset works, the qualification's known-answer
  test fails; the reboot rung, the second qualification fails -> a lemon, never resumed by
  health's clean runs; `repair clear --resume` brings it back.
- b200-002 last: a link that keeps flapping (`ib-fault --kind flap --every 2`) -> the ladder's
  reboot -> the qualification's link watch fails -> an RMA candidate; the cable replaced
  (`ib-fault --clear`, `repair clear`) -> `repair qualify` passes and resumes it.
- b200-002 first, by hand (`repair qualify`, issue 45): in service -> drained, qualified, resumed;
  with a corrupting GPU -> fails on the known-answer test and stays drained, repair's reason;
  with a GPU that throttles only under load -> health passes, the gate's stress fails; cleared.
The breaker (0.1 of the partition, at least one node) takes one node into repair at a time, so
the scenarios run one after another. Waits poll with deadlines."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.store import Store
from tests.integration.helpers import (
    RepairSlate,
    ensure_burnin_accounting,
    hook,
    run_slurmadm,
    sh,
    slurm_node,
)

pytestmark = pytest.mark.integration

OK, FAILS, LEMON, GPU = "b200-003", "b200-002", "b200-004", "2"
RESET_XID = "46"  # Xid 46 (GPU stopped processing): RESET_GPU in NVIDIA's catalog
GSP_XID = "119"  # Xid 119 (GSP RPC timeout): RESET_GPU in NVIDIA's catalog, the B200 fleet's common one


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = {**os.environ, **dev_cluster.env()}
    ensure_burnin_accounting(e, dev_cluster.site())
    with RepairSlate(dev_cluster, e, (OK, FAILS, LEMON)):
        yield e


def slurmadm(env, *args, code=0, timeout=600):
    p = run_slurmadm(env, *args, timeout=timeout)
    assert p.returncode == code, f"{args}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout


def fault(env, node, kind, value=None):
    slurmadm(env, "dev-cluster", "gpu-fault", node, "--gpu", GPU, "--kind", kind,
             *(["--value", str(value)] if value is not None else []))


def responding(env, node):
    """Wait for slurmctld's next ping to reach `node`: one just resumed, rebooted, or loaded by a
    qualification job on a 2-core host is flagged NOT_RESPONDING until then, and both the health
    hook and `repair qualify` leave such a node alone (someone else's state)."""
    assert wait_for(lambda: "NOT_RESPONDING" not in slurm_node(env, node).flags, 120, interval=1.0), \
        slurm_node(env, node)


def drained_by_health(dc, env, node):
    responding(env, node)
    p, _ = hook(dc, "healthcheck.sh", node)
    assert p.returncode == 0, p.stderr
    info = slurm_node(env, node)
    assert info.drained and info.reason.startswith(f"slurmadm: xid: GPU{GPU} "), (info, _story(dc, env, node))


def _story(dc, env, node):
    """What the store and Slurm say when a drain the test expects did not happen."""
    from slurmadm.store import Store

    with Store(dc.site().store.path) as st:
        rows = st.query("SELECT ts, action, target, reason FROM events ORDER BY ts DESC LIMIT 12")
        checks = st.query("SELECT ts, check_id, status, detail FROM check_results WHERE node=? AND check_id='xid' "
                          "ORDER BY ts DESC LIMIT 3", (node,))
    nodes = sh(env, "sinfo", "-N", "-h", "-o", "%N %T %E", check=False)
    return {"events": rows, "xid": checks, "sinfo": nodes}


def incident(env, node):
    rows = [r for r in json.loads(slurmadm(env, "repair", "status", "--all", "--json")) if r["node"] == node]
    assert len(rows) == 1, json.dumps(rows, indent=1)
    return rows[0]


def run(env, code=0):
    return json.loads(slurmadm(env, "repair", "run", "--json", code=code))


def step_of(report, node):
    return next(d for d in report["done"] if d["node"] == node)


def boot_time(env, node):
    m = re.search(r"\bBootTime=(\S+)", sh(env, "scontrol", "show", "node", "-o", node))
    return m.group(1) if m else ""


def wait_back(env, node, before):
    """Back from the reboot: registered, no reboot pending, a new BootTime."""
    def back():
        i = slurm_node(env, node)
        return (not i.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED", "NOT_RESPONDING"}
                and boot_time(env, node) != before)
    assert wait_for(back, 240, interval=1.0), slurm_node(env, node)


def test_an_admin_qualifies_a_node_by_hand(dev_cluster, env):
    """`slurmadm repair qualify NODE`: a node in service is drained for the job and resumed on a
    pass; one whose stand-in GPU corrupts its answer fails and stays drained."""
    node = FAILS
    responding(env, node)
    plan = json.loads(slurmadm(env, "repair", "qualify", node, "--dry-run", "--json"))
    assert [(a["node"], a["step"]) for a in plan["plan"]] == [(node, "qualify")] and plan["done"] == [], plan
    assert not slurm_node(env, node).drained  # shown, not done
    done = json.loads(slurmadm(env, "repair", "qualify", node, "--json"))["done"]
    assert [d["ok"] for d in done] == [True] and "resumed" in done[0]["detail"], done
    tests = {t["test"]: t["status"] for t in done[0]["qualification"]["tests"]}
    assert set(tests) == {"stress", "allreduce-node", "kat", "health", "links"} and tests["kat"] == "pass", tests
    info = slurm_node(env, node)
    assert not info.drained and info.state == "IDLE", info

    fault(env, node, "corrupt", 1)
    responding(env, node)
    done = json.loads(slurmadm(env, "repair", "qualify", node, "--json", code=1))["done"]
    q = done[0]["qualification"]
    assert q["failed_test"] == "kat" and f"gpu{GPU}" in q["detail"], q
    info = slurm_node(env, node)
    assert info.drained and info.reason.startswith("slurmadm: repair: qualify: failed: kat"), info
    audit = json.loads(slurmadm(env, "audit", "log", "--json", "--target", node, "--limit", "20"))
    assert "repair.qualify.result" in json.dumps(audit), audit
    slurmadm(env, "dev-cluster", "gpu-fault", node, "--clear")
    sh(env, "scontrol", "update", f"nodename={node}", "state=resume")


def test_a_gpu_that_throttles_only_under_load_passes_health_and_fails_the_gates_stress(dev_cluster, env):
    """Issue 45: the stand-in's `thermal-under-load` GPU is cool at rest, so the health hook
    passes it; the qualification's stress loads it, NVML shows HW thermal slowdown, and the gate
    fails on the stress naming the GPU. Then `repair clear --resume`: the admin's fresh start."""
    node = FAILS
    responding(env, node)
    fault(env, node, "thermal-under-load", 96)
    p, _ = hook(dev_cluster, "healthcheck.sh", node)
    assert p.returncode == 0 and not slurm_node(env, node).drained, (p.stderr, slurm_node(env, node))
    done = json.loads(slurmadm(env, "repair", "qualify", node, "--json", code=1))["done"]
    q = done[0]["qualification"]
    assert q["failed_test"] == "stress" and f"stress: GPU{GPU} HW slowdown" in q["detail"], q
    assert "HW thermal slowdown" in q["detail"], q
    tests = {t["test"]: t for t in q["tests"]}
    assert "peak 96 C" in tests["stress"]["detail"] and tests["health"]["status"] == "pass", tests
    info = slurm_node(env, node)
    assert info.drained and info.reason.startswith("slurmadm: repair: qualify: failed: stress"), info

    slurmadm(env, "dev-cluster", "gpu-fault", node, "--clear")
    slurmadm(env, "repair", "clear", node, "--resume", "--reason", "cold plate reseated")
    assert not slurm_node(env, node).drained
    assert json.loads(slurmadm(env, "repair", "lemons", "--json")) == [] or \
        node not in json.dumps(json.loads(slurmadm(env, "repair", "lemons", "--json")))


def test_reset_qualify_resume_then_a_third_incident_is_an_rma_candidate(dev_cluster, env):
    fault(env, OK, "xid", GSP_XID)
    drained_by_health(dev_cluster, env, OK)
    first = incident(env, OK)  # `repair status` ingests: the incident, by the GPU's serial
    assert (first["class"], first["slot"], first["next"]) == ("RESET_GPU", GPU, "reset"), first
    plan = json.loads(slurmadm(env, "repair", "run", "--dry-run", "--json"))["plan"]
    assert [(a["node"], a["step"]) for a in plan] == [(OK, "reset")], plan  # shown, not done
    done = step_of(run(env), OK)
    assert done["ok"] and done["reset"]["ok"], done
    assert done["qualification"]["status"] == "pass", done["qualification"]
    tests = {t["test"]: t["status"] for t in done["qualification"]["tests"]}
    assert set(tests) == {"stress", "allreduce-node", "kat", "health", "links"} and tests["kat"] == "pass", tests
    info = slurm_node(env, OK)
    assert not info.drained and info.state == "IDLE", info
    hist = json.loads(slurmadm(env, "repair", "history", OK, "--json"))
    assert [h["state"] for h in hist if h["id"] == first["id"]] == ["closed"], hist
    assert run(env)["done"] == []  # a second run does nothing

    # the same GPU again, twice within 7 days: the third incident is an RMA candidate
    second = None
    for n in (2, 3):
        fault(env, OK, "xid", RESET_XID)
        drained_by_health(dev_cluster, env, OK)
        inc = incident(env, OK)
        if n == 2:
            second = inc["id"]
            slurmadm(env, "repair", "clear", OK, "--reason", "GPU2 reseated by hand")
            sh(env, "scontrol", "update", f"nodename={OK}", "state=resume")
    assert inc["id"] != second and inc["next"] == "rma", inc
    report = run(env)
    assert step_of(report, OK)["step"] == "rma"
    info = slurm_node(env, OK)
    assert info.drained and info.reason.startswith("slurmadm: repair: rma"), info
    assert run(env)["done"] == []  # held: nothing more until a person acts

    # three incidents on one GPU in the window: the GPU, by its serial, is a lemon (issue 44); the
    # clear after the second was the node's fresh start, not the part's
    lemons = {(d["kind"], d["name"]): d for d in json.loads(slurmadm(env, "repair", "lemons", "--json"))}
    assert ("gpu", inc["serial"]) in lemons and ("node", OK) not in lemons, lemons
    assert lemons[("gpu", inc["serial"])]["why"].startswith("3 incidents"), lemons
    p, _ = hook(dev_cluster, "healthcheck.sh", OK)  # health's own run leaves repair's drain alone
    assert slurm_node(env, OK).reason.startswith("slurmadm: repair: rma"), (p.stderr, slurm_node(env, OK))
    # an admin's word ends the incident (the drain stays: no --resume); the part keeps its count
    slurmadm(env, "repair", "clear", OK, "--reason", "GPU2 sent back by hand")
    assert [i for i in json.loads(slurmadm(env, "repair", "status", "--json")) if i["node"] == OK] == []
    assert ("gpu", inc["serial"]) in {(d["kind"], d["name"])
                                      for d in json.loads(slurmadm(env, "repair", "lemons", "--json"))}
    assert slurm_node(env, OK).drained and run(env)["done"] == []


def test_a_reset_that_fails_falls_back_to_a_reboot(dev_cluster, env):
    fault(env, FAILS, "xid", RESET_XID)
    fault(env, FAILS, "reset-fail")
    drained_by_health(dev_cluster, env, FAILS)
    before = boot_time(env, FAILS)
    report = run(env)
    done = step_of(report, FAILS)
    assert done["step"] == "reset" and not done["reset"]["ok"] and "reboot requested" in done["detail"], done
    assert "Unknown Error" in done["reset"]["detail"]
    assert incident(env, FAILS)["state"] == "rebooting"
    wait_back(env, FAILS, before)
    info = slurm_node(env, FAILS)
    assert info.reason.startswith("slurmadm: repair: reboot: "), info  # still ours, still out of service
    # leave the qualification after the reboot to the lemon test; this node is done
    slurmadm(env, "repair", "clear", FAILS, "--reason", "test: reboot seen")
    slurmadm(env, "dev-cluster", "gpu-fault", FAILS, "--clear")
    sh(env, "scontrol", "update", f"nodename={FAILS}", "state=resume")


def test_two_failed_qualifications_make_a_lemon(dev_cluster, env):
    fault(env, LEMON, "xid", RESET_XID)
    fault(env, LEMON, "corrupt", 1)
    drained_by_health(dev_cluster, env, LEMON)
    first = step_of(run(env, code=1), LEMON)
    q = first["qualification"]
    assert first["reset"]["ok"] and q["status"] == "fail" and q["failed_test"] == "kat", q
    assert f"gpu{GPU}" in q["detail"], q  # the stand-in GPU whose answer differs is named
    serial = first["qualification"]["blamed"][0]["serial"]  # and blamed: the part, by its serial
    assert first["qualification"]["blamed"][0]["slot"] == GPU and serial == incident(env, LEMON)["serial"], q
    before = boot_time(env, LEMON)
    second = step_of(run(env), LEMON)
    assert second["step"] == "reboot", second  # the ladder's next rung
    wait_back(env, LEMON, before)
    third = step_of(run(env, code=1), LEMON)
    assert third["qualification"]["failed_test"] == "kat" and "lemon" in third["detail"], third
    info = slurm_node(env, LEMON)
    assert info.drained and info.reason.startswith("slurmadm: repair: lemon: "), info
    assert f"GPU{GPU} (serial {serial})" in info.reason, info
    lemons = {(d["kind"], d["name"]): d for d in json.loads(slurmadm(env, "repair", "lemons", "--json"))}
    assert ("node", LEMON) in lemons and ("gpu", serial) in lemons, lemons  # the GPU itself, wherever it goes
    assert lemons[("gpu", serial)]["why"] == f"2 failed qualifications blame it ({LEMON} GPU{GPU})", lemons
    assert run(env)["done"] == []  # never resumed

    # clean periodic runs do not bring a lemon back (issue 44); an admin's `repair clear` does
    slurmadm(env, "dev-cluster", "gpu-fault", LEMON, "--clear")
    responding(env, LEMON)
    since = time.time()
    for _ in range(3):  # past the dev site's [health] resume_after_clean_runs (2)
        p, _ = hook(dev_cluster, "healthcheck.sh", LEMON)
        assert p.returncode == 0, p.stderr
    with Store(dev_cluster.site().store.local_path(LEMON)) as st:
        statuses = {r["status"] for r in st.query("SELECT status FROM check_results WHERE node=? AND ts>=?",
                                                  (LEMON, since))}
    assert statuses and "fail" not in statuses and "error" not in statuses, statuses  # clean runs
    info = slurm_node(env, LEMON)
    assert info.drained and info.reason.startswith("slurmadm: repair: lemon: "), info
    slurmadm(env, "repair", "clear", LEMON, "--resume", "--reason", "GPU2 replaced by hand")
    info = slurm_node(env, LEMON)
    assert not info.drained, info
    assert ("node", LEMON) not in {(d["kind"], d["name"]) for d in
                                   json.loads(slurmadm(env, "repair", "lemons", "--json"))}
    assert run(env)["done"] == []


def test_a_link_that_keeps_flapping_fails_its_qualification_after_the_reboot(dev_cluster, env):
    """The 32-node fleet replay's flapping link (issue 37): drained for its flaps, the HCA
    ladder's reboot brought it back between flaps and the qualification passed. The stand-in's
    link now keeps flapping across the reboot; the qualification's link watch sees it go down and
    fails, and the ladder's next rung holds it as an RMA candidate. The cable replaced (the
    flapping stops, `repair clear`), `repair qualify` watches the links quiet and resumes it."""
    node, hca = FAILS, "mlx5_3"
    responding(env, node)
    slurmadm(env, "dev-cluster", "ib-fault", node, "--hca", hca, "--kind", "flap", "--every", "2")
    try:
        p, _ = hook(dev_cluster, "healthcheck.sh", node)
        info = slurm_node(env, node)
        assert info.drained and info.reason.startswith(f"slurmadm: infiniband: {hca} link flapped"), (p.stderr, info)
        inc = incident(env, node)
        assert (inc["class"], inc["next"]) == ("HCA", "reboot"), inc
        before = boot_time(env, node)
        assert step_of(run(env), node)["step"] == "reboot"
        wait_back(env, node, before)  # the flapper goes on across the reboot, as a bad cable does
        responding(env, node)
        done = step_of(run(env, code=1), node)
        q = done["qualification"]
        tests = {t["test"]: t for t in q["tests"]}
        assert q["status"] == "fail" and tests["links"]["status"] == "fail", q
        assert tests["links"]["detail"].startswith(f"link down while watched: {hca} "), tests["links"]
        info = slurm_node(env, node)
        # the link watch runs before the health suite: the reason names the port's downs, not the
        # infiniband check's flap count
        assert info.drained and info.reason.startswith(
            f"slurmadm: repair: qualify: HCA: failed: links: link down while watched: {hca} "), info
        report = run(env)  # the HCA ladder's next rung: a person replaces the cable
        assert step_of(report, node)["step"] == "rma", report
        assert slurm_node(env, node).reason.startswith("slurmadm: repair: rma"), slurm_node(env, node)
    finally:
        cleared = json.loads(slurmadm(env, "dev-cluster", "ib-fault", node, "--clear", "--json"))
    assert cleared.get("stopped_flapping") == [hca], cleared
    slurmadm(env, "repair", "clear", node, "--reason", "cable replaced")
    responding(env, node)
    done = json.loads(slurmadm(env, "repair", "qualify", node, "--json"))["done"]
    q = done[0]["qualification"]
    tests = {t["test"]: t for t in q["tests"]}
    assert done[0]["ok"] and tests["links"]["status"] == "pass" and tests["health"]["status"] == "pass", q
    assert tests["links"]["data"]["watched_s"] >= 6, tests["links"]  # the dev site's repair.link_watch_s
    info = slurm_node(env, node)
    assert not info.drained and info.state == "IDLE", info
