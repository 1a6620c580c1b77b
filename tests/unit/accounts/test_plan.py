"""The plan: site vs what slurmdbd holds, as ordered typed operations (no Slurm needed: the live
state is built here the way slurmdbd stores it, lowercased text included)."""

from __future__ import annotations

import dataclasses

import pytest

from slurmadm.accounts import KINDS, batches, desired_state, make_plan, mark_blocked
from slurmadm.slurm.accounting import AssocRecord, QosRecord
from tests.unit.accounts.states import as_stored, empty_slurmdbd, site_with

pytestmark = pytest.mark.unit


def kinds_targets(plan):
    return [(op.kind, op.target) for op in plan.ops]


def test_from_empty_every_thing_is_added_in_dependency_order():
    site = site_with()
    plan = make_plan(desired_state(site), empty_slurmdbd())
    phases = [KINDS.index(op.kind) for op in plan.ops]
    assert phases == sorted(phases)  # QOS, then accounts, then users
    assert not any(op.is_delete for op in plan.ops)
    added = ["root"]
    for op in plan.ops:
        if op.kind == "add-account":
            assert op.account in added, f"{op.name} added before its parent {op.account}"
            added.append(op.name)
        if op.kind == "add-user":
            assert op.account in added
    assert {op.name for op in plan.ops if op.kind == "add-qos"} == {"high", "low", "debug", "burnin"}
    assert [op.kind for op in plan.ops if op.name == "normal"] == ["modify-qos"]  # Slurm's own, kept
    assert ("add-account", "account:ml-thesis") in kinds_targets(plan)
    new_users = {op.name for op in plan.ops if op.kind == "add-user" and op.new_user}
    assert new_users == set(site.memberships) - {"root"}  # root exists already
    # the default account of a new user rides on the association that creates it, exactly once
    defaults = {(op.name, c.new) for op in plan.ops for c in op.changes if c.field == "DefaultAccount"}
    assert ("alice", "ml-llm") in defaults and ("bob", "phys-lattice") in defaults
    assert len([d for d in defaults if d[0] == "alice"]) == 1


def test_settings_become_slurm_values():
    plan = make_plan(desired_state(site_with()), empty_slurmdbd())
    ops = {op.target: op for op in plan.ops if not op.kind.endswith("-coordinators")}
    lattice = {c.field: c.arg for c in ops["account:phys-lattice"].changes}
    assert lattice["GrpTRES"] == "GrpTRES=gres/gpu=256"
    assert lattice["GrpTRESMins"] == "GrpTRESMins=gres/gpu=30000000"
    assert lattice["QOS"] == "QOS=high,low,normal" and lattice["DefaultQOS"] == "DefaultQOS=normal"
    assert lattice["Fairshare"] == "Fairshare=20" and lattice["Parent"] == "Parent=physics"
    assert {c.field: c.arg for c in ops["account:phys-astro"].changes}["Fairshare"] == "Fairshare=parent"
    assert {c.field: c.arg for c in ops["user:bob@phys-lattice"].changes}["GrpTRES"] == "GrpTRES=gres/gpu=32"
    assert {c.field: c.arg for c in ops["user:alice@phys-lattice"].changes}["GrpTRES"] == "GrpTRES=gres/gpu=128"
    assert {c.field: c.arg for c in ops["user:frank@ml-llm"].changes}["Fairshare"] == "Fairshare=parent"
    high = {c.field: c.arg for c in ops["qos:high"].changes}
    assert high["Preempt"] == "Preempt=low" and high["UsageFactor"] == "UsageFactor=2"
    assert high["MaxTRESPerUser"] == "MaxTRESPerUser=gres/gpu=128" and high["MaxWall"] == "MaxWall=2880"
    assert {c.field: c.arg for c in ops["qos:low"].changes}["PreemptMode"] == "PreemptMode=requeue"
    # an organisation's QOS is left alone (its projects carry explicit lists)
    assert "QOS" not in {c.field for c in ops["account:physics"].changes}


def test_a_matching_slurmdbd_gives_an_empty_plan():
    site = site_with()
    assert make_plan(desired_state(site), as_stored(site)).ops == []


