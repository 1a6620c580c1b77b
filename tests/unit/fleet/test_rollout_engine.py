"""The rollout engine against fakes of Slurm and the nodes (the real thing: tests/integration/
test_fleet.py): wave order, canary stop, failure budget, continuation, nodes held by others."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import pytest
import tomli_w

from slurmadm.fleet import rollout as ro
from slurmadm.fleet.ssh import Reply
from slurmadm.resources import example_site
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]


class World:
    """Four nodes: their NCCL, Slurm state and boot counter; what ran where, in order."""

    def __init__(self, fail_install=(), health_fail=()):
        self.nccl = dict.fromkeys(NODES, "2.25.1")
        self.staged: dict[str, str] = {}
        self.info = {n: NodeInfo(n, "IDLE", partitions=("gpu",)) for n in NODES}
        self.boots = dict.fromkeys(NODES, 0)
        self.log: list[tuple[str, str]] = []
        self.fail_install, self.health_fail = set(fail_install), set(health_fail)

    # the nodes (Remote)
    def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
        out = []
        for n in nodes:
            if stdin is not None:  # the fact collector
                r = Reply(n, 0, f"@@libs\nlibnccl.so.{self.nccl[n]}\n@@end\n")
            elif command.startswith("install "):
                self.log.append((n, "install"))
                if n in self.fail_install:
                    r = Reply(n, 100, "E: Unable to locate package\n")
                else:
                    self.staged[n] = command.split("=", 1)[1]
                    r = Reply(n, 0, "")
            else:
                bad = n in self.health_fail
                r = Reply(n, 1 if bad else 0, json.dumps({"results": [
                    {"check_id": "xid", "status": "fail" if bad else "pass", "detail": "GPU3 XID 79"}]}))
            if on_reply:
                on_reply(r)
            out.append(r)
        return out

    def close(self):
        pass

    # Slurm (backend + SlurmOps)
    def nodes(self, names=None):
        return [self.info[n] for n in (names or NODES)]

    def drain(self, names, reason):
        for n in names:
            self.info[n] = replace(self.info[n], flags=self.info[n].flags | {"DRAIN"}, reason=reason)
            self.log.append((n, "drain"))

    def resume(self, names):
        for n in names:
            self.info[n] = replace(self.info[n], flags=self.info[n].flags - {"DRAIN"}, reason="")
            self.log.append((n, "resume"))

    def set_reason(self, names, reason):
        for n in names:
            self.info[n] = replace(self.info[n], reason=reason)

    def node(self, name):
        return self.info[name]

    def boot_time(self, name):
        return str(self.boots[name])

    def jobs_on(self, name):
        return []

    def reboot(self, name, reason, rts):
        self.boots[name] += 1
        self.nccl[name] = self.staged.get(name, self.nccl[name])
        self.log.append((name, "reboot"))

    # the node itself
    def slurmd_gone(self, name):
        self.info[name] = replace(self.info[name], state="DOWN", flags=frozenset({"NOT_RESPONDING"}),
                                  reason="Not responding")

    def boots_up(self, name):
        """Back from a power cycle: registered again, with what was staged."""
        self.info[name] = replace(self.info[name], state="IDLE", flags=self.info[name].flags - {"NOT_RESPONDING"})
        self.boots[name] += 1
        self.nccl[name] = self.staged.get(name, self.nccl[name])


@pytest.fixture()
def site(tmp_path):
    data = tomllib.loads(example_site().read_text())
    data["store"] = {"path": str(tmp_path / "s.db")}
    return parse_site(tomli_w.dumps(data))


def make_plan(tmp_path, **over):
    text = 'name = "nccl"\nnodes = "b200-[001-004]"\ncanary_nodes = 1\nwave_fraction = 0.5\n' \
           'max_failed_fraction = 0.0\nhealth_command = "health"\n[[steps]]\nrun = "install nccl=2.26.2"\n' \
           '[expect]\nnccl = "2.26.2"\n'
    for k, v in over.items():
        text = text.replace(f"{k} = ", f"# {k} = ", 1) if k in text else text
        text = f"{k} = {v}\n" + text
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return ro.load_plan(p)


def go(site, world, plan, sha, **opts):
    with Store.for_site(site) as store:
        r = ro.Rollout(site, plan, sha, backend=world, remote=world, store=store,
                       options=ro.Options(poll_s=0.0, **opts))
        r.slurm = world
        return r.run()


def test_good_plan_canary_then_waves(site, tmp_path):
    w = World()
    plan, sha = make_plan(tmp_path)
    res = go(site, w, plan, sha)
    assert res.state == "done" and res.waves == [["b200-001"], ["b200-002", "b200-003"], ["b200-004"]]
    installs = [n for n, what in w.log if what == "install"]
    assert installs[0] == "b200-001" and installs[-1] == "b200-004"
    assert all(w.nccl[n] == "2.26.2" and not w.info[n].drained for n in NODES)
    for n in NODES:  # each node: drain, install, reboot, resume, in that order
        assert [what for m, what in w.log if m == n] == ["drain", "install", "reboot", "resume"]


def test_canary_failure_stops_with_others_untouched(site, tmp_path):
    w = World(health_fail={"b200-001"})
    plan, sha = make_plan(tmp_path)
    res = go(site, w, plan, sha)
    assert res.state == "stopped" and "canary failed" in res.detail
    assert w.info["b200-001"].drained and "FAILED health: xid fail: GPU3 XID 79" in w.info["b200-001"].reason
    assert {n for n, _ in w.log} == {"b200-001"}


def test_failure_budget_stops_later_waves(site, tmp_path):
    w = World(fail_install={"b200-002"})
    plan, sha = make_plan(tmp_path)
    res = go(site, w, plan, sha)
    assert res.state == "stopped" and "b200-002" in res.detail
    assert res.nodes["b200-003"].phase == "done" and res.nodes["b200-004"].phase == "pending"
    assert not any(n == "b200-004" for n, _ in w.log)
    # with a budget of one failure the rollout goes on to the last wave
    w2 = World(fail_install={"b200-002"})
    plan2, sha2 = make_plan(tmp_path, name='"nccl-2"', max_failed_fraction="0.25")
    res2 = go(site, w2, plan2, sha2)
    assert res2.state == "failed" and res2.nodes["b200-004"].phase == "done"


def test_rerun_skips_finished_nodes_and_retries_failed(site, tmp_path):
    w = World(fail_install={"b200-002"})
    plan, sha = make_plan(tmp_path)
    go(site, w, plan, sha)
    w.fail_install.clear()
    w.log.clear()
    res = go(site, w, plan, sha)
    assert res.state == "done"
    assert {n for n, what in w.log if what == "install"} == {"b200-002", "b200-004"}


def test_node_held_by_someone_else_is_skipped_and_drift_drain_taken_over(site, tmp_path):
    w = World()
    w.info["b200-003"] = replace(w.info["b200-003"], flags=frozenset({"DRAIN"}), reason="PSU swap (admin)")
    w.info["b200-004"] = replace(w.info["b200-004"], flags=frozenset({"DRAIN"}),
                                 reason="slurmadm: drift: nccl 2.21.5 != 2.25.1 [fleet]")
    plan, sha = make_plan(tmp_path, max_failed_fraction="1.0")
    res = go(site, w, plan, sha)
    assert res.nodes["b200-003"].phase == "skipped" and w.info["b200-003"].reason == "PSU swap (admin)"
    assert res.nodes["b200-004"].phase == "done" and not w.info["b200-004"].drained
    assert res.state == "failed" and "skipped: b200-003" in res.detail


def test_changed_plan_needs_a_new_name_or_restart(site, tmp_path):
    w = World()
    plan, sha = make_plan(tmp_path)
    go(site, w, plan, sha)
    plan2, sha2 = make_plan(tmp_path, reboot="false")
    with pytest.raises(Exception, match="another version of this plan"):
        go(site, w, plan2, sha2)
    assert go(site, w, plan2, sha2, restart=True).state == "done"


def test_reservation_mode_holds_by_the_reservation_not_a_drain(site, tmp_path):
    w = World()
    w.reservation_nodes = lambda name: ["b200-001", "b200-002", "b200-003"] if name == "maint-dec" else None
    plan, sha = make_plan(tmp_path, max_failed_fraction="1.0")
    res = go(site, w, plan, sha, reservation="maint-dec")
    assert [res.nodes[n].phase for n in NODES] == ["done", "done", "done", "failed"]
    assert "not in the active maintenance reservation maint-dec" in res.nodes["b200-004"].detail
    assert not any(what in ("drain", "resume") for _, what in w.log)
    assert w.nccl["b200-001"] == "2.26.2" and w.nccl["b200-004"] == "2.25.1"


def slurmd_gone_on_002(tmp_path):
    """A plan for b200-002 alone, in a world where its slurmd is gone (Slurm: NOT_RESPONDING)."""
    plan, sha = make_plan(tmp_path, nodes='"b200-002"', canary_nodes="0")
    w = World()
    w.slurmd_gone("b200-002")
    return plan, sha, w


def test_node_whose_slurmd_is_gone_is_power_cycled_through_the_bmc(site, tmp_path, monkeypatch):
    """NOT_RESPONDING: Slurm cannot run its RebootProgram there, so the BMC cycles the node;
    without BMC access the node fails with a reason saying so, never a `scontrol reboot`."""
    plan, sha, w = slurmd_gone_on_002(tmp_path)
    cycled = []

    def cycle(self, node, info):
        cycled.append(node)
        w.boots_up(node)

    with monkeypatch.context() as m:
        m.setattr(ro.Rollout, "_bmc_cycle", cycle)
        res = go(site, w, plan, sha)
    assert res.state == "done", res.detail
    assert cycled == ["b200-002"] and (("b200-002", "reboot") not in w.log)
    # no BMC password file (the example site's): a clear failure, not a Slurm reboot that never happens
    plan2, sha2 = make_plan(tmp_path, name='"nccl-nobmc"', nodes='"b200-003"', canary_nodes="0")
    w2 = World()
    w2.info["b200-003"] = replace(w2.info["b200-003"], state="DOWN", flags=frozenset({"NOT_RESPONDING"}))
    res = go(site, w2, plan2, sha2)
    assert res.nodes["b200-003"].phase == "failed" and "no BMC access" in res.nodes["b200-003"].detail
    assert ("b200-003", "reboot") not in w2.log


def test_firmware_step_plan_and_bad_firmware_steps(tmp_path):
    p = tmp_path / "fw.toml"
    p.write_text('name = "bios"\n[[steps]]\nfirmware = { component = "BIOS", image = "http://repo/b.bin", '
                 'version = "2.9.0" }\n[expect]\n"fw:BIOS" = "2.9.0"\n')
    plan, _ = ro.load_plan(p)
    assert plan.command(plan.steps[0]) == "bmc firmware update --component BIOS --image http://repo/b.bin --version 2.9.0"
    for bad, where in (('firmware = { component = "BIOS", image = "http://a b" }', "image"),
                       ('firmware = { component = "BI OS", image = "http://a" }', "component"),
                       ('run = "x"\nfirmware = { component = "BIOS", image = "http://a" }', "exactly one")):
        p.write_text(f'name = "bios"\n[[steps]]\n{bad}\n')
        with pytest.raises(Exception) as err:
            ro.load_plan(p)
        assert where in str(getattr(err.value, "lines", lambda: [str(err.value)])()), err.value


def test_a_rerun_after_an_interrupted_power_cycle_waits_for_the_boot_instead_of_cycling_again(site, tmp_path):
    """Killed right after the BMC cut the node's power: the re-run finds the node still down from
    that cycle and waits for it to boot; only a cycle older than fleet.reboot_timeout_s (the
    boot failed) is tried again."""
    plan, sha, w = slurmd_gone_on_002(tmp_path)
    cycled = []

    def cycle_then_killed(self, node, info):
        cycled.append(node)
        raise KeyboardInterrupt  # the admin's Ctrl-C (or a lost session) right after the power cut

    def cycle(self, node, info):
        cycled.append(node)

    polls = {"n": 0}
    real_node = w.node

    def node_boots_later(name):  # the cycled node registers again on the third look
        if name == "b200-002" and "NOT_RESPONDING" in w.info[name].flags:
            polls["n"] += 1
            if polls["n"] >= 3:
                w.boots_up(name)
        return real_node(name)

    orig = ro.Rollout._bmc_cycle
    try:
        ro.Rollout._bmc_cycle = cycle_then_killed
        with pytest.raises(KeyboardInterrupt):
            go(site, w, plan, sha)
        assert cycled == ["b200-002"]
        w.node = node_boots_later
        ro.Rollout._bmc_cycle = cycle
        res = go(site, w, plan, sha)
        assert res.state == "done", res.detail
        assert cycled == ["b200-002"], "the re-run cut the power of a node that was booting"
        assert w.nccl["b200-002"] == "2.26.2"

        # a cycle longer ago than the reboot timeout: the node never came back, so cycle it again
        plan2, sha2 = make_plan(tmp_path, name='"nccl-2"', nodes='"b200-003"', canary_nodes="0")
        w.slurmd_gone("b200-003")
        ro.Rollout._bmc_cycle = cycle_then_killed
        with pytest.raises(KeyboardInterrupt):
            go(site, w, plan2, sha2)
        with Store.for_site(site) as store:
            store.db.execute("UPDATE fleet_rollout_nodes SET ts = ts - ? WHERE rollout='nccl-2'",
                             (site.fleet.reboot_timeout_s + 1,))

        def cycle_and_boot(self, node, info):
            cycled.append(node)
            w.boots_up(node)
        ro.Rollout._bmc_cycle = cycle_and_boot
        w.node = real_node
        assert go(site, w, plan2, sha2).state == "done"
        assert cycled == ["b200-002", "b200-003", "b200-003"]
    finally:
        ro.Rollout._bmc_cycle = orig
