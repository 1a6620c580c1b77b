"""Stragglers through the sweep (fake Slurm backend, real store): slow in one sweep warns, slow in
two in a row drains `burnin-straggler` through the breaker, a clean sweep resumes it; baselines
are seeded from a passed sweep and judge the next one."""

from __future__ import annotations

import datetime as dt

import pytest

from slurmadm.burnin import history, report
from slurmadm.burnin.model import TestResult
from slurmadm.burnin.select import SUSPECT
from slurmadm.burnin.sweep import NodeRun, Sweep
from slurmadm.site import parse_site
from slurmadm.store import Store

from tests.unit.burnin.test_fleet import gpu_node
from tests.unit.burnin.test_sweep_logic import EXAMPLE, FakeSlurm, fleet, node

pytestmark = pytest.mark.unit

NODES = [f"b200-{i:03d}" for i in range(1, 9)]
REASON = "slurmadm: burnin-straggler: stress-tflops 800 = 80% of fleet median 1002 [burnin]"
HELD = ("slurmadm: burnin-suspect: stress-tflops 800 = 80% of fleet median 1002 (slow in 1 sweep of 2; "
        "held for the next sweep's re-test) [burnin]")


def site_text(tmp_path) -> str:
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp_path}/s.db")
    return text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl")


@pytest.fixture()
def site(tmp_path):
    return parse_site(site_text(tmp_path))


@pytest.fixture()
def unheld(tmp_path):
    """burnin.straggler.hold_suspects = false: a node found slow once stays in service."""
    text = site_text(tmp_path)
    assert "\nhold_suspects = true " in text
    return parse_site(text.replace("\nhold_suspects = true ", "\nhold_suspects = false"))


def one_sweep(site, tmp_path, slurm, day: int, slow: dict[str, float], prior: dict[str, str] | None = None,
              nodes: list[str] = NODES):
    """A sweep over `nodes` whose per-node jobs all passed; `slow`: node -> its slowest GPU's TFLOPS."""
    prior = prior or {}
    sw = Sweep(site, backend=slurm, store=Store(site.store.path), site_file=str(EXAMPLE),
               report_dir=str(tmp_path / "reports"), now=dt.datetime(2026, 12, day, 1, 30))
    history.start_sweep(sw.store, sw.id, pid=1, host="h", actor="root", nodes="b200-[001-008]")
    sw.status = "done"
    for i, n in enumerate(nodes):
        entry = gpu_node(n, tflops=slow.get(n, 1000.0 + i))
        sw.runs[n] = NodeRun(n, "requalify" if n in prior else "idle", prior_reason=prior.get(n, ""),
                             verdict="pass", tests=[TestResult.from_json(t) for t in entry["tests"]])
    sw._conclude()
    return sw, sw._finish()


def test_slow_once_is_held_slow_twice_drained_and_a_clean_sweep_resumes_it(site, tmp_path):
    """Found slow once: held out of service for the next sweep's re-test (burnin.straggler.
    hold_suspects, the default), which finds it slow again and drains it `burnin-straggler`."""
    slurm = FakeSlurm(fleet(40))
    sw1, s1 = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    r1 = sw1.runs["b200-008"]
    assert (r1.fleet["level"], r1.slow_streak, r1.action, r1.reason) == ("slow", 1, "held for a re-test", HELD)
    assert slurm.calls == [("drain", ("b200-008",), HELD)] and s1["exit_code"] == 0
    assert all(r.action == "" for n, r in sw1.runs.items() if n != "b200-008")
    v = report.verdict(s1)
    assert v["counts"]["straggler"] == 1 and v["counts"]["fail"] == 0
    assert "1/8 STRAGGLER: b200-008 stress-tflops 800 = 80% of fleet median 1002" in v["text"]
    assert history.baselines(sw1.store) == {}  # a sweep with a straggler seeds no baseline

    slurm.resume(["b200-008"])  # what the next sweep's _prepare does inside its reservation
    sw2, s2 = one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0}, prior={"b200-008": HELD})
    r2 = sw2.runs["b200-008"]
    assert (r2.slow_streak, r2.action, r2.reason) == (2, "drained", REASON)
    assert slurm.calls[1:] == [("resume", ("b200-008",)), ("drain", ("b200-008",), REASON)]
    assert s2["exit_code"] == 1
    assert [e.target for e in sw2.store.events(action="node.drain")] == ["b200-008", "b200-008"]
    assert "drained" in report.verdict(s2)["text"]

    # the next sweep re-qualifies it (an own drain): clean this time, so it is resumed
    slurm.resume(["b200-008"])  # what the sweep's _prepare does inside its reservation
    sw3, s3 = one_sweep(site, tmp_path, slurm, 3, {}, prior={"b200-008": REASON})
    assert sw3.runs["b200-008"].action == "resumed" and sw3.runs["b200-008"].fleet["level"] == "ok"
    assert s3["exit_code"] == 0
    # a passed sweep seeds the baseline of the profile
    base = history.baselines(sw3.store)["hgx-b200"]["stress-tflops"]
    assert base["nodes"] == 8 and base["source"] == f"sweep {sw3.id}"
    hist = history.node_history(sw3.store, "b200-008")
    assert [h["fleet"]["level"] for h in hist] == ["ok", "slow", "slow"]


