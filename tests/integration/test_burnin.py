"""Burn-in sweeps on the real dev cluster (issue 6's proof): real srun jobs in the burnin QOS and
account, a real gloo all-reduce through srun across the fake nodes, drains and resumes through
scontrol, interruption and crash recovery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmadm.burnin import history
from slurmadm.health.allreduce import import_torch
from slurmadm.devcluster.daemons import wait_for
from slurmadm.store import Store

from tests.integration.helpers import ensure_burnin_accounting, run_slurmadm

pytestmark = pytest.mark.integration

PREFIX = "slurmadm-burnin."
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]


def sh(env, *argv, timeout=30, check=True):
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check).stdout


@pytest.fixture(scope="module")
def burnin_env(dev_cluster):
    """The dev cluster's environment plus what the sweep needs in slurmdbd: the burnin QOS and
    the ops-burnin account with root in it (what `accounts apply` would create from the site)."""
    if import_torch() is None:
        pytest.fail("torch is required for the burn-in tests: scripts/install-torch-cpu.sh .venv/bin/python")
    env = dict(os.environ)
    env.update(dev_cluster.env())
    ensure_burnin_accounting(env, dev_cluster.site())
    return env


def burnin(env, *args, timeout=240):
    return run_slurmadm(env, "burnin", *args, timeout=timeout)


def node_states(env) -> dict[str, tuple[str, str]]:
    out = sh(env, "sinfo", "-N", "-h", "-p", "gpu", "-o", "%N|%T|%E")
    return {n: (state, reason) for n, state, reason in (line.split("|") for line in out.splitlines())}


def settled(env) -> dict[str, tuple[str, str]]:
    """Node states once the last jobs have finished completing (their epilog ran)."""
    assert wait_for(lambda: not any(st.startswith(("completing", "draining")) or st.endswith("*")
                                    for st, _ in node_states(env).values()), 60, interval=0.3), node_states(env)
    return node_states(env)


def our_jobs(env) -> list[str]:
    return [ln for ln in sh(env, "squeue", "-h", "-o", "%i|%j|%T").splitlines() if PREFIX in ln]


def reservations(env) -> str:
    return sh(env, "scontrol", "show", "reservation", "-o")


UNFINISHED = {"PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}


def accounted(env, job_ids) -> dict[str, dict[str, str]]:
    """sacct's rows for `job_ids`, once slurmdbd has every one in a final state and its start
    record: slurmctld sends a job's start and end to slurmdbd asynchronously, so squeue can be
    empty while sacct still says RUNNING, and a job whose step or end reached slurmdbd before its
    start is a row without its QOS (sacct prints "Unknown") until the start arrives (CI, stop 56)."""
    fields = ["JobID", "State", "QOS", "Account", "NNodes", "NodeList", "Reservation"]

    def rows():
        out = sh(env, "sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", ",".join(fields))
        return {r["JobID"]: r for r in (dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines())}

    def final():
        got = rows()
        return set(got) >= set(job_ids) and not any(r["State"] in UNFINISHED or r["QOS"] == "Unknown"
                                                     for r in got.values())

    wait_for(final, 60, interval=0.5)  # the asserts below say what was left if it never got there
    return rows()


def clean(env):
    """Every node idle and undrained, no sweep left over, before a test."""
    for n, (state, _) in node_states(env).items():
        if "drain" in state:
            sh(env, "scontrol", "update", f"nodename={n}", "state=resume")
    assert wait_for(lambda: not our_jobs(env), 60)
    assert "slurmadm_burnin" not in reservations(env)
    # a resumed node is "idle*" (not responding) until slurmctld's next ping reaches it
    assert wait_for(lambda: all(state == "idle" for state, _ in node_states(env).values()), 120, interval=0.5), \
        node_states(env)


def test_sweep_runs_real_jobs_and_a_real_allreduce_across_nodes(burnin_env, dev_cluster):
    clean(burnin_env)
    started = time.monotonic()
    result = burnin(burnin_env, "run", "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    s = json.loads(result.stdout)
    assert s["status"] == "done" and s["exit_code"] == 0
    # every node, in the selection's order (tested longest ago first: another module's sweeps
    # before this one change it)
    assert sorted(n["node"] for n in s["nodes"]) == NODES and {n["verdict"] for n in s["nodes"]} == {"pass"}
    for n in s["nodes"]:
        tests = {t["test"]: t for t in n["tests"]}
        assert tests["stress"]["data"]["device"] == "cpu" and "GPUs not stressed" in tests["stress"]["detail"]
        assert tests["allreduce-node"]["status"] == "pass" and tests["allreduce-node"]["data"]["ranks"] == 2
    # the multi-node all-reduce really ran through srun, one rank on each of two fake nodes
    pairs = s["pairs"]
    assert len(pairs) == 2 and sorted(x for p in pairs for x in (p["a"], p["b"])) == NODES, pairs  # disjoint
    assert all(p["status"] == "pass" and p["busbw_gbps"] > 0 and "gloo" in p["detail"] for p in pairs)
    acct = accounted(burnin_env, [n["job_id"] for n in s["nodes"]] + [p["job_id"] for p in pairs])
    assert sorted(acct) == sorted(map(str, [n["job_id"] for n in s["nodes"]] + [p["job_id"] for p in pairs])), acct
    odd = {j: r for j, r in acct.items()
           if (r["State"], r["QOS"], r["Account"]) != ("COMPLETED", "burnin", "ops-burnin")}
    assert not odd, odd
    for p in pairs:
        assert acct[p["job_id"]]["NNodes"] == "2"
    # parallel, not serial: four node jobs overlapped in time
    assert s["duration_s"] < time.monotonic() - started + 1
    # nothing left behind: no reservation, no job, every node idle again
    assert "slurmadm_burnin" not in reservations(burnin_env) and not our_jobs(burnin_env)
    assert all(state == "idle" for state, _ in settled(burnin_env).values())
    report = Path(s["report"])
    html = report.read_text()
    assert report.parent.parent == Path(dev_cluster.site().burnin.report_dir)
    assert "<svg" in html and "gloo on the CPU" in html and all(n in html for n in NODES)
    status = burnin(burnin_env, "status", "--json")
    assert json.loads(status.stdout)[0]["id"] == s["sweep_id"]


def test_requalifies_slurmadm_drains_and_never_touches_others(burnin_env, dev_cluster, tmp_path):
    clean(burnin_env)
    ours = "slurmadm: xid: GPU3 XID 79 GPU has fallen off the bus [prolog]"
    sh(burnin_env, "scontrol", "update", "nodename=b200-002", "state=drain", f"reason={ours}")
    sh(burnin_env, "scontrol", "update", "nodename=b200-004", "state=drain", "reason=admin: replace fan")
    result = burnin(burnin_env, "run", "--json", "--report-dir", str(tmp_path / "reports"))
    assert result.returncode == 0, result.stderr + result.stdout
    s = json.loads(result.stdout)
    assert Path(s["report"]).parent.parent == tmp_path / "reports"
    by = {n["node"]: n for n in s["nodes"]}
    assert by["b200-002"]["why"] == "requalify" and by["b200-002"]["verdict"] == "pass"
    assert by["b200-002"]["action"] == "resumed" and by["b200-002"]["prior_reason"] == ours
    assert "b200-004" not in by and "admin: replace fan" in s["selection"]["skipped"]["b200-004"]
    states = settled(burnin_env)
    assert states["b200-002"][0] == "idle"
    assert states["b200-004"] == ("drained", "admin: replace fan")
    # the drained node ran its job inside the sweep's reservation, as root's burnin job
    acct = accounted(burnin_env, [by["b200-002"]["job_id"]])[by["b200-002"]["job_id"]]
    assert acct["NodeList"] == "b200-002" and acct["QOS"] == "burnin"
    with Store(dev_cluster.site().store.path) as store:
        resumed = store.events(action="node.resume", target="b200-002")
        assert resumed and resumed[0].detail["was"] == ours
        assert store.get_node_state("b200-002", history.REQUALIFY_KEY) is None


def test_fault_under_load_drains_exactly_that_node_and_a_clean_sweep_resumes_it(burnin_env, dev_cluster):
    """The proof: an uncorrectable ECC error appears on one stand-in GPU while its node is under
    burn-in load; the sweep drains that node alone, with the reason in the report; once the fault
    is cleared, the next sweep re-qualifies and resumes it."""
    clean(burnin_env)

    def ecc() -> None:
        fault = run_slurmadm(burnin_env, "dev-cluster", "gpu-fault", "b200-003", "--gpu", "2", "--kind",
                             "ecc-uncorrected", "--state-dir", str(dev_cluster.state_dir))
        assert fault.returncode == 0, fault.stderr

    rc, out, err = _fault_under_load(burnin_env, dev_cluster, "b200-003", ecc)
    assert rc == 1, err  # a node failed
    s = json.loads(out)
    by = {n["node"]: n for n in s["nodes"]}
    assert [n for n, r in by.items() if r["verdict"] == "fail"] == ["b200-003"]
    bad = by["b200-003"]
    assert bad["failed_test"] == "health" and "ecc-uncorrected: GPU2 volatile uncorrected ECC=1" in bad["detail"]
    assert bad["reason"].startswith("slurmadm: burnin-health: ecc-uncorrected: GPU2") and \
        bad["reason"].endswith("[burnin]")
    # repair reads the drain: what burn-in's health suite found is GPU 2's ECC incident (on its
    # serial), not a node-wide burn-in one
    status = run_slurmadm(burnin_env, "repair", "status", "--json")
    assert status.returncode == 0, status.stderr
    inc = [(i["class"], i["part_kind"], i["slot"], i["source"]) for i in json.loads(status.stdout)
           if i["node"] == "b200-003"]
    assert inc == [("ECC", "gpu", "2", "burnin")], inc
    states = settled(burnin_env)
    assert states["b200-003"] == ("drained", bad["reason"])
    assert all(states[n][0] == "idle" for n in NODES if n != "b200-003")
    # the pair tests went on without it: b200-004 was paired with a known-good node instead
    assert all("b200-003" not in (p["a"], p["b"]) for p in s["pairs"])
    assert any(p["a"] == "b200-004" and p["kind"] == "partner" and p["status"] == "pass" for p in s["pairs"])
    html = Path(s["report"]).read_text()
    assert bad["reason"].replace("[burnin]", "") in html and "<title>1/4 FAIL: b200-003 ecc-uncorrected: GPU2" in html

    clear = run_slurmadm(burnin_env, "dev-cluster", "gpu-fault", "b200-003", "--clear", "--state-dir",
                         str(dev_cluster.state_dir))
    assert clear.returncode == 0, clear.stderr
    again = burnin(burnin_env, "run", "--json")
    assert again.returncode == 0, again.stderr + again.stdout
    s2 = json.loads(again.stdout)
    node3 = {n["node"]: n for n in s2["nodes"]}["b200-003"]
    assert (node3["why"], node3["verdict"], node3["action"]) == ("requalify", "pass", "resumed")
    assert node3["prior_reason"] == bad["reason"]
    assert settled(burnin_env)["b200-003"][0] == "idle"
    # its ECC incident is still open (no ladder ran); the ladder's next run closes it on this pass
    # rather than draining the node again for a GPU reset it no longer needs (the plan; executing
    # it is tests/unit/repair/test_run.py's)
    plan = run_slurmadm(burnin_env, "repair", "run", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    mine = [a for a in json.loads(plan.stdout)["plan"] if a["node"] == "b200-003"]
    assert [(a["step"], a["class"]) for a in mine] == [("close", "ECC")], mine
    assert f"passed burn-in sweep {s2['sweep_id']}" in mine[0]["why"]
    status = run_slurmadm(burnin_env, "repair", "status", "--json")  # what an admin looks at first
    assert status.returncode == 0, status.stderr
    shown = [(r["class"], r["next"]) for r in json.loads(status.stdout) if r["node"] == "b200-003"]
    assert shown == [("ECC", "close")], shown
    assert s2["previous"]["nodes"]["b200-003"]["verdict"] == "fail"  # compared with the failed sweep
    assert "b200-003: <span class=\"fail\">fail</span> &rarr; <span class=\"pass\">pass</span>" in \
        Path(s2["report"]).read_text()


def test_a_dcgm_diag_known_to_hang_on_b200_is_not_started(burnin_env, dev_cluster, tmp_path):
    """The reference site's own setting (`dcgm_level = 2`) on nodes with DCGM: `dcgmi diag -r 2`
    hangs forever on B200 (NVIDIA/DCGM#247). The nodes' `dcgmi` here answers `-v` with DCGM
    4.7.0's real output (tests/fixtures/burnin/dcgmi-versions.toml) and, asked for a diag, never
    returns. Each real burn-in job reads the release, names the known issue and goes on: the sweep
    passes, and no diag was started (else it would sit out its 15-minute timeout)."""
    import tomllib

    import tomli_w

    clean(burnin_env)
    sample = tomllib.loads((Path(__file__).resolve().parents[1] / "fixtures" / "burnin" / "dcgmi-versions.toml")
                           .read_text())["sample"][0]
    (tmp_path / "dcgmi-v.txt").write_text(sample["text"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stand_in = bin_dir / "dcgmi"
    stand_in.write_text(f"""#!/bin/sh
echo "$SLURMD_NODENAME $*" >> {calls}
case "$1" in
  -v) cat {tmp_path / "dcgmi-v.txt"} ;;
  diag) exec sleep 3600 ;;
