"""The sweep's decisions on plain data (a fake Slurm backend): verdicts from job outcomes, drains
with burnin- reasons under the ownership rules and the drain cap, re-qualification, recording."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurmadm.burnin import history
from slurmadm.burnin.model import TestResult
from slurmadm.burnin.sweep import JobOutcome, NodeRun, Sweep
from slurmadm.site import parse_site
from slurmadm.slurm import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


class FakeSlurm:
    name = "fake"

    def __init__(self, nodes: list[NodeInfo]):
        self.state = {n.name: n for n in nodes}
        self.calls: list[tuple] = []

    def version(self):
        return (24, 11, 5)

    def nodes(self, names=None):
        return [n for n in self.state.values() if names is None or n.name in names]

    def drain(self, nodes, reason):
        self.calls.append(("drain", tuple(nodes), reason))
        for n in nodes:
            self.state[n] = replace(self.state[n], flags=self.state[n].flags | {"DRAIN"}, reason=reason,
                                    reason_user="root")

    def resume(self, nodes):
        self.calls.append(("resume", tuple(nodes)))
        for n in nodes:
            self.state[n] = replace(self.state[n], flags=self.state[n].flags - {"DRAIN"}, reason="")

    def set_reason(self, nodes, reason):
        self.calls.append(("reason", tuple(nodes), reason))


def node(name, flags=(), reason=""):
    return NodeInfo(name=name, state="IDLE", flags=frozenset(flags), reason=reason, partitions=("gpu",))


@pytest.fixture()
def site(tmp_path):
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp_path}/s.db")
    text = text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl")
    return parse_site(text)


def sweep(site, tmp_path, nodes):
    slurm = FakeSlurm(nodes)
    sw = Sweep(site, backend=slurm, store=Store(site.store.path), site_file=str(EXAMPLE),
               report_dir=str(tmp_path / "reports"))
    return sw, slurm


def fleet(n=40, **special):
    return [special.get(f"b200-{i:03d}".replace("-", "_"), node(f"b200-{i:03d}")) for i in range(1, n + 1)]


def run(name, why="idle", verdict="pass", failed_test="", detail="", prior=""):
    return NodeRun(name, why, prior_reason=prior, verdict=verdict, failed_test=failed_test, detail=detail)


def test_failed_node_is_drained_with_a_burnin_reason_and_audited(site, tmp_path):
    sw, slurm = sweep(site, tmp_path, fleet())
    sw.runs = {"b200-001": run("b200-001"),
               "b200-003": run("b200-003", verdict="fail", failed_test="health",
                               detail="ecc-uncorrected: GPU2 volatile uncorrected ECC=1")}
    sw._act()
    reason = "slurmadm: burnin-health: ecc-uncorrected: GPU2 volatile uncorrected ECC=1 [burnin]"
    assert slurm.calls == [("drain", ("b200-003",), reason)]
    assert (sw.runs["b200-003"].action, sw.runs["b200-003"].reason) == ("drained", reason)
    assert sw.runs["b200-001"].action == ""
    assert [e.target for e in sw.store.events(action="node.drain")] == ["b200-003"]


def test_own_reservation_flags_do_not_block_the_drain_but_others_do(site, tmp_path):
    nodes = fleet(b200_003=node("b200-003", flags={"MAINTENANCE", "RESERVED"}),
                  b200_004=node("b200-004", flags={"MAINTENANCE", "RESERVED"}))
    sw, slurm = sweep(site, tmp_path, nodes)
    sw.reserved = True  # the sweep's reservation holds b200-003 only
    sw.runs = {"b200-003": run("b200-003", verdict="fail", failed_test="stress", detail="GPU1 400 TFLOPS")}
    sw._act()
    assert slurm.calls[0][:2] == ("drain", ("b200-003",))
    sw.reserved, sw.runs = False, {"b200-004": run("b200-004", verdict="fail", failed_test="stress", detail="x")}
    slurm.calls.clear()
    sw._act()
    assert slurm.calls == [] and "MAINTENANCE" in sw.runs["b200-004"].action


def test_breaker_turns_drains_into_alerts(site, tmp_path):
    # 40 nodes, drain_cap_fraction 0.10: at most 4 slurmadm drains (health's breaker); 3 exist,
    # 2 more fail: one is drained, the other becomes an alert
    drained = {f"b200_00{i}": node(f"b200-00{i}", flags={"DRAIN"}, reason="slurmadm: xid: x [prolog]")
               for i in (1, 2, 3)}
    sw, slurm = sweep(site, tmp_path, fleet(**drained))
    sw.runs = {n: run(n, verdict="fail", failed_test="allreduce-pair", detail="busbw 10 GB/s")
               for n in ("b200-010", "b200-011")}
    sw._act()
    assert [c[1] for c in slurm.calls] == [("b200-010",)]
    assert sw.runs["b200-011"].action == ("not drained (breaker): partition gpu: 4 of 40 nodes already drained "
                                          "by slurmadm, cap is 4 (drain_cap_fraction 0.1)")
    assert [e.target for e in sw.store.events(action="burnin.drain-capped")] == ["b200-011"]


def test_requalification_outcomes(site, tmp_path):
    prior = "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=2 [prolog]"
    sw, slurm = sweep(site, tmp_path, fleet())  # all three were resumed for the sweep
    for n in ("b200-005", "b200-006", "b200-007"):
        sw.store.set_node_state(n, history.REQUALIFY_KEY, prior)
    sw.runs = {
        "b200-005": run("b200-005", "requalify", "pass", prior=prior),
        "b200-006": run("b200-006", "requalify", "fail", "stress", "GPU5 matmul result differs", prior=prior),
        "b200-007": run("b200-007", "requalify", "skipped", detail="job did not start", prior=prior),
    }
    sw._act()
    drains = {c[1][0]: c[2] for c in slurm.calls if c[0] == "drain"}
    assert "b200-005" not in drains and sw.runs["b200-005"].action == "resumed"
    assert drains["b200-006"].startswith("slurmadm: burnin-stress: GPU5 matmul")
    assert drains["b200-007"] == prior and sw.runs["b200-007"].action == "kept drained"
    assert all(sw.store.get_node_state(n, history.REQUALIFY_KEY) is None for n in sw.runs)
    assert [e.target for e in sw.store.events(action="node.resume")] == ["b200-005"]


def test_drains_made_during_the_sweep_are_kept(site, tmp_path):
    nodes = fleet(b200_001=node("b200-001", flags={"DRAIN"}, reason="admin: fan"),
                  b200_002=node("b200-002", flags={"DRAIN"}, reason="slurmadm: xid: GPU3 XID 79 [prolog]"))
    sw, slurm = sweep(site, tmp_path, nodes)
    sw.runs = {"b200-001": run("b200-001", verdict="fail", failed_test="health", detail="x"),
               "b200-002": run("b200-002", verdict="skipped", detail="job did not start")}
    sw._act()
    assert slurm.calls == []
    assert sw.runs["b200-001"].action == "already drained"
    # the prolog of the burn-in job found a fault: that is this node's verdict
    r = sw.runs["b200-002"]
    assert (r.verdict, r.failed_test, r.detail) == ("fail", "xid", "GPU3 XID 79")


def test_job_outcomes_become_verdicts(site, tmp_path):
    sw, _ = sweep(site, tmp_path, fleet())
    test = TestResult("stress", "fail", "GPU1 hung").to_json()
    lines = [json.dumps({"event": "started", "job_id": ""}), json.dumps({"event": "test", **test})]
    crashed = JobOutcome(True, 1, "\n".join(lines), "srun: error: b200-001: task 0: Killed\n")
    never = JobOutcome(False, 1, "", "", stopped="start-timeout")
    clean = JobOutcome(True, 0, "\n".join(lines[:1] + [json.dumps({"event": "result", "tests": [
        TestResult("stress", "pass", "ok").to_json()]})]), "")
    # the sweep's own time limit cut two jobs short: not the nodes' fault, unless a test had failed
    cut = JobOutcome(True, 1, lines[0], "", stopped="time-limit")
    cut_after_failure = JobOutcome(True, 1, "\n".join(lines), "", stopped="time-limit")
    runs = {n: NodeRun(n, "idle") for n in "abcde"}
    for name, outcome in zip("abcde", (crashed, never, clean, cut, cut_after_failure), strict=True):
        sw._judge_node(runs[name], outcome)
    assert (runs["d"].verdict, runs["d"].tests) == ("skipped", [])
    assert runs["d"].detail == "cut short by the sweep time limit"
    assert (runs["e"].verdict, runs["e"].failed_test) == ("fail", "stress")
    assert (runs["a"].verdict, runs["a"].failed_test, runs["a"].detail) == ("fail", "stress", "GPU1 hung")
    assert runs["a"].tests[-1].test == "job" and "task 0: Killed" in runs["a"].tests[-1].detail
    assert runs["b"].verdict == "skipped" and "start_timeout 00:15:00" in runs["b"].detail
    assert runs["c"].verdict == "pass"


def test_finish_records_history_and_writes_the_report(site, tmp_path):
    sw, _ = sweep(site, tmp_path, fleet())
    history.start_sweep(sw.store, sw.id, pid=1, host="h", actor="root", nodes="b200-[001-002]")
    sw.status = "done"
    sw.runs = {"b200-001": run("b200-001"),
               "b200-002": run("b200-002", verdict="fail", failed_test="health", detail="xid: GPU3 XID 79")}
    sw.runs["b200-002"].action = "drained"
    sw.runs["b200-002"].reason = "slurmadm: burnin-health: xid: GPU3 XID 79 [burnin]"
    summary = sw._finish()
    assert summary["exit_code"] == 1
    html = Path(summary["report"]).read_text()
    assert "slurmadm: burnin-health: xid: GPU3 XID 79 [burnin]" in html and "<script" not in html
    assert json.loads((Path(summary["report"]).parent / "summary.json").read_text())["exit_code"] == 1
    row = history.sweeps(sw.store)[0]
    assert (row["status"], row["passed"], row["failed"]) == ("done", 1, 1)
    assert (tmp_path / "reports" / "latest").resolve() == Path(summary["report"]).parent


def test_nodes_under_requalification_count_towards_the_breaker(site, tmp_path):
    drained = {f"b200_00{i}": node(f"b200-00{i}", flags={"DRAIN"}, reason="slurmadm: xid: x [prolog]")
               for i in (1, 2, 3)}
    failing = run("b200-010", verdict="fail", failed_test="stress", detail="GPU1 slow")
    prior = "slurmadm: nvlink: x [periodic]"
    # b200-009 was resumed for re-qualification and fails again: it stays one of the 4 allowed
    sw, slurm = sweep(site, tmp_path, fleet(**drained))
    sw.runs = {"b200-010": failing, "b200-009": run("b200-009", "requalify", "fail", "health", "nvlink", prior)}
    sw._act()
    assert [c[1] for c in slurm.calls] == [("b200-009",)]
    assert "4 of 40 nodes already drained" in sw.runs["b200-010"].action
    # it passes instead: back in service, so the failing node may take its place
    sw, slurm = sweep(site, tmp_path, fleet(**drained))
    sw.runs = {"b200-010": replace(failing, action=""), "b200-009": run("b200-009", "requalify", "pass", prior=prior)}
    sw._act()
    assert [c[1] for c in slurm.calls] == [("b200-010",)] and sw.runs["b200-009"].action == "resumed"


def test_sweep_ids_stay_unique_within_one_second(site, tmp_path):
    sw, _ = sweep(site, tmp_path, fleet(4))
    for _ in range(3):
        history.start_sweep(sw.store, history.unique_sweep_id(sw.store, "20261130-013000"), pid=1, host="h",
                            actor="root", nodes="")
    assert sorted(r["id"] for r in history.sweeps(sw.store)) == [
        "20261130-013000", "20261130-013000-2", "20261130-013000-3"]


def test_a_signal_interrupts_the_work_but_waits_for_the_clean_up():
    import os
    import signal

    from slurmadm.burnin.sweep import Interrupted, _signals_raise

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    fired: list[int] = []
    armed = True
    with pytest.raises(Interrupted, match="SIGTERM"), _signals_raise(lambda: armed, fired):
        os.kill(os.getpid(), signal.SIGTERM)
    fired.clear()
    armed = False
    with _signals_raise(lambda: armed, fired):
        os.kill(os.getpid(), signal.SIGINT)  # during the clean-up: noted, nothing raised
    assert fired == [signal.SIGINT]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # restored


# --- issue 15: a sweep that tested nothing, prerequisites -------------------------------------

def test_a_sweep_that_tested_no_selected_node_fails(site, tmp_path):
    """Every node job failed to start ("Invalid account or account/partition combination"): every
    node 'skipped'. Cron must not read that as success."""
    sw, _ = sweep(site, tmp_path, fleet())
    history.start_sweep(sw.store, sw.id, pid=1, host="h", actor="root", nodes="b200-[001-002]")
    sw.status = "done"
    sw.runs = {n: run(n, verdict="skipped", detail="job did not start: Invalid account or account/partition "
                      "combination specified") for n in ("b200-001", "b200-002")}
    summary = sw._finish()
    assert summary["exit_code"] == 1
    assert "none of the 2 selected node(s) was tested" in summary["problem"]


def test_an_empty_selection_is_still_success(site, tmp_path):
    sw, _ = sweep(site, tmp_path, fleet())
    history.start_sweep(sw.store, sw.id, pid=1, host="h", actor="root", nodes="")
    sw.status = "done"
    assert sw._finish()["exit_code"] == 0


def test_prerequisites_name_the_fix(site):
    from slurmadm.burnin.sweep import missing_prerequisites

    b = site.burnin
    ok = dict(user="root", partitions={"gpu"}, assocs={(b.account, ""): {b.qos, "normal"}},
              qos_names={b.qos, "normal"}, python_ok="")
    assert missing_prerequisites(site, **ok) == []
    none = missing_prerequisites(site, **{**ok, "assocs": {}, "qos_names": {"normal"}})
    assert any(f"QOS {b.qos!r} (burnin.qos) does not exist" in p for p in none)
    assert any(f"user root has no association with account {b.account!r}" in p for p in none)
    assert all("slurmadm accounts apply" in p for p in none)
    qos = missing_prerequisites(site, **{**ok, "assocs": {(b.account, ""): {"normal"}}})
    assert qos and f"may not use QOS {b.qos!r}" in qos[0]
    part = missing_prerequisites(site, **{**ok, "partitions": {"debug"}})
    assert part and "partition 'gpu'" in part[0]
    py = missing_prerequisites(site, **{**ok, "python_ok": "/opt/x/bin/python: not found"})
    assert py and "/opt/x/bin/python: not found" in py[0]


def test_a_drained_node_with_an_open_incident_is_left_to_the_ladder_while_it_runs(site, tmp_path):
    """The fleet replay's loop (issue 37): a node drained for a fallen-off GPU (Xid 79, mended only
    by a reboot) was taken by every nightly sweep for re-qualification, failed its health step,
    was drained again, and sat in the sweep's reservation where the ladder cannot act, so the
    ladder never rebooted it. While `repair run` runs, such a node is the ladder's; a site that
    does not run the ladder (or once the incident is cleared) keeps the re-qualification."""
    import time

    from slurmadm.repair import incidents
    from tests.unit.repair.helpers import health_drain, inventory, xid_line

    detail = xid_line(2, 79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM")
    drained = node("b200-003", flags={"DRAIN"}, reason=f"slurmadm: xid: {detail} [prolog]")
    sw, _slurm = sweep(site, tmp_path, fleet(b200_003=drained))
    inventory(sw.store, "b200-003", [f"16550000000{i}" for i in range(8)])
    health_drain(sw.store, "b200-003", [("xid", detail)], ts=time.time() - 60, run_id="run-1")
    incidents.ingest(sw.store)
    [inc] = incidents.list_incidents(sw.store, node="b200-003")
    assert sw.select(None).chosen.get("b200-003") == "requalify"  # no ladder runs here: burn-in's
    incidents.mark_ladder_run(sw.store)
    sel = sw.select(None)
    assert "b200-003" not in sel.chosen
    assert sel.skipped["b200-003"] == (f"open repair incident {inc.id} GPU_LOST on GPU2, open: left to its ladder "
                                       "(`slurmadm repair status`; `slurmadm repair qualify` tests it)")
    assert "b200-003" not in sw.select("b200-[003-004]").chosen  # named or not
    incidents.mark_ladder_run(sw.store, now=time.time() - 2 * 3600)  # the timer stopped
    assert sw.select(None).chosen.get("b200-003") == "requalify"
    incidents.mark_ladder_run(sw.store)
    incidents.clear(sw.store, "b200-003", "GPU replaced")
    assert sw.select(None).chosen.get("b200-003") == "requalify"


def test_a_busy_node_due_for_burn_in_is_drained_for_the_next_sweep_under_the_breaker(site, tmp_path):
    """burnin.due_days: the sweep drains a due busy node `burnin-due` (its jobs finish; the next
    sweep re-qualifies it); no repair incident follows; the breaker caps it like any drain."""
    from slurmadm.burnin.select import Selection
    from slurmadm.repair import classes

    busy = replace(node("b200-002"), state="ALLOCATED")
    sw, slurm = sweep(site, tmp_path, fleet(b200_002=busy))
    why = "last burned in 45 days ago (burnin.due_days 30); held for the next sweep"
    sw._hold_due(Selection(due={"b200-002": why}))
    reason = f"slurmadm: burnin-due: {why} [burnin]"
    assert slurm.calls == [("drain", ("b200-002",), reason)]
    assert sw.held == {"b200-002": {"why": why, "action": "held for the next sweep", "reason": reason}}
    assert [(e.target, e.reason) for e in sw.store.events(action="node.drain")] == [("b200-002", reason)]
    assert [f.cls for f in classes.classify("burnin-due", why)] == ["DUE"] and not classes.classes()["DUE"].incident
    sw._hold_due(Selection(due={"b200-002": why}))  # again (a re-run): already ours, left alone
    assert len(slurm.calls) == 1 and sw.held["b200-002"]["action"].startswith("not held: already drained")

    drained = {f"b200_0{i}": node(f"b200-0{i}", flags={"DRAIN"}, reason="slurmadm: xid: x [prolog]")
               for i in (30, 31, 32, 33)}  # 4 of 40: the cap (drain_cap_fraction 0.10)
    sw, slurm = sweep(site, tmp_path, fleet(b200_002=busy, **drained))
    sw._hold_due(Selection(due={"b200-002": why}))
    assert slurm.calls == [] and sw.held["b200-002"]["action"].startswith("not held (breaker)")