def test_a_held_suspect_at_speed_in_its_re_test_is_resumed_and_opens_no_incident(site, tmp_path):
    """One slow sweep was noise: the re-test finds the node at speed and resumes it. The hold is no
    fault: the repair ladder opens no incident for it (class SUSPECT) and leaves it to burn-in."""
    from slurmadm.repair import classes

    slurm = FakeSlurm(fleet(40))
    one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    slurm.resume(["b200-008"])
    sw2, s2 = one_sweep(site, tmp_path, slurm, 2, {}, prior={"b200-008": HELD})
    assert (sw2.runs["b200-008"].action, sw2.runs["b200-008"].slow_streak, s2["exit_code"]) == ("resumed", 0, 0)
    assert history.suspects(sw2.store) == {}
    faults = classes.classify("burnin-suspect", HELD.split("burnin-suspect: ", 1)[1])
    assert [f.cls for f in faults] == ["SUSPECT"] and not classes.classes()["SUSPECT"].incident
    assert [f.cls for f in classes.classify("burnin-straggler", "stress-tflops 800")] == ["BURNIN"]


def test_no_suspect_is_held_where_no_sweep_could_re_test_it(tmp_path):
    """burnin.reservation = "": a sweep tests idle nodes only and never re-qualifies a drained
    one, so a suspect held would stay drained for good: it stays in service instead."""
    text = site_text(tmp_path)
    assert '\nreservation = "slurmadm_burnin"' in text
    site = parse_site(text.replace('\nreservation = "slurmadm_burnin"', '\nreservation = ""'))
    slurm = FakeSlurm(fleet(40))
    sw, _ = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    assert (sw.runs["b200-008"].fleet["level"], sw.runs["b200-008"].action) == ("slow", "") and slurm.calls == []


def test_held_suspects_count_against_the_breaker(site, tmp_path):
    drained = {f"b200_0{i}": node(f"b200-0{i}", flags={"DRAIN"}, reason="slurmadm: xid: x [prolog]")
               for i in (30, 31, 32, 33)}  # 4 of 40 already: the cap (drain_cap_fraction 0.10)
    slurm = FakeSlurm(fleet(40, **drained))
    sw, s = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    assert sw.runs["b200-008"].action.startswith("not drained (breaker)") and slurm.calls == []
    assert s["exit_code"] == 0


def test_a_requalifying_straggler_still_slow_stays_drained(unheld, tmp_path):
    site = unheld
    slurm = FakeSlurm(fleet(40))
    one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0})
    slurm.resume(["b200-008"])
    sw3, _ = one_sweep(site, tmp_path, slurm, 3, {"b200-008": 790.0}, prior={"b200-008": REASON})
    assert sw3.runs["b200-008"].action == "drained"
    assert sw3.runs["b200-008"].reason.startswith("slurmadm: burnin-straggler: stress-tflops 790 = 79%")