esac
""")
    stand_in.chmod(0o755)
    data = tomllib.loads(Path(dev_cluster.site_path).read_text())
    data["burnin"]["dcgm_level"] = 2
    site_file = tmp_path / "site.toml"
    site_file.write_text(tomli_w.dumps(data))
    env = {**burnin_env, "SLURMADM_SITE": str(site_file), "PATH": f"{bin_dir}{os.pathsep}{burnin_env['PATH']}"}
    result = burnin(env, "run", "--nodes", "b200-001,b200-002", "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    s = json.loads(result.stdout)
    assert sorted(n["node"] for n in s["nodes"]) == ["b200-001", "b200-002"]
    for n in s["nodes"]:
        dcgm = {t["test"]: t for t in n["tests"]}["dcgm"]
        assert dcgm["status"] == "skip" and "known issue dcgm-247" in dcgm["detail"], dcgm
        assert dcgm["data"]["dcgm"] == "4.7.0" and n["verdict"] == "pass", n
    lines = calls.read_text().splitlines()
    assert sorted(lines) == ["b200-001 -v", "b200-002 -v"], lines  # the release read on each node; no diag


def test_a_standing_fault_fails_the_node_whoever_drains_it(burnin_env, dev_cluster):
    """A fault present before the sweep: the health prolog of the burn-in job may drain the node
    first (it does on 24.11, where the reservation's MAINT flag is not visible yet), or the burn-in's
    own health step does; either way that node alone fails, drained with a slurmadm reason.
    Beside it, a GPU that computes a wrong answer and shows nothing else (silent data corruption:
    no prolog sees it) fails the sweep's known-answer test, and its drain opens an SDC incident
    on that GPU's serial."""
    clean(burnin_env)
    sd = ["--state-dir", str(dev_cluster.state_dir)]
    fault = run_slurmadm(burnin_env, "dev-cluster", "gpu-fault", "b200-002", "--gpu", "6", "--kind",
                         "ecc-uncorrected", *sd)
    assert fault.returncode == 0, fault.stderr
    try:
        corrupt = run_slurmadm(burnin_env, "dev-cluster", "gpu-fault", "b200-004", "--gpu", "5", "--kind", "corrupt", *sd)
        assert corrupt.returncode == 0, corrupt.stderr
        result = burnin(burnin_env, "run", "--json")
    finally:
        for node in ("b200-002", "b200-004"):
            run_slurmadm(burnin_env, "dev-cluster", "gpu-fault", node, "--clear", *sd)
    assert result.returncode == 1, result.stderr
    s = json.loads(result.stdout)
    failed = {n["node"]: n for n in s["nodes"] if n["verdict"] == "fail"}
    assert sorted(failed) == ["b200-002", "b200-004"]
    node = failed["b200-002"]
    assert node["action"] in ("drained", "already drained")
    assert node["reason"].startswith("slurmadm: ") and "ecc-uncorrected: GPU6" in node["reason"]
    sdc = failed["b200-004"]
    assert (sdc["failed_test"], sdc["action"]) == ("kat", "drained"), sdc
    assert sdc["reason"].startswith("slurmadm: burnin-kat: GPU5 (standin:b200-004:gpu5): differs from the majority")
    kat = {t["test"]: t for t in sdc["tests"]}["kat"]
    assert kat["data"]["bad"] == ["standin:b200-004:gpu5"] and kat["data"]["basis"] == "majority"
    states = settled(burnin_env)
    assert states["b200-002"] == ("drained", node["reason"])
    assert states["b200-004"] == ("drained", sdc["reason"])
    report = Path(s["report"]).read_text()
    assert node["reason"].replace("[burnin]", "").replace("[prolog]", "") in report
    # repair reads the drain: one SDC incident on GPU 5, keyed by its serial
    hist = run_slurmadm(burnin_env, "repair", "history", "b200-004", "--json")
    assert hist.returncode == 0, hist.stderr
    incidents = [i for i in json.loads(hist.stdout) if i["class"] == "SDC"]
    assert [(i["part_kind"], i["slot"]) for i in incidents] == [("gpu", "5")], incidents
    assert incidents[0]["serial"] and incidents[0]["part_key"] == incidents[0]["serial"], incidents


def _start_sweep(env, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "slurmadm", "burnin", "run", "--json", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fault_under_load(env, dev_cluster, node: str, inject, *args: str) -> tuple[int, str, str]:
    """A sweep (`burnin run --json ARGS`) with `inject()` called once NODE's burn-in job has
    started (its prolog passed, its load is on), the job's process paused meanwhile: the fault
    falls inside its run, before its tests read, however slow this machine is. The sweep's exit
    code, stdout and stderr."""
    report_dir = Path(dev_cluster.site().burnin.report_dir)
    before = set(report_dir.glob("*/")) if report_dir.exists() else set()
    proc = _start_sweep(env, *args)
    pid: list[int] = []
    try:
        def job_started() -> bool:
            for f in (f for d in report_dir.glob("*/") if d not in before for f in d.glob(f"jobs/*.{node}.out")):
                for line in f.read_text().splitlines():
                    if '"event": "started"' in line:
                        pid.append(json.loads(line)["pid"])
                        return True
            return False

        assert wait_for(job_started, 90, interval=0.1), proc.poll()
        os.kill(pid[0], signal.SIGSTOP)
        try:
            inject()
        finally:
            os.kill(pid[0], signal.SIGCONT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def _running(env, n: int) -> bool:
    return sum(1 for ln in our_jobs(env) if ln.endswith("|RUNNING")) >= n


def test_sigterm_cancels_the_jobs_restores_nodes_and_records_it(burnin_env, dev_cluster):
    clean(burnin_env)
    ours = "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=2 [prolog]"
    sh(burnin_env, "scontrol", "update", "nodename=b200-003", "state=drain", f"reason={ours}")
    proc = _start_sweep(burnin_env)
    try:
        assert wait_for(lambda: _running(burnin_env, 4), 60), our_jobs(burnin_env)
        # a second sweep is refused while this one holds the lock
        second = burnin(burnin_env, "run")
        assert second.returncode == 1 and "another burn-in sweep" in second.stderr
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted by SIGTERM" in err
    assert "slurmadm_burnin" not in reservations(burnin_env)
    assert wait_for(lambda: not our_jobs(burnin_env), 60), our_jobs(burnin_env)  # cancelled (completing ends)
    assert settled(burnin_env)["b200-003"] == ("drained", ours)  # back as it was
    with Store(dev_cluster.site().store.path) as store:
        last = history.sweeps(store, limit=1)[0]
    assert last["status"] == "interrupted" and last["failed"] == 0
    assert Path(last["report"]).exists()


def test_a_killed_sweep_is_cleaned_up_by_the_next_one(burnin_env, dev_cluster):
    clean(burnin_env)
    ours = "slurmadm: nvlink: GPU1 2 of 18 links down [periodic]"
    sh(burnin_env, "scontrol", "update", "nodename=b200-001", "state=drain", f"reason={ours}")
    proc = _start_sweep(burnin_env)
    assert wait_for(lambda: _running(burnin_env, 4), 60), our_jobs(burnin_env)
    proc.kill()  # SIGKILL: no clean-up at all; its srun jobs and reservation stay behind
    proc.wait(timeout=30)
    assert our_jobs(burnin_env) and "slurmadm_burnin" in reservations(burnin_env)
    assert node_states(burnin_env)["b200-001"][0] != "drained"  # resumed inside the reservation
    result = burnin(burnin_env, "run", "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "recovered from an earlier sweep" in result.stderr
    s = json.loads(result.stdout)
    by = {n["node"]: n for n in s["nodes"]}
    # the recovery drained b200-001 again with its old reason, so this sweep re-qualified it
    assert by["b200-001"]["why"] == "requalify" and by["b200-001"]["prior_reason"] == ours
    assert by["b200-001"]["action"] == "resumed"
    with Store(dev_cluster.site().store.path) as store:
        runs = history.sweeps(store, limit=2)
        assert runs[1]["status"] == "interrupted"
        assert store.events(action="burnin.recover")
    assert not our_jobs(burnin_env) and "slurmadm_burnin" not in reservations(burnin_env)


def test_a_link_down_once_under_load_fails_that_node_and_its_port_goes_to_repair(burnin_env, dev_cluster):
    """A link that goes down once while its node is under burn-in load (`ib-fault --kind
    flap-once`: one flap, which the health check's flap window lets pass): the sweep's link watch
    fails that node, its drain names the port, and repair opens an HCA incident on that port. The
    cable reseated (`repair clear`), `repair qualify` watches the link quiet and returns it."""
    clean(burnin_env)
    node, hca = "b200-001", "mlx5_3"
    sd = ["--state-dir", str(dev_cluster.state_dir)]

    def flap() -> None:
        p = run_slurmadm(burnin_env, "dev-cluster", "ib-fault", node, "--hca", hca, "--kind", "flap-once", *sd)
        assert p.returncode == 0, p.stderr

    rc, out, err = _fault_under_load(burnin_env, dev_cluster, node, flap, "--nodes", node)
    assert rc == 1, err  # a node failed
    bad = {n["node"]: n for n in json.loads(out)["nodes"]}[node]
    assert (bad["verdict"], bad["failed_test"], bad["action"]) == ("fail", "links", "drained"), bad
    assert bad["reason"].startswith(f"slurmadm: burnin-links: link down while watched: {hca} 1x ("), bad["reason"]
    assert settled(burnin_env)[node] == ("drained", bad["reason"])
    status = run_slurmadm(burnin_env, "repair", "status", "--json")
    assert status.returncode == 0, status.stderr
    inc = [i for i in json.loads(status.stdout) if i["node"] == node and i["part_kind"] == "hca"]
    assert [(i["class"], i["slot"], i["next"]) for i in inc] == [("HCA", hca, "reboot")], inc
    assert "link down while watched" in inc[0]["last_signal"], inc

    assert run_slurmadm(burnin_env, "dev-cluster", "ib-fault", node, "--clear", *sd).returncode == 0
    cleared = run_slurmadm(burnin_env, "repair", "clear", node, "--reason", "cable reseated", "--json")
    assert cleared.returncode == 0 and inc[0]["id"] in json.loads(cleared.stdout)["cleared"], cleared.stderr
    settled(burnin_env)  # slurmctld's ping has reached it: the gate asks that of a node
    qualified = run_slurmadm(burnin_env, "repair", "qualify", node, "--json", timeout=240)
    assert qualified.returncode == 0, qualified.stderr + qualified.stdout
    done = json.loads(qualified.stdout)["done"][0]
    tests = {t["test"]: t for t in done["qualification"]["tests"]}
    assert done["ok"] and tests["links"]["status"] == "pass", done
    assert tests["links"]["data"]["watched_s"] >= 6, tests["links"]  # the dev site's repair.link_watch_s
    assert settled(burnin_env)[node][0] == "idle"
