"""How a plan becomes sacctmgr calls: few calls, many names each; one load file for everything new;
deletions in the order slurmdbd accepts; one apply at a time. (Against real slurmdbd:
tests/integration/test_accounts.py.)"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing
import os
from pathlib import Path

import pytest

from slurmadm.accounts import (
    apply_lock,
    apply_site,
    batches,
    desired_state,
    load_text,
    lock_path,
    make_plan,
)
from slurmadm.errors import LockBusy, UnreachableError
from slurmadm.slurm.accounting import AssocRecord, QosRecord
from slurmadm.store import Store
from tests.unit.accounts.states import as_stored, empty_slurmdbd, site_with

pytestmark = pytest.mark.unit


def calls(plan, live):
    return [b.argv for b in batches(plan.runnable(prune=True), plan.cluster, live)]


def test_from_empty_one_load_carries_every_new_account_and_user():
    site = site_with()
    live = empty_slurmdbd()
    plan = make_plan(desired_state(site), live)
    argvs = calls(plan, live)
    assert [a[0:2] for a in argvs].count(["load"]) == 1
    assert sum(1 for a in argvs if a[:2] == ["add", "qos"]) == 4  # each new QOS has its own settings
    assert ["modify", "qos", "where", "name=burnin,high", "set", "Preempt=low"] in argvs  # after the adds
    # the coordinators, after the load that adds their users
    coord = [i for i, a in enumerate(argvs) if a[:2] == ["add", "coordinator"]]
    assert [argvs[i] for i in coord] == [["add", "coordinator", "account=ml", "names=frank"],
                                         ["add", "coordinator", "account=phys-lattice", "names=alice"]]
    assert min(coord) > next(i for i, a in enumerate(argvs) if a[0] == "load")
    assert len(argvs) == 4 + 1 + 1 + 1 + 2  # adds, Preempt, normal's changes, the load, coordinators
    text = next(b.load_text for b in batches(plan.runnable(True), plan.cluster, live) if b.load_text)
    lines = text.splitlines()
    assert lines[0] == "Cluster - 'b200'"
    pos = {line: i for i, line in enumerate(lines)}
    parent_line = lambda name: pos[f"Parent - '{name}'"]
    account_line = lambda name: next(i for i, ln in enumerate(lines) if ln.startswith(f"Account - '{name}'"))
    assert account_line("ml") < parent_line("ml") < account_line("ml-students") < parent_line("ml-students") < account_line("ml-thesis")
    assert "Account - 'phys-lattice':Description='lattice QCD':Organization='physics':Fairshare='20':" \
           "GrpTRES='gres/gpu=256':GrpTRESMins='gres/gpu=30000000':QOS='high,low,normal':DefaultQOS='normal'" in lines
    alice = [ln for ln in lines if ln.startswith("User - 'alice'")]
    assert alice == ["User - 'alice':Fairshare='parent':DefaultAccount='ml-llm'",
                     "User - 'alice':GrpTRES='gres/gpu=128':DefaultAccount='ml-llm'"]
    assert "User - 'root'" in lines  # root exists: no DefaultAccount, so load modifies nothing


def test_same_change_on_many_entities_is_one_call():
    site = site_with()
    live = as_stored(site)
    for name in ("ml-llm", "bio-fold", "phys-astro"):
        live.assocs[(name, "")] = dataclasses.replace(live.assocs[(name, "")], grp_tres={"gres/gpu": "1"})
    for user in ("dave", "erin"):
        live.assocs[("bio-fold", user)] = dataclasses.replace(live.assocs[("bio-fold", user)], grp_tres={})
    plan = make_plan(desired_state(site), live)
    argvs = calls(plan, live)
    assert ["modify", "user", "where", "name=dave,erin", "account=bio-fold", "cluster=b200", "set",
            "GrpTRES=gres/gpu=64"] in argvs
    modify_accounts = [a for a in argvs if a[:2] == ["modify", "account"]]
    # three different quotas: three calls, each naming the cluster
    assert len(modify_accounts) == 3 and all("cluster=b200" in a for a in modify_accounts)


def test_members_of_many_projects_getting_the_same_change_is_one_call():
    def caps(data):
        for p in data["projects"]:
            if p["name"] in ("bio-fold", "ml-thesis", "phys-astro"):
                p["user_gpu_cap"] = 2
    site, live = site_with(caps), as_stored(site_with())
    argvs = calls(make_plan(desired_state(site), live), live)
    assert argvs == [["modify", "user", "where", "name=carol,dave,erin,ivan,judy",
                      "account=bio-fold,ml-thesis,phys-astro", "cluster=b200", "set", "GrpTRES=gres/gpu=2"]]


def test_a_shared_member_splits_the_call_per_account():
    """alice is in phys-lattice and ml-llm; only her ml-llm association changes, so a call naming
    both projects and alice would change too much."""
    def caps(data):
        for p in data["projects"]:
            if p["name"] in ("ml-llm", "phys-astro"):
                p["user_gpu_cap"] = 2
    site, live = site_with(caps), as_stored(site_with())
    live.assocs[("phys-astro", "alice")] = AssocRecord("phys-astro", "alice", grp_tres={"gres/gpu": "2"})
    live.assocs[("ml-llm", "carol")] = AssocRecord("ml-llm", "carol")  # not in the site: left alone here
    argvs = [a for a in calls(make_plan(desired_state(site), live), live) if a[:2] == ["modify", "user"]]
    assert sorted(argvs) == [
        ["modify", "user", "where", "name=alice,frank,grace", "account=ml-llm", "cluster=b200", "set", "GrpTRES=gres/gpu=2"],
        ["modify", "user", "where", "name=carol", "account=phys-astro", "cluster=b200", "set", "GrpTRES=gres/gpu=2"],
    ]


def test_deletions_go_in_the_order_slurmdbd_accepts():
    site = site_with()
    live = as_stored(site)
    def drop(data):
        data["projects"] = [p for p in data["projects"] if p["name"] != "ml-vision"]
        data["users"] = []
        for p in data["projects"]:
            if p["name"] == "bio-fold":
                p["members"] = ["erin"]
            if p["name"] == "phys-astro":
                p["members"] = ["carol", "dave"]
    plan = make_plan(desired_state(site_with(drop)), live)
    argvs = calls(plan, live)
    i_default = argvs.index(["modify", "user", "where", "name=dave", "cluster=b200", "set", "DefaultAccount=phys-astro"])
    # heidi loses every association: removed as a user, alone (mixing her with grace is refused)
    i_heidi = argvs.index(["delete", "user", "where", "name=heidi", "cluster=b200"])
    # grace keeps ml-llm: her ml-vision association goes with the account
    i_account = argvs.index(["delete", "account", "where", "name=ml-vision", "cluster=b200"])
    i_dave = argvs.index(["delete", "user", "where", "name=dave", "account=bio-fold", "cluster=b200"])
    assert i_default < i_heidi < i_account < i_dave
    carried = next(b for b in batches(plan.runnable(True), plan.cluster, live) if b.argv[:2] == ["delete", "account"])
    assert {op.target for op in carried.ops} == {"account:ml-vision", "user:grace@ml-vision"}


def test_names_are_chunked():
    site = site_with()
    live = as_stored(site)
    for i in range(1200):
        live.assocs[(f"old{i:04d}", "")] = AssocRecord(f"old{i:04d}", parent="root")
    plan = make_plan(desired_state(site), live)
    deletes = [a for a in calls(plan, live) if a[:2] == ["delete", "account"]]
    assert [len(a[3].split(",")) for a in deletes] == [500, 500, 200]


def test_load_text_quotes_values():
    plan = make_plan(desired_state(site_with()), empty_slurmdbd())
    text = load_text("b200", [op for op in plan.ops if op.kind == "add-account" and op.name == "ops"])
    assert text == ("Cluster - 'b200'\nParent - 'root'\n"
                    "Account - 'ops':Description='cluster operations (burn-in, tests)':Organization='ops'\n")


# ------------------------------------------------------------------------ lock and backups


def _hold(path: str, ready, release) -> None:
    with apply_lock(Path(path)):
        ready.set()
        release.wait(10)


def test_second_apply_is_refused_while_one_runs(tmp_path):
    path = tmp_path / "accounts.lock"
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(LockBusy, match=f"held by pid {holder.pid}"), apply_lock(path):
            pass
    finally:
        release.set()
        holder.join(10)
    with apply_lock(path):  # free again once the holder is gone
        pass


class NoSlurm:
    cluster = "b200"

    def __getattr__(self, name):
        raise AssertionError(f"sacctmgr touched ({name}) although the lock was busy")


def test_apply_takes_the_lock_before_touching_slurmdbd(tmp_path):
    site = site_with(lambda d: d["store"].update(path=str(tmp_path / "s.db")))
    with apply_lock(lock_path(site)), Store(tmp_path / "s.db") as store, pytest.raises(LockBusy):
        apply_site(site, NoSlurm(), store, prune=False, reason="test")


class DumpOnly:
    cluster = "b200"

    def dump(self, path):
        Path(path).write_text("Cluster - 'b200'\n")


def test_backups_keep_the_newest(tmp_path, monkeypatch):
    mod = importlib.import_module("slurmadm.accounts.apply")
    stamps = iter(f"2026010{i}T000000" for i in range(1, 8))
    monkeypatch.setattr(mod.time, "strftime", lambda _fmt: next(stamps))
    for _ in range(5):
        dump, qos = mod.backup_paths("b200", tmp_path / "b")
        qos.write_text("Name|Priority\nnormal|0\n")
        mod.save_dump(DumpOnly(), dump)
        mod.rotate(tmp_path / "b", "b200", keep=3)
    kept = sorted(p.name for p in (tmp_path / "b").iterdir())
    pid = os.getpid()
    assert kept == [f"b200-2026010{i}T000000-{pid}{s}" for i in (3, 4, 5) for s in ("-qos.txt", ".cfg")]
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o700


def test_a_dump_that_writes_nothing_stops_the_apply(tmp_path):
    class Silent:
        def dump(self, path):
            pass

    mod = importlib.import_module("slurmadm.accounts.apply")
    with pytest.raises(UnreachableError, match="sacctmgr dump wrote no"):
        mod.save_dump(Silent(), tmp_path / "x.cfg")


def test_qos_record_equality_is_by_value():
    assert QosRecord("x", max_tres_per_user={"gres/gpu": "8"}) == QosRecord("x", max_tres_per_user={"gres/gpu": "8"})


# --- issue 15: a user in two projects, refusals, intent ----------------------------------------

def _without_grace(data):
    data["users"] = [u for u in data["users"] if u["name"] != "grace"]
    for p in data["projects"]:
        p["members"] = [m for m in p["members"] if m != "grace"]


def test_a_user_in_two_projects_loses_the_non_default_association_first():
    """slurmdbd refuses `delete user where name=grace` while grace has two associations ("You can
    not remove the default account of a user"); her non-default one goes first, alone."""
    site = site_with()
    live = as_stored(site)
    assert {a for (a, u) in live.assocs if u == "grace"} == {"ml-llm", "ml-vision"}
    default = live.default_account["grace"]
    other = ({"ml-llm", "ml-vision"} - {default}).pop()
    plan = make_plan(desired_state(site_with(_without_grace)), live)
    argvs = calls(plan, live)
    first = ["delete", "user", "where", "name=grace", f"account={other}", "cluster=b200"]
    last = ["delete", "user", "where", "name=grace", "cluster=b200"]
    assert first in argvs and last in argvs and argvs.index(first) < argvs.index(last)
    last_batch = next(b for b in batches(plan.runnable(True), plan.cluster, live) if b.argv == last)
    assert [op.target for op in last_batch.ops] == [f"user:grace@{default}"]


class Refusing:
    """sacctmgr that refuses any delete naming `bad`, alone or with others, and records calls."""

    def __init__(self, bad):
        self.bad = bad
        self.calls = []

    def execute(self, argv):
        self.calls.append(list(argv))
        names = next((a[5:].split(",") for a in argv if a.startswith("name=")), [])
        if argv[0] == "delete" and self.bad in names:
            from slurmadm.errors import CommandFailed
            raise CommandFailed(["sacctmgr", *argv], 1, " Error with request: You can not remove the default "
                                "account of a user")
        return ""


def test_a_refused_deletion_does_not_stop_the_others():
    from slurmadm.accounts.apply import Batch, _run_stage
    from slurmadm.accounts.plan import Op

    ops = [Op("delete-user", n, "ml-llm") for n in ("ann", "zed", "bob")]
    batch = Batch(["delete", "user", "where", "name=ann,zed,bob", "cluster=b200"], ops)
    sacctmgr = Refusing("zed")
    done, failed = _run_stage(sacctmgr, [batch])
    assert sorted(op.name for b in done for op in b.ops) == ["ann", "bob"]
    assert [(sorted(op.name for op in b.ops), "default account" in str(exc)) for b, exc in failed] == [(["zed"], True)]
    assert ["delete", "user", "where", "name=ann", "cluster=b200"] in sacctmgr.calls


class Slurmdbd:
    """Just enough sacctmgr for apply_site: a fixed state; `die_on` call raises KeyboardInterrupt
    after slurmdbd 'committed' it, as a killed apply would leave it."""

    cluster = "b200"

    def __init__(self, die_on=None):
        self.die_on = die_on
        self.n = 0

    def read_state(self):
        return empty_slurmdbd()

    def dump(self, path):
        Path(path).write_text("Cluster - 'b200'\n")

    def execute(self, argv):
        self.n += 1
        if self.n == self.die_on:
            raise KeyboardInterrupt  # the commit happened; this process got no further
        return ""

    def load(self, path):
        return self.execute(["load", f"file={path}"])


def test_a_killed_apply_leaves_the_intent_in_the_audit_trail(tmp_path):
    site = site_with(lambda d: d["store"].update(path=str(tmp_path / "s.db")))
    with Store(tmp_path / "s.db") as store, pytest.raises(KeyboardInterrupt):
        apply_site(site, Slurmdbd(die_on=1), store, prune=False, reason="ticket 42")
    with Store(tmp_path / "s.db") as store:
        events = store.events(action="accounts.*")
    assert events and all(e.detail["status"] == "started" and e.reason == "ticket 42" for e in events)
    assert any(e.action == "accounts.add-qos" for e in events)


def test_finished_changes_are_marked_done(tmp_path):
    from slurmadm.accounts.apply import NotConverged

    site = site_with(lambda d: d["store"].update(path=str(tmp_path / "s.db")))
    with Store(tmp_path / "s.db") as store, pytest.raises(NotConverged):  # the fake never changes
        apply_site(site, Slurmdbd(), store, prune=False, reason="r")
    with Store(tmp_path / "s.db") as store:
        events = store.events(action="accounts.*")
    # append-only audit (issue 24): each intent is followed by an event saying it is done
    started = {e.id for e in events if e.detail["status"] == "started"}
    followed = {e.detail.get("follows") for e in events if e.detail["status"] == "done"}
    assert started and started == followed
    assert {e.detail["status"] for e in events} == {"started", "done"}
    assert all(e.detail["command"].startswith("sacctmgr -i ") for e in events)


# What `scontrol show assoc_mgr` prints (the shape of src/scontrol/info_assoc_mgr.c, as in public
# samples, e.g. sites' test data quoting it): records per section, a user's name with its uid.
ASSOC_MGR_BEFORE = """Current Association Manager state

User Records

UserName=root(0) DefAccount=root DefWckey= AdminLevel=Administrator

Association Records

ClusterName=b200 Account=root UserName= Partition= Priority=0 ID=1
    SharesRaw/Norm/Level/Factor=1/0.00/0/0.00
    ParentAccount= Lft=1 DefAssoc=No
ClusterName=b200 Account=root UserName=root(0) Partition= Priority=0 ID=2
    ParentAccount= Lft=2 DefAssoc=Yes
ClusterName=other Account=ml-llm UserName= Partition= Priority=0 ID=9

QOS Records

QOS=normal(1)
    UsageRaw=0.000000
    Account Limits
        No Accounts
"""
ASSOC_MGR_AFTER = ASSOC_MGR_BEFORE.replace("\nQOS Records", """ClusterName=b200 Account=ml-llm UserName= Partition= Priority=0 ID=10
    ParentAccount=ml(3) Lft=5 DefAssoc=No
ClusterName=b200 Account=ml-llm UserName=alice(4294967294) Partition= Priority=0 ID=11
    ParentAccount= Lft=6 DefAssoc=Yes

QOS Records""").replace("    Account Limits\n        No Accounts\n", "QOS=high(2)\n    UsageRaw=0.000000\n")


def test_assoc_mgr_records_of_one_cluster():
    from slurmadm.slurm.accounting import parse_assoc_mgr

    assocs, qos = parse_assoc_mgr(ASSOC_MGR_AFTER, "b200")
    assert assocs == {("root", ""), ("root", "root"), ("ml-llm", ""), ("ml-llm", "alice")}
    assert qos == {"normal", "high"}


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def _added():
    from slurmadm.accounts.plan import Op

    return [Op("add-qos", "high"), Op("add-account", "ml-llm", "ml"), Op("add-user", "alice", "ml-llm"),
            Op("modify-qos", "normal")]


def test_apply_waits_until_slurmctld_holds_what_was_added():
    from slurmadm.accounts.apply import wait_enforced

    clock, reads = FakeClock(), []

    def read():
        reads.append(clock())
        return ASSOC_MGR_BEFORE if len(reads) < 4 else ASSOC_MGR_AFTER  # slurmdbd's update arrives late

    missing, took = wait_enforced(_added(), "b200", read, deadline_s=30, poll_s=0.5, clock=clock, sleep=clock.sleep)
    assert missing == [] and len(reads) == 4 and took == 1.5


def test_apply_says_what_has_not_arrived_after_the_deadline():
    from slurmadm.accounts.apply import wait_enforced
    from slurmadm.errors import UnreachableError

    clock = FakeClock()
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 2:
            raise UnreachableError("scontrol: timed out")  # a slurmctld too busy to answer counts as not yet
        return ASSOC_MGR_BEFORE

    missing, took = wait_enforced(_added(), "b200", read, deadline_s=5, poll_s=1, clock=clock, sleep=clock.sleep)
    assert missing == ["account:ml-llm", "user:alice@ml-llm", "qos:high"] and took == 5
    # nothing added (only modifications): nothing to wait for, slurmctld not even asked
    assert wait_enforced(_added()[3:], "b200", lambda: 1 / 0) == ([], 0.0)