def test_edit_quota_move_user_drop_project_shows_exactly_those_changes():
    before = site_with()
    def edit(data):
        projects = data["projects"]
        by = {p["name"]: p for p in projects}
        by["phys-lattice"]["gpu_quota"] = 200
        by["bio-fold"]["members"] = ["erin"]
        by["phys-astro"]["members"] = ["carol", "dave"]
        data["projects"] = [p for p in projects if p["name"] != "ml-vision"]
        data["users"] = [u for u in data["users"] if u["name"] != "grace"]
    plan = make_plan(desired_state(site_with(edit)), as_stored(before))
    assert kinds_targets(plan) == [
        ("modify-account", "account:phys-lattice"),
        ("add-user", "user:dave@phys-astro"),
        ("default-account", "user:dave"),
        ("delete-user", "user:dave@bio-fold"),
        ("delete-user", "user:grace@ml-vision"),
        ("delete-user", "user:heidi@ml-vision"),
        ("delete-account", "account:ml-vision"),
    ]
    quota = plan.ops[0].changes
    assert [(c.field, c.old, c.new, c.arg) for c in quota] == [
        ("GrpTRES", "gres/gpu=256", "gres/gpu=200", "GrpTRES=gres/gpu=200")]
    assert plan.ops[2].changes[0].new == "phys-astro"
    assert all(op.is_delete for op in plan.ops[3:]) and not any(op.is_delete for op in plan.ops[:3])


def test_coordinators_are_added_and_removed_as_declared():
    """The site names each account's coordinators exactly: a new one is added, one slurmdbd has
    that the site does not name is removed (no --prune: it is a setting, not an entity)."""
    site = site_with()
    live = as_stored(site)
    live.accounts["phys-lattice"] = dataclasses.replace(live.accounts["phys-lattice"], coordinators=frozenset({"bob"}))
    live.accounts["bio-fold"] = dataclasses.replace(live.accounts["bio-fold"], coordinators=frozenset({"dave"}))
    plan = make_plan(desired_state(site), live)
    assert kinds_targets(plan) == [("remove-coordinators", "account:bio-fold"),
                                   ("remove-coordinators", "account:phys-lattice"),
                                   ("add-coordinators", "account:phys-lattice")]
    assert [(c.field, c.old, c.new, c.arg) for op in plan.ops for c in op.changes] == [
        ("Coordinators", "dave", "", "dave"), ("Coordinators", "bob", "alice", "bob"),
        ("Coordinators", "bob", "alice", "alice")]
    assert plan.runnable(prune=False) == plan.ops
    calls = batches(plan.runnable(prune=False), plan.cluster, live)
    assert [b.argv for b in calls] == [["remove", "coordinator", "account=bio-fold", "names=dave"],
                                       ["remove", "coordinator", "account=phys-lattice", "names=bob"],
                                       ["add", "coordinator", "account=phys-lattice", "names=alice"]]
    assert len({b.stage for b in calls}) == 3  # one at a time
    # accounts gaining the same coordinator share one call
    def both(data):
        for p in data["projects"]:
            if p["name"] in ("ml-llm", "ml-vision"):
                p["coordinators"] = ["grace"]
    plan = make_plan(desired_state(site_with(both)), as_stored(site))
    assert [b.argv for b in batches(plan.ops, plan.cluster, as_stored(site))] == [
        ["add", "coordinator", "account=ml-llm,ml-vision", "names=grace"]]


def test_limits_slurmadm_does_not_declare_are_cleared():
    site = site_with()
    live = as_stored(site)
    rec = live.assocs[("ml-llm", "")]
    live.assocs[("ml-llm", "")] = dataclasses.replace(rec, grp_tres={"cpu": "64", "gres/gpu": "512"})
    live.assocs[("bio-fold", "dave")] = dataclasses.replace(live.assocs[("bio-fold", "dave")], qos=frozenset({"high"}))
    plan = make_plan(desired_state(site), live)
    args = {op.target: [c.arg for c in op.changes] for op in plan.ops}
    assert args == {"account:ml-llm": ["GrpTRES=cpu=-1"], "user:dave@bio-fold": ["QOS="]}  # QOS=: inherit again


def test_lowercased_text_and_float_noise_are_not_drift():
    site = site_with()
    live = as_stored(site)
    live.qos["low"] = dataclasses.replace(live.qos["low"], usage_factor=0.5000001)
    assert make_plan(desired_state(site), live).ops == []