def test_the_breaker_caps_straggler_drains(unheld, tmp_path):
    site = unheld
    drained = {f"b200_0{i}": node(f"b200-0{i}", flags={"DRAIN"}, reason="slurmadm: xid: x [prolog]")
               for i in (30, 31, 32, 33)}  # 4 of 40 already: the cap (drain_cap_fraction 0.10)
    slurm = FakeSlurm(fleet(40, **drained))
    one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    sw2, _ = one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0})
    assert sw2.runs["b200-008"].action.startswith("not drained (breaker)")
    assert slurm.calls == []
    assert [e.target for e in sw2.store.events(action="burnin.drain-capped")] == ["b200-008"]


def test_a_baseline_catches_a_fleet_that_degraded_together(site, tmp_path):
    slurm = FakeSlurm(fleet(40))
    store = Store(site.store.path)
    history.set_baselines(store, {"hgx-b200": {"stress-tflops": {"median": 1250.0, "mad": 2.0, "nodes": 8}}},
                          source="file baseline.json")
    sw, s = one_sweep(site, tmp_path, slurm, 1, {})
    assert all(r.fleet["level"] == "slow" for r in sw.runs.values())  # 1000 = 80% of 1250
    assert sw.runs["b200-001"].fleet["worst"]["scope"] == "baseline"
    assert s["fleet"]["fleet"][0]["share"] == pytest.approx(1003.5 / 1250.0, abs=1e-3)


def test_straggler_verdicts_can_be_turned_off(tmp_path):
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp_path}/s.db")
    text = text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl")
    site = parse_site(text.replace("[burnin.straggler]\nenabled = true ", "[burnin.straggler]\nenabled = false"))
    slurm = FakeSlurm(fleet(40))
    one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    sw, s = one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0})
    assert sw.runs["b200-008"].fleet is None and slurm.calls == [] and s["fleet"] is None


def test_the_next_sweep_takes_a_suspected_straggler_first(unheld, tmp_path):
    """Found slow once and left in service (no hold), the node is swept again the next night
    before the 32 never-tested nodes (max_nodes 8 of 40): a straggler is confirmed in two nights,
    not at its turn."""
    site = unheld
    slurm = FakeSlurm(fleet(40))
    sw1, _ = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    assert history.suspects(sw1.store) == {
        "b200-008": f"slow in sweep {sw1.id}: stress-tflops 800 = 80% of fleet median 1002"}
    nxt = Sweep(site, backend=slurm, store=Store(site.store.path), site_file=str(EXAMPLE),
                report_dir=str(tmp_path / "reports"), now=dt.datetime(2026, 12, 2, 1, 30))
    sel = nxt.select(None)
    assert list(sel.chosen.items())[0] == ("b200-008", SUSPECT)
    assert list(sel.chosen)[1:] == [f"b200-{i:03d}" for i in range(9, 16)]  # then the never-tested ones

    # a later sweep that finds it at speed clears the suspicion
    one_sweep(site, tmp_path, slurm, 2, {})
    assert history.suspects(sw1.store) == {}


def test_a_one_node_sweep_is_judged_against_the_baseline(unheld, tmp_path):
    """Too few nodes for a fleet verdict (burnin.straggler.min_nodes 4): the profile's baseline
    (from a commissioning sweep) still finds the straggler, and two such nights drain it."""
    site = unheld
    slurm = FakeSlurm(fleet(40))
    store = Store(site.store.path)
    history.set_baselines(store, {"hgx-b200": {"stress-tflops": {"median": 1002.0, "mad": 2.0, "nodes": 8}}},
                          source="sweep commissioning")
    sw1, _ = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 700.0}, nodes=["b200-008"])
    r1 = sw1.runs["b200-008"]
    assert (r1.fleet["level"], r1.fleet["worst"]["scope"], r1.slow_streak) == ("slow", "baseline", 1)
    assert "b200-008" in history.suspects(store)
    sw2, _ = one_sweep(site, tmp_path, slurm, 2, {"b200-008": 700.0}, nodes=["b200-008"])
    assert sw2.runs["b200-008"].action == "drained"
    assert slurm.calls == [("drain", ("b200-008",),
                            "slurmadm: burnin-straggler: stress-tflops 700 = 70% of baseline median 1002 [burnin]")]
