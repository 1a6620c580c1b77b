"""`slurmadm repair qualify NODE...` (repair/gate.py): the qualification gate on an admin's word,
planned on plain data and run with the executor's fakes (tests/unit/repair/test_run.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmadm.errors import UnreachableError, UsageError
from slurmadm.repair import gate
from slurmadm.repair import run as rr
from slurmadm.site import parse_site
from slurmadm.store import Store
from tests.unit.repair.test_run import FakeIncidents, FakeQualifier, FakeSlurm, Inc, idle, node
from tests.unit.siteedit import DELETE, edited, put

pytestmark = pytest.mark.unit

SITE_NODES = [f"n{i:02d}" for i in range(10)]


def _plan(names, nodes, incs=(), fraction=0.5):
    return {a.node: a for a in gate.plan(names, SITE_NODES, nodes, list(incs), drain_fraction=fraction)}


def fleet(*changed):
    by = {f"n{i:02d}": idle(f"n{i:02d}") for i in range(10)}
    by.update({n.name: n for n in changed})
    return list(by.values())


@pytest.mark.parametrize("n, inc, words", [
    (None, None, "not a node of the site file"),
    (node("n01", state="MIXED"), None, "jobs still on the node"),
    (node("n01", state="DOWN"), None, "is DOWN"),
    (node("n01", flags=("DRAIN", "NOT_RESPONDING")), None, "NOT_RESPONDING"),
    (node("n01", flags=("DRAIN", "MAINTENANCE", "RESERVED")), None, "MAINT reservation"),
    (node("n01"), Inc("r1", "n01", state="lemon"), "`slurmadm repair clear` first"),
    (node("n01"), Inc("r1", "n01", state="rma"), "`slurmadm repair rma qualify`"),
])
def test_a_node_that_cannot_be_qualified_now_is_one_line(n, inc, words):
    names = ["n01"] if n is not None else ["n01", "zz99"]
    with pytest.raises(UsageError, match=words.replace("`", ".")):
        _plan(names, fleet(*([n] if n else [])), [inc] if inc else [])


def test_slurm_not_reporting_a_site_node_is_one_line():
    with pytest.raises(UsageError, match="Slurm does not report n01"):
        _plan(["n01"], [x for x in fleet() if x.name != "n01"])


def test_who_holds_the_node_decides_what_a_pass_and_a_fail_do():
    got = _plan(["n01", "n02", "n03", "n04"], fleet(
        node("n02"),  # health's drain, no incident
        node("n03", reason="swapped GPU3, checking", user="alice"),
        node("n04")), [Inc("r4", "n04")])
    assert got["n01"].do == "qualify" and "in service: drained first" in got["n01"].why
    assert got["n01"].reason == "slurmadm: repair: qualify: by hand: asked by an admin [repair]"
    assert got["n02"].do == "qualify" and "drained by slurmadm: resumed on a pass" in got["n02"].why
    assert got["n03"].do == "qualify" and "drained by alice" in got["n03"].why and "stays" in got["n03"].why
    a = got["n04"]
    assert (a.incident, a.cls, a.slots) == ("r4", "RESET_GPU", (2,)) and "incident's step" in a.why
    assert a.reason.startswith("slurmadm: repair: qualify: RESET_GPU GPU2: asked by an admin")


def test_the_health_breaker_holds_an_in_service_node():
    drained = [node(f"n0{i}") for i in range(1, 6)]  # five of ten drained by slurmadm
    got = _plan(["n07"], fleet(*drained), fraction=0.5)
    assert got["n07"].do == "hold" and "drain_cap_fraction" in got["n07"].why


# ---------------------------------------------------------------------- runs with fakes
@pytest.fixture()
def site(tmp_path):
    return parse_site(edited(put("store.path", str(tmp_path / "slurmadm.db")), put("store.audit_log", DELETE)),
                      source="site.toml")


def _ex(site, slurm, incs=(), results=("pass",)):
    store = Store(site.store.path)
    q = FakeQualifier(list(results))
    ex = rr.Executor(site, slurm, store, incidents=FakeIncidents(list(incs), step="qualify"), qualifier=q,
                     reason="slurmadm repair qualify")
    return ex, store, q


def test_an_in_service_node_is_drained_qualified_and_resumed(site):
    name = site.node_names[0]
    slurm = FakeSlurm([idle(n) for n in site.node_names])
    ex, store, q = _ex(site, slurm)
    report = gate.run(ex, [name])
    assert report.exit_code == 0 and q.ran == [name]
    assert [c[0] for c in slurm.calls] == ["drain", "resume"]
    assert slurm.calls[0][2].startswith("slurmadm: repair: qualify: by hand")
    assert not slurm.by[name].drained
    actions = [e.action for e in store.events(target=name)]
    assert sorted(actions) == ["repair.act.qualify", "repair.qualify.result"]
    [result] = [e for e in store.events(target=name) if e.action == "repair.qualify.result"]
    assert result.reason.startswith("pass")
    # an admin's qualification is not the ladder running: burn-in goes on re-qualifying the
    # drained nodes with open incidents on a site that runs no repair timer (stop 57: one by hand
    # made the next sweeps leave them to a ladder that never came)
    assert ex.incidents.ingested == 1 and ex.incidents.marked == 0


def test_a_failed_qualification_keeps_the_node_drained_and_says_why(site):
    name = site.node_names[0]
    slurm = FakeSlurm([idle(n) for n in site.node_names])
    ex, _store, _q = _ex(site, slurm, results=["fail"])
    report = gate.run(ex, [name])
    assert report.exit_code == 1 and "qualification failed: kat: GPU 2 differs" in report.done[0]["detail"]
    assert slurm.by[name].drained
    assert slurm.by[name].reason == "slurmadm: repair: qualify: failed: kat: GPU 2 differs [repair]"
    assert ("resume", (name,)) not in slurm.calls


def test_someone_elses_drain_stays_whatever_the_result(site):
    name = site.node_names[0]
    theirs = node(name, reason="swapped GPU3, checking", user="alice")
    for result, code in (("pass", 0), ("fail", 1)):
        slurm = FakeSlurm([theirs] + [idle(n) for n in site.node_names[1:]])
        ex, _store, q = _ex(site, slurm, results=[result])
        report = gate.run(ex, [name])
        assert report.exit_code == code and q.ran == [name]
        assert slurm.calls == [] and slurm.by[name].reason == "swapped GPU3, checking"
        assert "drained by alice: their drain stays" in report.done[0]["detail"]


def test_a_node_with_an_incident_takes_the_ladders_step(site):
    name = site.node_names[0]
    slurm = FakeSlurm([node(name)] + [idle(n) for n in site.node_names[1:]])
    incs = FakeIncidents([Inc("r1", name)], step="qualify")
    ex = rr.Executor(site, slurm, Store(site.store.path), incidents=incs, qualifier=FakeQualifier(["pass"]))
    report = gate.run(ex, [name])
    assert report.exit_code == 0 and incs.incs["r1"].state == "closed" and incs.quals == [("r1", "pass")]
    assert slurm.calls[-1] == ("resume", (name,))


def test_bad_input_or_a_dry_run_submits_nothing_and_changes_nothing(site):
    a, b = site.node_names[:2]
    slurm = FakeSlurm([idle(a), node(b, state="MIXED")] + [idle(n) for n in site.node_names[2:]])
    ex, store, q = _ex(site, slurm)
    with pytest.raises(UsageError, match=f"{b}: jobs still on the node"):
        gate.run(ex, [a, b])  # a first, but b is checked before anything is submitted
    assert q.ran == [] and slurm.calls == [] and store.events(target=a) == []
    with pytest.raises(UsageError, match="not a node of the site file"):
        gate.run(ex, ["nowhere-1"])
    report = gate.run(ex, [a], dry_run=True)
    assert report.dry_run and [x.do for x in report.actions] == ["qualify"] and report.done == []
    assert q.ran == [] and slurm.calls == []
    with pytest.raises(UnreachableError):
        gate.run(_ex(site, FakeSlurm([], down=True))[0], [a])


def test_a_refused_job_puts_an_in_service_node_back(site):
    from slurmadm.repair.qualify import REFUSED, Qualification

    class Refused(FakeQualifier):
        def qualify(self, n, on_error="fail", *, link_watch_s=0.0):
            self.ran.append(n.name)
            return Qualification(n.name, "error", "qualification job refused by Slurm: Invalid qos", REFUSED)

    name = site.node_names[0]
    slurm = FakeSlurm([idle(n) for n in site.node_names])
    ex = rr.Executor(site, slurm, Store(site.store.path), incidents=FakeIncidents([]), qualifier=Refused([]))
    report = gate.run(ex, [name])
    assert report.exit_code == 1 and "could not run" in report.done[0]["detail"]
    assert not slurm.by[name].drained and [c[0] for c in slurm.calls] == ["drain", "resume"]


def test_the_command_names_a_node_the_site_lacks_in_one_line(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(edited(put("store.path", str(tmp_path / "store.db")), put("store.audit_log", DELETE)))
    res = CliRunner().invoke(__import__("slurmadm.cli", fromlist=["cli"]).cli,
                             ["repair", "qualify", "gpu-zz[1-2]", "--site", str(f)])
    assert res.exit_code == 2 and "gpu-zz1 is not a node of the site file" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    bad = CliRunner().invoke(__import__("slurmadm.cli", fromlist=["cli"]).cli,
                             ["repair", "qualify", "n[01-", "--site", str(f)])
    assert bad.exit_code == 2 and "not a valid hostlist" in bad.output


def test_a_job_that_started_while_an_earlier_node_qualified_leaves_the_node_alone(site):
    """Two nodes in service: the first one's qualification takes minutes, and a job lands on the
    second meanwhile. The second is re-read before it is drained, and left as it is."""
    a, b = site.node_names[:2]
    slurm = FakeSlurm([idle(n) for n in site.node_names])

    class Slow(FakeQualifier):
        def qualify(self, n, on_error="fail", *, link_watch_s=0.0):
            slurm._set(b, state="ALLOCATED")  # a job started on b while a was being qualified
            return super().qualify(n, on_error, link_watch_s=link_watch_s)

    ex = rr.Executor(site, slurm, Store(site.store.path), incidents=FakeIncidents([]), qualifier=Slow(["pass"]))
    report = gate.run(ex, [a, b])
    assert report.done[0]["ok"] is True
    assert report.done[1]["ok"] is False and "jobs still on the node" in report.done[1]["detail"]
    assert not any(c[1] == (b,) for c in slurm.calls) and report.exit_code == 1


def test_a_node_an_admin_cleared_of_an_hca_incident_is_qualified_with_the_link_watch(site):
    """The technician's way back (the cable replaced: `repair clear`, then `repair qualify`): the
    qualification watches the links as the ladder's own would; a node cleared of a GPU's does not."""
    import time

    from slurmadm.repair import incidents
    from tests.unit.repair.helpers import health_drain

    a, b = site.node_names[:2]
    slurm = FakeSlurm([idle(n) for n in site.node_names])
    ex, store, q = _ex(site, slurm, results=["pass", "pass"])
    now = time.time()
    health_drain(store, a, [("infiniband", "mlx5_3 link flapped 2 times in 6 h")], ts=now - 60, run_id="r1")
    health_drain(store, b, [("xid", "GPU2 XID 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR (RESET_GPU)")], ts=now - 60,
                 run_id="r2")
    incidents.ingest(store, now=now - 50)
    assert {i.node: i.cls for i in incidents.list_incidents(store)}[a] == "HCA"
    incidents.clear(store, a, "cable replaced", now=now - 40)
    incidents.clear(store, b, "GPU replaced", now=now - 40)
    report = gate.run(ex, [a, b])
    assert report.exit_code == 0 and list(zip(q.ran, q.watched)) == [(a, 600.0), (b, 0.0)]