def test_reparent_and_nested_organisations():
    def move(data):
        for p in data["projects"]:
            if p["name"] == "ml-thesis":
                p["organization"] = "physics"
    site = site_with()
    plan = make_plan(desired_state(site_with(move)), as_stored(site))
    assert kinds_targets(plan) == [("move-account", "account:ml-thesis"), ("modify-account", "account:ml-thesis")]
    assert plan.ops[0].changes[0].arg == "Parent=physics"
    assert [c.field for c in plan.ops[1].changes] == ["Organization"]


def test_dropping_an_organisation_deletes_bottom_up():
    def drop(data):
        data["organizations"] = [o for o in data["organizations"] if o["name"] not in ("ml", "ml-students")]
        data["projects"] = [p for p in data["projects"] if p["organization"] not in ("ml", "ml-students")]
        data["users"] = []
    plan = make_plan(desired_state(site_with(drop)), as_stored(site_with()))
    accounts = [op.name for op in plan.ops if op.kind == "delete-account"]
    assert accounts.index("ml-thesis") < accounts.index("ml-students") < accounts.index("ml")
    assert accounts.index("ml-llm") < accounts.index("ml")
    assert plan.ops[-1].kind == "delete-account"
    # alice keeps phys-lattice: her default moves there before ml-llm goes
    assert ("default-account", "user:alice") in kinds_targets(plan)


def test_protected_things_are_never_deleted_and_foreign_ones_are():
    site = site_with()
    live = as_stored(site)
    live.qos["scavenger"] = QosRecord("scavenger")
    live.assocs[("legacy", "")] = AssocRecord("legacy", parent="root")
    live.assocs[("legacy", "mallory")] = AssocRecord("legacy", "mallory")
    live.assocs[("root", "admin2")] = AssocRecord("root", "admin2")  # under a protected account
    live.assocs[("ml-llm", "root")] = AssocRecord("ml-llm", "root")  # a protected user
    live.default_account.update({"mallory": "legacy", "admin2": "root"})
    plan = make_plan(desired_state(site), live)
    assert kinds_targets(plan) == [
        ("delete-user", "user:mallory@legacy"),
        ("delete-account", "account:legacy"),
        ("delete-qos", "qos:scavenger"),
    ]
    assert plan.runnable(prune=False) == []


def test_default_accounts():
    site = site_with()
    live = as_stored(site)
    live.default_account["alice"] = "phys-lattice"  # valid but the site names ml-llm explicitly
    live.default_account["grace"] = "ml-vision"  # valid, no explicit default: kept
    live.default_account["bob"] = ""  # lost (Slurm leaves it empty when the default goes)
    plan = make_plan(desired_state(site), live)
    assert [(op.name, op.changes[0].old, op.changes[0].new) for op in plan.ops] == [
        ("alice", "phys-lattice", "ml-llm"), ("bob", "", "phys-lattice")]
    assert {op.kind for op in plan.ops} == {"default-account"}


def test_jobs_block_deletions():
    site = site_with()
    def drop(data):
        data["projects"] = [p for p in data["projects"] if p["organization"] != "biology"]
        data["organizations"] = [o for o in data["organizations"] if o["name"] != "biology"]
        for p in data["projects"]:
            if p["name"] == "ml-vision":
                p["members"] = []
        data["users"] = []
    live = as_stored(site)
    live.qos["old"] = QosRecord("old")
    plan = make_plan(desired_state(site_with(drop)), live)
    blocked = mark_blocked(plan, live, [("bio-fold", "dave", "normal"), ("ml-vision", "heidi", "old")])
    why = {op.target: op.blocked for op in blocked.ops if op.is_delete}
    assert why["account:bio-fold"] and why["account:biology"]  # the job's account and above it
    assert why["user:dave@bio-fold"] and not why["user:erin@bio-fold"]
    assert why["user:heidi@ml-vision"] and not why["user:grace@ml-vision"]
    assert why["qos:old"] == "pending or running jobs use it"
    runnable = {op.target for op in blocked.runnable(prune=True)}
    assert "user:erin@bio-fold" in runnable and "account:bio-fold" not in runnable


def test_plan_json():
    plan = make_plan(desired_state(site_with()), empty_slurmdbd())
    data = plan.to_json()
    assert data["changes"] == len(plan.ops) and data["counts"]["add-qos"] == 4
    first = data["ops"][0]
    assert first["kind"] == "add-qos" and first["target"].startswith("qos:")
    assert {"field", "old", "new"} == set(first["changes"][0])
