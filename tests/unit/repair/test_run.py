"""slurmadm.repair.run: the executor's planning on plain data, and one run with fake Slurm, SSH,
qualifier and incidents (a real store file)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.fleet.ssh import Reply
from slurmadm.repair import run as rr
from slurmadm.repair import qualify
from slurmadm.repair.qualify import Qualification
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit

HEALTH_XID = "slurmadm: xid: GPU2 XID 94 x1 Contained ECC error (RESET_GPU) [prolog]"


@dataclass
class Inc:
    id: str
    node: str
    cls: str = "RESET_GPU"
    state: str = "open"
    slot: str = "2"
    part_kind: str = "gpu"
    why: str = ""
    steps: list = field(default_factory=list)
    step: str = ""  # the ladder's last step (repair/model.py Incident.step)
    updated_ts: float = 1_000.0  # its last signal, or the ladder's last step


@dataclass(frozen=True)
class Step:
    action: str
    why: str = ""
    reason: str = ""


def node(name, *, state="IDLE", flags=("DRAIN",), reason=HEALTH_XID, user="root", parts=("gpu",), gres_used=""):
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, reason_user=user,
                    partitions=tuple(parts), gres_used=gres_used)


def idle(name, parts=("gpu",)):
    return node(name, flags=(), reason="", user="", parts=parts)


def _plan(incs, nodes, step="reset", **kw):
    args = {"next_step": lambda i: Step(step, f"ladder: {step}"), "now": 10_000.0, "fraction": 0.1, "drain_fraction": 0.5}
    args.update(kw)
    return {a.node: a for a in rr.plan(incs, nodes, **args)}


FLEET = [idle(f"n{i:02d}") for i in range(10)]


def fleet_with(*changed):
    by = {n.name: n for n in FLEET}
    for n in changed:
        by[n.name] = n
    return list(by.values())


# ---------------------------------------------------------------------- planning
def test_a_reset_class_incident_on_a_node_health_drained_is_reset():
    got = _plan([Inc("r1", "n01")], fleet_with(node("n01")))
    a = got["n01"]
    assert (a.do, a.slots, a.incident) == ("reset", (2,), "r1")
    assert a.reason.startswith("slurmadm: repair: reset: RESET_GPU GPU2") and a.reason.endswith("[repair]")


@pytest.mark.parametrize("n, do, why", [
    (node("n01", reason="bad DIMM, do not touch", user="alice"), "skip", "drained by alice"),
    (node("n01", flags=("DRAIN", "MAINTENANCE", "RESERVED")), "skip", "MAINT reservation"),
    (node("n01", state="MIXED"), "wait", "jobs still on the node"),
    (node("n01", state="DOWN", flags=("DRAIN",)), "skip", "node is DOWN"),
    (node("n01", flags=("DRAIN", "REBOOT_REQUESTED")), "skip", "REBOOT_REQUESTED"),
    (idle("n01"), "drain", "draining first"),
])
def test_never_acts_on_someone_elses_node_a_maint_reservation_or_running_jobs(n, do, why):
    a = _plan([Inc("r1", "n01")], fleet_with(n))["n01"]
    assert a.do == do and why in a.why


def test_the_breaker_holds_the_second_node_of_a_partition_in_repair():
    nodes = fleet_with(node("n01"), node("n02"))
    got = _plan([Inc("r1", "n01"), Inc("r2", "n02")], nodes)
    assert got["n01"].do == "reset"
    assert got["n02"].do == "hold" and "cap 1" in got["n02"].why and "n01" in got["n02"].why
    # a node already qualifying counts as in repair
    got = _plan([Inc("r1", "n01", state="qualifying"), Inc("r2", "n02")], nodes)
    assert got["n01"].do == "qualify" and got["n02"].do == "hold"
    # a share of 0.2 lets two through
    got = _plan([Inc("r1", "n01"), Inc("r2", "n02")], nodes, fraction=0.2)
    assert got["n01"].do == got["n02"].do == "reset"


def test_a_reboot_is_waited_for_then_power_cycled_then_an_rma_candidate():
    rebooting = node("n01", state="DOWN", flags=("DRAIN", "REBOOT_ISSUED"),
                     reason="slurmadm: repair: reboot: RESET_GPU GPU2: x [repair]")
    inc = Inc("r1", "n01", state="rebooting")
    facts = rr.Facts(reboot_at={"n01": 9_900.0})
    assert _plan([inc], fleet_with(rebooting), facts=facts)["n01"].do == "wait"
    facts = rr.Facts(reboot_at={"n01": 1_000.0})
    assert _plan([inc], fleet_with(rebooting), facts=facts, reboot_timeout_s=600)["n01"].do == "power-cycle"
    facts = rr.Facts(reboot_at={"n01": 1_000.0}, cycled_at={"n01": 9_800.0})
    assert _plan([inc], fleet_with(rebooting), facts=facts, reboot_timeout_s=600)["n01"].do == "wait"
    facts = rr.Facts(reboot_at={"n01": 1_000.0}, cycled_at={"n01": 2_000.0})
    a = _plan([inc], fleet_with(rebooting), facts=facts, reboot_timeout_s=600)["n01"]
    assert a.do == "rma" and a.reason.startswith("slurmadm: repair: rma: ")
    back = node("n01", state="DOWN", flags=(), reason="slurmadm: repair: reboot: RESET_GPU GPU2: x [repair]")
    assert _plan([inc], fleet_with(back), facts=rr.Facts(reboot_at={"n01": 9_000.0}))["n01"].do == "qualify"
    # slurmctld's notes on our reason do not make it someone else's
    noted = node("n01", reason="slurmadm: repair: reboot: RESET_GPU GPU2: x [repair] : reboot issued")
    assert _plan([inc], fleet_with(noted), facts=rr.Facts(reboot_at={"n01": 9_000.0}))["n01"].do == "qualify"
    # registered but with the boot time from before: not rebooted yet
    facts = rr.Facts(reboot_at={"n01": 9_000.0}, not_rebooted={"n01"})
    assert _plan([inc], fleet_with(back), facts=facts)["n01"].do == "wait"
    # someone else's DOWN after our reboot is theirs
    theirs = node("n01", state="DOWN", flags=(), reason="PSU swap", user="bob")
    assert _plan([inc], fleet_with(theirs))["n01"].do == "skip"


def test_two_failed_qualifications_make_a_lemon_and_held_states_stay_put():
    a = _plan([Inc("r1", "n01", state="open")], fleet_with(node("n01")), facts=rr.Facts(failed_quals={"n01": 2}))["n01"]
    assert a.do == "lemon" and a.reason.startswith("slurmadm: repair: lemon: ")
    lemon = node("n01", reason=a.reason)
    assert _plan([Inc("r1", "n01", state="lemon")], fleet_with(lemon))["n01"].do == "none"
    rma = node("n01", reason="slurmadm: repair: rma: RESET_GPU GPU2: third [repair]")
    assert _plan([Inc("r1", "n01", state="rma", why="third")], fleet_with(rma))["n01"].do == "none"


def test_a_lemons_part_replaced_through_an_rma_is_qualified_not_lemoned_again():
    """The admin opened an RMA for the lemon's GPU and the new part is in: the node's failed
    qualifications were the old part's, so the incident the case holds is qualified (and
    returns if it passes); an incident no case holds on the same node is still a lemon."""
    case = Inc("r1", "n01", state="qualifying", why="RMA T-1: part replaced")
    case.evidence = [{"rma": "T-1", "new_part": "S-NEW"}]
    facts = rr.Facts(failed_quals={"n01": 2})
    drained = node("n01", reason="slurmadm: repair: rma T-1: gpu 2 at vendor [repair]")
    assert _plan([case], fleet_with(drained), step="qualify", facts=facts)["n01"].do == "qualify"
    other = Inc("r2", "n01", state="qualifying", why="back from the reboot")
    assert _plan([other], fleet_with(drained), step="qualify", facts=facts)["n01"].do == "lemon"


def test_closed_incidents_and_a_ladder_that_says_none_do_nothing():
    assert _plan([Inc("r1", "n01", state="closed")], fleet_with(node("n01"))) == {}
    assert _plan([Inc("r1", "n01")], fleet_with(node("n01")), step="none")["n01"].do == "none"
    assert _plan([Inc("r1", "nXX")], FLEET)["nXX"].do == "skip"


# ---------------------------------------------------------------------- one run, with fakes
class FakeSlurm:
    def __init__(self, nodes, *, down=False):
        self.by = {n.name: n for n in nodes}
        self.calls: list[tuple] = []
        self.down = down

    def nodes(self, names=None):
        if self.down:
            raise UnreachableError("slurmctld: connection refused")
        return [self.by[n] for n in (names or list(self.by))]

    def _set(self, name, **kw):
        from dataclasses import replace
        self.by[name] = replace(self.by[name], **kw)

    def drain(self, nodes, reason):
        self.calls.append(("drain", tuple(nodes), reason))
        for n in nodes:
            self._set(n, flags=self.by[n].flags | {"DRAIN"}, reason=reason)

    def resume(self, nodes):
        self.calls.append(("resume", tuple(nodes)))
        for n in nodes:
            self._set(n, flags=self.by[n].flags - {"DRAIN"}, reason="")

    def set_reason(self, nodes, reason):
        self.calls.append(("set_reason", tuple(nodes), reason))
        for n in nodes:
            self._set(n, reason=reason)


class FakeIncidents:
    def __init__(self, incs, step="reset", after_failure="reboot"):
        self.incs = {i.id: i for i in incs}
        self.step = step
        self.after_failure = after_failure
        self.quals: list = []
        self.ingested = 0
        self.marked = 0

    def ingest(self):
        self.ingested += 1

    def mark_run(self):
        self.marked += 1

    def current(self):
        return [i for i in self.incs.values() if i.state != "closed"]

    def get(self, incident_id):
        return self.incs[incident_id]

    def next_step(self, inc, now):
        if inc.steps and inc.steps[-1][2] == "failed":
            return Step(self.after_failure, f"ladder: {inc.steps[-1][1]} failed")
        return Step(self.step, f"ladder: {self.step}")

    def advance(self, incident_id, state, step, *, evidence, why, outcome="", rung=None):
        inc = self.incs[incident_id]
        inc.state = state
        inc.steps.append((state, step, outcome))

    def record_qualification(self, incident_id, node, q):
        self.quals.append((incident_id, q.status))

    def failed_qualifications(self, node):
        return sum(1 for _i, status in self.quals if status != "pass")


class FakeRemote:
    def __init__(self, reset_ok=True, unreachable=False):
        self.reset_ok, self.unreachable = reset_ok, unreachable
        self.commands: list[str] = []

    def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
        self.commands.append(command)
        if self.unreachable:
            return [Reply(n, None, "", "connection refused", "unreachable") for n in nodes]
        if command == "true":
            return [Reply(n, 0, "") for n in nodes]
        rc = 0 if self.reset_ok else 255
        detail = "" if self.reset_ok else "Unable to reset GPU 00000000:4D:00.0: In use by another client"
        return [Reply(n, rc, f"slurmadm-reset 2 Enabled {rc} {detail}\n") for n in nodes]

    def close(self):
        pass


class FakeQualifier:
    def __init__(self, results):
        self.results = list(results)
        self.ran: list[str] = []
        self.watched: list[float] = []  # each qualification's link_watch_s

    def recover(self, nodes):
        return []

    def qualify(self, n, on_error="fail", *, link_watch_s=0.0):
        self.ran.append(n.name)
        self.watched.append(link_watch_s)
        status = self.results.pop(0)
        return Qualification(n.name, status, "kat: GPU 2 differs" if status == "fail" else "all passed",
                             "kat" if status == "fail" else "", "42")


@pytest.fixture()
def site(tmp_path):
    return parse_site(edited(put("store.path", str(tmp_path / "slurmadm.db"))), source="site.toml")


def _executor(site, slurm, incs, *, remote=None, qualifier=None, reboots=None):
    store = Store(site.store.path)
    reboots = [] if reboots is None else reboots
    ex = rr.Executor(site, slurm, store, incidents=incs, remote_factory=lambda: remote or FakeRemote(),
                     qualifier=qualifier or FakeQualifier(["pass"]),
                     reboot=lambda n, r: reboots.append((n, r)), boot_time=lambda n: "2026-12-05T05:00:00",
                     power_cycle=lambda n: "on")
    return ex, store


def test_reset_then_qualify_then_resume_and_a_second_run_does_nothing(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name, parts=("gpu",))] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name)])
    remote = FakeRemote()
    ex, store = _executor(site, slurm, incs, remote=remote)
    report = ex.run()
    assert report.exit_code == 0
    assert [d["step"] for d in report.done] == ["reset"]
    assert "-pm 0" in remote.commands[-1] and "--gpu-reset -i 2" in remote.commands[-1]
    assert slurm.calls[0][0] == "set_reason" and slurm.calls[0][2].startswith("slurmadm: repair: reset:")
    assert slurm.calls[-1] == ("resume", (name,))
    assert incs.incs["r1"].state == "closed" and incs.quals == [("r1", "pass")]
    actions = [e.action for e in store.events(target=name)]
    assert {"repair.act.reset", "repair.act.qualify"} <= set(actions)
    assert incs.incs["r1"].steps == [("resetting", "reset", "running"), ("qualifying", "reset", "ok"),
                                     ("qualifying", "qualify", "running"), ("closed", "resume", "ok")]
    # the reset's acknowledgement is kept for the qualification job, which writes it into the
    # node's own store (qualify.acknowledge_xids); health's own keys on the head mean nothing.
    # A reset's covers the reset-class lines only (a reboot-class XID waits for a reboot)
    assert float(store.get_node_state(name, qualify.XID_RESET_ACK_KEY)) > 0
    assert store.get_node_state(name, qualify.XID_ACK_KEY) is None
    assert store.get_node_state(name, "xid-ack") is None and store.get_node_state(name, "health.xid-ack") is None
    before = len(slurm.calls)
    again = ex.run()
    assert again.done == [] and len(slurm.calls) == before


def test_a_failed_reset_falls_back_to_a_reboot(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name)])
    reboots: list = []
    ex, store = _executor(site, slurm, incs, remote=FakeRemote(reset_ok=False), reboots=reboots)
    report = ex.run()
    assert report.done[0]["step"] == "reset" and "reboot requested" in report.done[0]["detail"]
    assert reboots and reboots[0][1].startswith("slurmadm: repair: reboot: RESET_GPU: reset failed")
    assert incs.incs["r1"].state == "rebooting"
    assert store.get_node_state(name, rr.REBOOT_AT)
    assert "repair.reset.failed" in [e.action for e in store.events(target=name)]


def test_two_failed_qualifications_make_the_node_a_lemon_never_resumed(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name, state="qualifying")], step="qualify", after_failure="qualify")
    ex, _store = _executor(site, slurm, incs, qualifier=FakeQualifier(["fail", "fail"]))
    first = ex.run()
    assert first.exit_code == 1 and incs.incs["r1"].state == "open"
    assert slurm.by[name].reason.startswith("slurmadm: repair: qualify: RESET_GPU: failed: kat")
    second = ex.run()  # the ladder says qualify again: it fails again
    assert "lemon" in second.done[0]["detail"] and incs.incs["r1"].state == "lemon"
    assert slurm.by[name].reason.startswith("slurmadm: repair: lemon: ")
    assert ("resume", (name,)) not in slurm.calls
    assert ex.run().done == []  # a lemon stays as it is


def test_slurm_or_a_node_unreachable_changes_nothing(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)], down=True)
    incs = FakeIncidents([Inc("r1", name)])
    ex, store = _executor(site, slurm, incs)
    with pytest.raises(UnreachableError):
        ex.run()
    assert incs.ingested == 0 and store.events() == []
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    ex, store = _executor(site, slurm, incs, remote=FakeRemote(unreachable=True))
    with pytest.raises(UnreachableError, match="connection refused"):
        ex.run()
    assert slurm.calls == [] and incs.incs["r1"].state == "open" and store.events() == []


def test_dry_run_plans_and_changes_nothing(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name)])
    ex, store = _executor(site, slurm, incs)
    report = ex.run(dry_run=True)
    assert [a.do for a in report.actions] == ["reset"] and report.done == []
    assert slurm.calls == [] and store.events() == [] and incs.ingested == 1  # ingest: bookkeeping only


def test_a_reboot_not_back_is_power_cycled_through_the_bmc_under_its_hourly_cap(site):
    name = site.node_names[0]
    stuck = node(name, state="DOWN", flags=("DRAIN", "REBOOT_ISSUED", "NOT_RESPONDING"),
                 reason="slurmadm: repair: reboot: RESET_GPU GPU2: x [repair] : reboot issued")
    slurm = FakeSlurm([stuck] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name, state="rebooting")])
    ex, store = _executor(site, slurm, incs)
    cycled: list[str] = []
    ex.power_cycle = lambda n: cycled.append(n) or "on"
    store.set_node_state(name, rr.REBOOT_AT, "1000.0")  # asked long ago
    for _ in range(site.bmc.recover.max_cycles_per_hour):
        store.audit("bmc.recover.cycle", "elsewhere", "a recovery")
    held = ex.run()
    assert held.done[0]["ok"] is None and "rate limit" in held.done[0]["detail"] and cycled == []
    with store.transaction() as db:
        db.execute("DELETE FROM events WHERE action='bmc.recover.cycle'")
    done = ex.run()
    assert done.done[0]["step"] == "power-cycle" and cycled == [name]
    assert store.get_node_state(name, rr.CYCLED_AT) and incs.incs["r1"].state == "rebooting"
    assert ex.run().done == []  # waiting for slurmd after the cycle: nothing more now


def test_an_interrupted_qualification_is_undone(site, monkeypatch):
    from slurmadm.slurm import jobs as sjobs
    from slurmadm.slurm.model import Reservation

    name = site.node_names[0]
    prior = "slurmadm: repair: qualify: RESET_GPU: after GPU reset [repair]"
    slurm = FakeSlurm([idle(name)])  # resumed inside its reservation when the run died
    store = Store(site.store.path)
    store.set_node_state(name, qualify.QUALIFY_KEY, prior)
    calls: list = []
    monkeypatch.setattr(sjobs, "queued_jobs", lambda user=None: [])
    monkeypatch.setattr(sjobs, "cancel", lambda ids: calls.append(("cancel", ids)))
    monkeypatch.setattr(sjobs, "reservation", lambda n: Reservation(n, name, "root", frozenset({"MAINT"}), "ACTIVE"))
    monkeypatch.setattr(sjobs, "delete_reservation", lambda n: calls.append(("delete", n)))
    q = qualify.Qualifier(site, slurm, store)
    assert q.reservation(name).endswith(f"repair-{name}")
    assert q.recover(site.node_names) == [name]
    assert slurm.calls == [("drain", (name,), prior)] and calls == [("delete", q.reservation(name))]
    assert store.get_node_state(name, qualify.QUALIFY_KEY) is None
    assert [e.action for e in store.events(target=name)] == ["repair.qualify.recover"]
    assert q.recover(site.node_names) == []  # a second run finds nothing left


def test_with_the_real_incidents_and_ladder_a_reset_class_drain_goes_back_to_service(site):
    """repair-core's ingest, ladder and advance under the executor: a health drain for Xid 46
    opens the incident; one run resets, qualifies and resumes; the incident is closed."""
    import time

    from slurmadm.repair import incidents
    from tests.unit.repair.helpers import health_drain, inventory, xid_line

    name = site.node_names[0]
    store = Store(site.store.path)
    inventory(store, name, [f"16550000000{i}" for i in range(8)])
    detail = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
    health_drain(store, name, [("xid", detail)], ts=time.time() - 60, run_id="run-1")
    drained = node(name, reason=f"slurmadm: xid: {detail} [prolog]")
    slurm = FakeSlurm([drained] + [idle(n) for n in site.node_names[1:]])
    ex = rr.Executor(site, slurm, store, remote_factory=FakeRemote, qualifier=FakeQualifier(["pass"]),
                     reboot=lambda n, r: None, boot_time=lambda n: "", power_cycle=lambda n: "on")
    plan = ex.run(dry_run=True)
    assert [(a.node, a.do) for a in plan.actions] == [(name, "reset")]
    assert not incidents.ladder_running(store, 3600)  # a dry run is not the ladder running
    report = ex.run()
    assert report.exit_code == 0 and [d["step"] for d in report.done] == ["reset"]
    assert incidents.ladder_running(store, 3600)  # burn-in leaves nodes with open incidents to it
    assert not incidents.ladder_running(store, 3600, now=time.time() + 3601)
    inc = incidents.list_incidents(store, node=name)[0]
    assert (inc.state, inc.step, inc.outcome, inc.cls, inc.slot) == ("closed", "resume", "ok", "RESET_GPU", "2")
    assert ("resume", (name,)) in slurm.calls
    quals = store.query("SELECT status FROM qualifications WHERE node=?", (name,))
    assert [q["status"] for q in quals] == ["passed"]
    assert ex.run().done == []


def test_the_cli_exits_3_and_changes_nothing_when_slurm_is_unreachable(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from slurmadm import slurm as slurm_pkg
    from slurmadm.cli import cli

    f = tmp_path / "site.toml"
    f.write_text(edited(put("store.path", str(tmp_path / "store.db"))))
    monkeypatch.setattr(slurm_pkg, "get_backend", lambda *a, **k: FakeSlurm([], down=True))
    res = CliRunner().invoke(cli, ["repair", "run", "--site", str(f)])
    assert res.exit_code == 3 and "slurmctld: connection refused" in res.output
    assert Store(str(tmp_path / "store.db")).events() == []


def test_port_faults_under_one_leaf_become_a_leaf_incident_and_no_step_acts_for_it(site):
    """`repair run` scans for suspect leaves with its ingest (repair/leaf.py): four nodes of one
    scalable unit with link_downed rising give one LEAF incident on the leaf, and the run acts on
    no node for it (no drain, no reset: the breaker and a person handle the leaf)."""
    import time

    store = Store(site.store.path)
    unit, members = site.scalable_units[0]
    now = time.time()
    for i, n in enumerate(members[:4]):
        store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                         " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (now - 120 + i, f"r{i}", n, "periodic", "infiniband", "fail", "drain",
                          "mlx5_0:1 link_downed rose by 4 (> 1)", None, 1.0))
    store.db.commit()
    slurm = FakeSlurm([idle(n) for n in site.node_names])
    ex = rr.Executor(site, slurm, store, remote_factory=FakeRemote, qualifier=FakeQualifier(["pass"]),
                     reboot=lambda n, r: None, boot_time=lambda n: "", power_cycle=lambda n: "on")
    assert ex.run(dry_run=True).actions == [] and store.query("SELECT * FROM incidents") == []
    report = ex.run()
    rows = store.query("SELECT node, part_kind, part_key, class, state FROM incidents")
    assert rows == [{"node": unit, "part_kind": "leaf", "part_key": unit, "class": "LEAF", "state": "open"}]
    assert report.actions == [] and report.done == []
    assert not [c for c in slurm.calls if c[0] in ("drain", "set_reason", "resume")]


def test_a_qualification_slurm_refuses_is_no_verdict_on_the_node(site):
    """The fleet replay (issue 37) found a missing burn-in account making nodes lemons: srun's
    "Unable to allocate resources: Invalid account" counted as a failed qualification, so the
    ladder rebooted the node and, at the second, called it a lemon. Nothing ran on the node: it
    stays drained and qualifying, no failed qualification is recorded, and a later run qualifies it
    once Slurm accepts the job."""
    import time

    from slurmadm.repair import incidents
    from slurmadm.repair.qualify import judge
    from tests.unit.repair.helpers import health_drain, inventory, xid_line

    refused = judge("n", "", "srun: error: Unable to allocate resources: Invalid account or account/partition "
                    "combination specified", 1)
    assert refused.refused and not judge("n", "", "srun: error: Socket timed out", 1).refused

    class Refusing(FakeQualifier):
        def qualify(self, n, on_error="fail", *, link_watch_s=0.0):
            self.ran.append(n.name)
            if self.results.pop(0) == "refused":
                return judge(n.name, "", "srun: error: Unable to allocate resources: Invalid account or "
                             "account/partition combination specified", 1)
            return Qualification(n.name, "pass", "all passed", "", "42")

    name = site.node_names[0]
    store = Store(site.store.path)
    inventory(store, name, [f"16550000000{i}" for i in range(8)])
    detail = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
    health_drain(store, name, [("xid", detail)], ts=time.time() - 60, run_id="run-1")
    slurm = FakeSlurm([node(name, reason=f"slurmadm: xid: {detail} [prolog]")] + [idle(n) for n in site.node_names[1:]])
    reboots: list = []
    ex = rr.Executor(site, slurm, store, remote_factory=FakeRemote, qualifier=Refusing(["refused"] * 3 + ["pass"]),
                     reboot=lambda n, r: reboots.append(n), boot_time=lambda n: "", power_cycle=lambda n: "on")
    for _ in range(3):  # past lemon_failed_qualifications (2): a refusal is never counted
        report = ex.run()
        assert report.exit_code == 1 and "could not run" in report.done[0]["detail"]
        inc = incidents.list_incidents(store, node=name)[0]
        assert inc.state == "qualifying", inc
        assert slurm.by[name].reason.startswith("slurmadm: repair: qualify: RESET_GPU: could not run: "
                                                "qualification job refused by Slurm")
    assert reboots == [] and ("resume", (name,)) not in slurm.calls
    assert incidents.failed_qualifications(store, node=name) == 0
    assert "repair.qualify.refused" in [e.action for e in store.events(target=name)]
    report = ex.run()  # the site created the account: the job runs and passes
    assert report.exit_code == 0 and ("resume", (name,)) in slurm.calls
    assert incidents.list_incidents(store, node=name)[0].state == "closed"
    statuses = [q["status"] for q in store.query("SELECT status FROM qualifications WHERE node=? ORDER BY id", (name,))]
    assert statuses == ["error", "error", "error", "passed"]


def test_a_passed_qualification_closes_the_other_incidents_the_same_fault_opened(site):
    """The fleet replay (issue 37): Xid 95 with NVML's "GPU Reset Required" opens two incidents on
    one GPU (RESET_GPU and ECC). The ladder reset the GPU, qualified the node and resumed it, then took
    the ECC incident and drained the node again, jobs and all, for a fault already repaired. The
    passed qualification closes both; a second run does nothing."""
    import time

    from slurmadm.repair import incidents
    from tests.unit.repair.helpers import health_drain, inventory

    name = site.node_names[0]
    store = Store(site.store.path)
    inventory(store, name, [f"16550000000{i}" for i in range(8)])
    detail = "GPU2 NVML recovery action: GPU Reset Required; GPU2 XID 95 ROBUST_CHANNEL_UNCONTAINED_ERROR (RESET_GPU)"
    health_drain(store, name, [("xid", detail)], ts=time.time() - 60, run_id="run-1")
    slurm = FakeSlurm([node(name, reason=f"slurmadm: xid: {detail} [epilog]")] + [idle(n) for n in site.node_names[1:]])
    ex = rr.Executor(site, slurm, store, remote_factory=FakeRemote, qualifier=FakeQualifier(["pass"]),
                     reboot=lambda n, r: None, boot_time=lambda n: "", power_cycle=lambda n: "on")
    report = ex.run()
    opened = incidents.list_incidents(store, node=name)
    assert len(opened) >= 2, [(i.cls, i.part_key) for i in opened]  # the case: one fault, two incidents
    assert report.exit_code == 0 and ("resume", (name,)) in slurm.calls
    assert {i.state for i in opened} == {"closed"}, [(i.cls, i.state) for i in opened]
    calls = len(slurm.calls)
    assert ex.run().done == [] and len(slurm.calls) == calls  # nothing left to drain the node for


def test_a_run_killed_mid_reset_is_carried_on_by_the_next(site):
    """Issue 46: `repair run` SIGKILLed after it took the drain and marked the incident
    `resetting` (before the reset's result): the next run re-reads Slurm, sees its own reset
    drain, resets again (idempotent), qualifies and resumes; a third run does nothing."""
    name = site.node_names[0]
    taken = "slurmadm: repair: reset: RESET_GPU GPU2: ladder: reset [repair]"
    slurm = FakeSlurm([node(name, reason=taken)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name, state="resetting")])
    remote = FakeRemote()
    ex, store = _executor(site, slurm, incs, remote=remote)
    plan = ex.run(dry_run=True)
    assert [(a.do, a.why) for a in plan.actions] == [("reset", "reset interrupted; again")]
    report = ex.run()
    assert report.exit_code == 0 and [d["step"] for d in report.done] == ["reset"]
    assert sum("--gpu-reset -i 2" in c for c in remote.commands) == 1
    assert incs.incs["r1"].state == "closed" and slurm.calls[-1] == ("resume", (name,))
    assert float(store.get_node_state(name, qualify.XID_RESET_ACK_KEY)) > 0
    assert ex.run().done == []


class MeanwhileQualifier(FakeQualifier):
    """Qualifies the first node, and meanwhile Slurm changes under the second (`change`)."""

    def __init__(self, slurm, other, change):
        super().__init__(["pass", "pass"])
        self.slurm, self.other, self.change = slurm, other, change

    def qualify(self, n, on_error="fail", *, link_watch_s=0.0):
        if n.name != self.other:
            self.slurm._set(self.other, **self.change)
        return super().qualify(n, on_error, link_watch_s=link_watch_s)


@pytest.mark.parametrize("change, said", [
    ({"state": "MIXED", "flags": frozenset(), "reason": "", "reason_user": ""}, "no longer drained"),
    ({"state": "MIXED"}, "jobs still on the node"),
    ({"reason": "reseating the riser", "reason_user": "alice"}, "drained by alice"),
    ({"state": "DOWN"}, "DOWN"),
])
def test_each_step_re_reads_its_node_and_leaves_one_that_changed_since_the_plan(site, change, said):
    first, second = site.node_names[:2]
    reason = "slurmadm: repair: qualify: RESET_GPU GPU2: after reset [repair]"
    slurm = FakeSlurm([node(first, reason=reason), node(second, reason=reason)]
                      + [idle(n) for n in site.node_names[2:]])
    incs = FakeIncidents([Inc("r1", first, state="qualifying"), Inc("r2", second, state="qualifying")])
    qualifier = MeanwhileQualifier(slurm, second, change)
    ex, store = _executor(site, slurm, incs, qualifier=qualifier)
    report = ex.run()
    assert [a.do for a in report.actions] == ["qualify", "qualify"]  # both planned
    assert qualifier.ran == [first]  # only the first taken
    done = {d["node"]: d for d in report.done}
    assert done[first]["ok"] is True
    assert done[second]["ok"] is None and said in done[second]["detail"] and "since the plan" in done[second]["detail"]
    assert report.exit_code == 0
    assert incs.incs["r2"].state == "qualifying" and incs.incs["r2"].steps == []  # left for the next run
    assert not [c for c in slurm.calls if second in c[1]]  # nothing done to it
    assert not [e for e in store.events(target=second) if e.action.startswith("repair.act.")]


def test_a_reset_takes_every_gpu_of_the_node_an_open_incident_wants_reset():
    """The demo's b200-003: an ECC incident on GPU5 (reset) and a RESET_GPU incident on GPU2. The
    run reset GPU5 only, and the passed qualification closed GPU2's incident with it, its XID
    acknowledged by a reset it never had."""
    incs = [Inc("r1", "n01", cls="ECC", slot="5"), Inc("r2", "n01", slot="2"), Inc("r3", "n01", slot="5")]
    a = _plan(incs, fleet_with(node("n01")))["n01"]
    assert (a.do, a.incident, a.slots) == ("reset", "r1", (2, 5)), a
    assert "also GPU2 (RESET_GPU r2)" in a.why and "r3" not in a.why  # GPU5 is already in it
    # an incident whose step is not a reset adds nothing
    a = _plan(incs[:2], fleet_with(node("n01")), next_step=lambda i: Step("reset" if i.cls == "ECC" else "none"))["n01"]
    assert a.slots == (5,)


def test_of_incidents_merely_open_the_strongest_step_goes_first():
    """A reboot resets every GPU: it goes before a reset whatever the incident ids say."""
    incs = [Inc("r1", "n01", slot="2"), Inc("r9", "n01", cls="RESTART_BM", slot="")]
    steps = {"RESET_GPU": "reset", "RESTART_BM": "reboot"}
    a = _plan(incs, fleet_with(node("n01")), next_step=lambda i: Step(steps[i.cls]))["n01"]
    assert (a.do, a.incident) == ("reboot", "r9")
    # one in progress still goes first (a reset under way is finished, not overtaken)
    incs[0].state = "resetting"
    a = _plan(incs, fleet_with(node("n01")), next_step=lambda i: Step(steps[i.cls]))["n01"]
    assert (a.do, a.incident) == ("reset", "r1")


def test_the_gpus_of_several_incidents_are_reset_in_one_step(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name, slot="2"), Inc("r2", name, slot="5")])
    remote = FakeRemote()
    ex, store = _executor(site, slurm, incs, remote=remote)
    report = ex.run()
    assert [d["step"] for d in report.done] == ["reset"] and report.exit_code == 0
    script = remote.commands[-1]  # one SSH command resets each in turn
    assert "--gpu-reset -i 2" in script and "--gpu-reset -i 5" in script, remote.commands


def test_a_node_repaired_for_an_hca_is_qualified_with_the_link_watch(site):
    """A flapping link came back from the ladder's reboot between flaps (the fleet replay): the
    qualification of an HCA incident watches the links `repair.link_watch_s` (600 s unless the
    site says otherwise); a GPU's qualification takes no longer than its tests."""
    name, other = site.node_names[:2]
    hca = node(name, reason="slurmadm: infiniband: mlx5_3 link flapped 2 times in 6 h [periodic]")
    slurm = FakeSlurm([hca, node(other)] + [idle(n) for n in site.node_names[2:]])
    incs = FakeIncidents([Inc("h1", name, cls="HCA", slot="mlx5_3/1", part_kind="hca", state="qualifying"),
                          Inc("g1", other, state="qualifying")], step="qualify")
    q = FakeQualifier(["pass", "pass"])
    ex, store = _executor(site, slurm, incs, qualifier=q)
    report = ex.run()
    assert sorted(zip(q.ran, q.watched)) == sorted([(name, 600.0), (other, 0.0)]), report.done
    said = {e.target: e.reason for e in store.events() if e.action == "repair.act.qualify"}
    assert said[name].endswith("link watch (at least 600 s)") and said[other].endswith("link watch")


def test_the_default_link_watch_fits_in_the_qualification_jobs_limit():
    short = parse_site(edited(put("burnin.job_time_limit", "00:10:00")), source="site.toml")
    assert rr.link_watch_s(short, ["HCA"]) == 300.0  # half the job's 10 minutes, not the default 600
    assert rr.link_watch_s(short, ["ECC", "RESET_GPU"]) == 0.0
    assert rr.link_watch_s(parse_site(edited(), source="site.toml"), {"HCA"}) == 600.0


# ---------------------------------------------------------------------- a burn-in pass closes
def Opened(id, node, cls="NVLINK", slot="1", **kw):  # noqa: N802 - an incident the ladder has not acted on
    return Inc(id, node, cls=cls, slot=slot, **kw)


def test_a_burn_in_pass_after_the_last_signal_closes_what_it_proves_and_only_that():
    # n01: the sweep that passed it began after its NVLINK and HCA incidents' last signals
    # n02: the sweep began before the incident's last signal (a fault found again since)
    # n03: a PSU the BMC reports: burn-in's tests do not look at it; the ladder drains for it
    # n04: the ladder took its incident already (a reset): the ladder's to finish
    incs = [Opened("r1", "n01"), Opened("r2", "n01", cls="HCA", slot="mlx5_3/1", part_kind="hca"),
            Opened("r3", "n02", updated_ts=2_500.0), Opened("r4", "n03", cls="PSU", slot="PSU2", part_kind="psu"),
            Opened("r5", "n04", state="qualifying", step="reset")]
    passed = {n: (2_000.0, "20261207-020000") for n in ("n01", "n02", "n03", "n04")}
    got = _plan(incs, FLEET, step="reset", facts=rr.Facts(burnin_passed=passed))
    assert got["n01"].do == "close" and got["n01"].closes == ("r1", "r2")
    assert got["n01"].why == "passed burn-in sweep 20261207-020000, begun after the last signal of NVLINK r1, HCA r2"
    assert got["n01"].to_json()["closes"] == ["r1", "r2"]
    assert got["n02"].do == "drain" and got["n03"].do == "drain"  # in service: drained for the ladder's step
    assert got["n04"].do != "close"
    assert "closes" not in got["n02"].to_json()
    # no pass on record: nothing closes
    assert _plan(incs[:1], FLEET, facts=rr.Facts())["n01"].do == "drain"


def test_with_the_real_ladder_a_node_burn_in_passed_is_not_drained_again(site):
    """The demo's story (stop 57): burn-in drained b200-002 for GPU1's NVLinks (the NVLINK
    incident), the cable was fixed and the next sweep re-qualified and resumed the node. On a site
    whose ladder timer was not running, the incident stayed open, and the ladder's next run drained
    the node again for a GPU reset it no longer needed. Now the run closes it and leaves the node."""
    import time

    from slurmadm.repair import incidents, views
    from slurmadm.repair.model import STATES
    from tests.unit.repair.helpers import health_drain, inventory

    name = site.node_names[1]
    store = Store(site.store.path)
    inventory(store, name, [f"16550000000{i}" for i in range(8)])
    t0 = time.time() - 3600
    health_drain(store, name, [("burnin-health", "nvlink: GPU1 2 of 18 NVLinks inactive")], ts=t0,
                 run_id="sweep-1", context="burnin")
    slurm = FakeSlurm([idle(n) for n in site.node_names])  # resumed by the sweep that passed it
    ex = rr.Executor(site, slurm, store, remote_factory=FakeRemote, qualifier=FakeQualifier([]),
                     reboot=lambda n, r: None, boot_time=lambda n: "", power_cycle=lambda n: "on")
    ex.incidents.ingest()
    (inc,) = incidents.list_incidents(store, node=name)
    assert (inc.cls, inc.state) == ("NVLINK", "open")
    # a sweep that began before the drain passed it: no proof; the ladder drains it for its reset
    with store.transaction() as db:
        for sid, began, verdict in (("20261207-010000", t0 - 600, "pass"), ("20261207-020000", t0 + 600, "fail")):
            db.execute("INSERT INTO burnin_sweeps (id, started, finished, status, pid, host, actor, nodes) "
                       "VALUES (?,?,?,'done',1,'head','root',?)", (sid, began, began + 300, name))
            db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, ts) VALUES (?,?,'requalify',?,?)",
                       (sid, name, verdict, began + 300))
    assert [(a.node, a.do) for a in ex.run(dry_run=True).actions] == [(name, "drain")]

    def status() -> list[tuple[str, str]]:  # what `repair status` shows as the next step
        shown = incidents.list_incidents(store, states=[s for s in STATES if s != "closed"])
        return [(r["next"], r["next_why"]) for r in views.status_json(shown, views.settings_of(site), store, time.time())]

    assert [n for n, _ in status()] == ["reset"]
    with store.transaction() as db:
        db.execute("INSERT INTO burnin_sweeps (id, started, finished, status, pid, host, actor, nodes) "
                   "VALUES ('20261207-030000',?,?,'done',1,'head','root',?)", (t0 + 1200, t0 + 1500, name))
        db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, ts) VALUES "
                   "('20261207-030000',?,'requalify','pass',?)", (name, t0 + 1500))
    plan = ex.run(dry_run=True)
    assert [(a.node, a.do, a.closes) for a in plan.actions] == [(name, "close", (inc.id,))]
    # `repair status` tells the same step as the plan, with the same why
    assert status() == [("close", plan.actions[0].why)] and "20261207-030000" in plan.actions[0].why
    assert incidents.get(store, inc.id).state == "open"  # a dry run closes nothing
    report = ex.run()
    assert report.exit_code == 0 and [(d["step"], d["ok"]) for d in report.done] == [("close", True)]
    assert slurm.calls == []  # the node in service was not touched
    closed = incidents.get(store, inc.id)
    assert (closed.state, closed.step, closed.outcome) == ("closed", "resume", "ok")
    assert "passed burn-in sweep 20261207-030000" in closed.why
    assert any(e.get("burnin", {}).get("sweep") == "20261207-030000" for e in closed.evidence if isinstance(e, dict))
    assert {"repair.act.close", "repair.resume"} <= {e.action for e in store.events(target=name)}
    assert ex.run().done == []
