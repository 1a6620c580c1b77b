"""sacctmgr/sshare/squeue/sacct parsers on output captured from real Slurm 22.05.8 and 24.11.5
(tests/unit/data/accounting/<release>/; the same sample accounts were loaded into both)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmadm.errors import CommandFailed, UnreachableError, UsageError
from slurmadm.slurm import accounting as acc
from slurmadm.slurm.accounting import (
    AmbiguousOutput,
    AssocRecord,
    Sacctmgr,
    TreeUnknown,
    accounts_from_json,
    accounts_from_text,
    assocs_from_json,
    assocs_from_text,
    default_accounts_from_json,
    default_accounts_from_text,
    format_tres,
    gpu_minutes_from_sacct,
    parse_tres,
    qos_from_json,
    qos_from_text,
    shares_from_text,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
RELEASES = ["22.05", "24.11"]


def sample(release: str, name: str) -> str:
    return (DATA / release / name).read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_qos_text(release):
    qos = qos_from_text(sample(release, "show_qos.txt"))
    assert set(qos) == {"normal", "high", "low"}
    high = qos["high"]
    assert (high.priority, high.usage_factor, high.preempt_mode) == (1000, 2.0, "cluster")
    assert high.preempt == {"low"} and high.flags == {"DenyOnLimit", "NoDecay"}
    assert high.max_tres_per_user == {"gres/gpu": "128"} and high.max_tres_per_job == {"gres/gpu": "16"}
    assert high.grp_tres == {"gres/gpu": "64"} and high.max_wall == 2880
    assert qos["low"].preempt_mode == "requeue" and qos["low"].usage_factor == 0.5
    assert qos["normal"].description.lower() == "normal qos default" and qos["normal"].max_wall is None


TREES = {"22.05": "nested", "24.11": "ids"}


@pytest.mark.parametrize("release", RELEASES)
def test_assocs_text(release):
    rows = {r.key: r for r in assocs_from_text(sample(release, "show_assoc.txt"))}
    lattice = rows[("phys-lattice", "")]
    assert lattice.parent == "physics" and lattice.shares == 20
    assert lattice.grp_tres == {"gres/gpu": "8"} and lattice.grp_tres_mins == {"gres/gpu": "30000"}
    assert lattice.qos == {"normal", "high", "low"} and lattice.default_qos == "normal"
    assert rows[("phys-astro", "")].shares == "parent"
    assert rows[("phys-lattice", "bob")].shares == "parent"
    # wopl: members store no QOS of their own; they inherit the project's
    assert rows[("phys-lattice", "alice")].qos == frozenset() and rows[("phys-lattice", "alice")].default_qos == ""
    assert rows[("phys-lattice", "alice")].grp_tres == {"gres/gpu": "4"}
    assert rows[("ml-llm", "")].grp_tres == {"cpu": "64", "gres/gpu": "12"}
    assert rows[("root", "")].parent == "" and rows[("ml", "")].parent == "root"


@pytest.mark.parametrize("release", RELEASES)
def test_the_tree_from_bounds_or_ids_is_the_tree_slurmdbd_names(release):
    """22.05 nested-set bounds (with gaps left by deleted rows) and 24.11 parent ids give the
    same parents as slurmdbd's own ParentName."""
    named = sorted(assocs_from_text(sample(release, "show_assoc.txt")), key=lambda r: r.key)
    derived = sorted(assocs_from_text(sample(release, "show_assoc_tree.txt"), TREES[release]), key=lambda r: r.key)
    assert derived == named


def test_a_tree_without_parents_asks_for_names():
    # 22.05 with wopi prints ParentID 0: no parent can be found from ids
    text = "root|||1|||normal||1|0\nphysics|||40|gres/gpu=16||||7|0\n"
    with pytest.raises(TreeUnknown, match="no parent found for 'physics'"):
        assocs_from_text(text, "ids")
    with pytest.raises(TreeUnknown, match="unreadable"):
        assocs_from_text("root|||1|||normal||x|y\n", "nested")


@pytest.mark.parametrize("release", RELEASES)
def test_accounts_and_defaults_text(release):
    accounts = accounts_from_text(sample(release, "show_account.txt"))
    assert accounts["physics"].description == "department of physics"  # sacctmgr lowercases it
    assert accounts["phys-lattice"].organization == "physics"
    assert accounts["ml-llm"].coordinators == {"alice", "bob"} and not accounts["ml"].coordinators
    assert default_accounts_from_text(sample(release, "show_defaults.txt")) == {
        "alice": "phys-lattice", "bob": "phys-lattice", "carol": "phys-astro", "root": "root"}


def test_text_lists_inherited_coordinators_which_are_not_direct():
    """22.05 after `add coordinator account=ml names=frank` and `... account=ml-llm names=grace`:
    slurmdbd lists frank on ml and on every account below it."""
    text = ("ml|machine learning lab|ml|frank\nml-llm|ml-llm|ml|frank,grace\nml-students|s|ml|frank\n"
            "ml-thesis|t|ml|frank\nroot|default root account|root|\n")
    parent = {"ml": "root", "ml-llm": "ml", "ml-students": "ml", "ml-thesis": "ml-students"}
    direct = acc.direct_coordinators(accounts_from_text(text), parent)
    assert {n: set(r.coordinators) for n, r in direct.items()} == {
        "ml": {"frank"}, "ml-llm": {"grace"}, "ml-students": set(), "ml-thesis": set(), "root": set()}
    assert direct["ml-llm"].description == "ml-llm" and direct["ml-llm"].organization == "ml"


def test_text_is_the_same_on_both_releases():
    for name in ("show_assoc.txt", "show_account.txt"):
        assert sample("22.05", name) == sample("24.11", name), name
    # normal's description was set again on 22.05, and sacctmgr stored it lowercased
    q22, q24 = (qos_from_text(sample(r, "show_qos.txt")) for r in RELEASES)
    assert q22["normal"].description == "normal qos default" and q24["normal"].description == "Normal QOS default"
    assert q22["high"] == q24["high"] and q22["low"] == q24["low"]


def test_json_parses_to_the_same_records_as_text():
    """24.11 --json: flags, preempt modes, TRES lists, wrapped numbers, Fairshare=parent as
    2147483647 and is_default all come out as the text form says."""
    assert qos_from_json(sample("24.11", "show_qos.json")) == qos_from_text(sample("24.11", "show_qos.txt"))
    recs, defaults = assocs_from_json(sample("24.11", "show_assoc.json"))
    key = lambda r: r.key
    assert sorted(recs, key=key) == sorted(assocs_from_text(sample("24.11", "show_assoc.txt")), key=key)
    assert defaults == default_accounts_from_text(sample("24.11", "show_defaults.txt"))
    assert accounts_from_json(sample("24.11", "show_account.json")) == accounts_from_text(
        sample("24.11", "show_account.txt"))
    assert default_accounts_from_json(sample("24.11", "show_user.json")) == defaults


def test_tres_strings():
    assert parse_tres("cpu=64,gres/gpu=12") == {"cpu": "64", "gres/gpu": "12"}
    assert parse_tres("") == {}
    assert format_tres({"gres/gpu": "8", "cpu": "-1"}) == "cpu=-1,gres/gpu=8"
    with pytest.raises(UnreachableError, match="cannot read TRES"):
        parse_tres("gres/gpu")


def test_a_name_with_a_pipe_makes_text_ambiguous():
    line = "weird|name||root||1|||normal|\n"
    with pytest.raises(AmbiguousOutput, match="10 fields instead of 9"):
        assocs_from_text(line)


def test_odd_json_is_one_clear_error():
    with pytest.raises(UnreachableError, match="output is not JSON"):
        qos_from_json("sacctmgr: error: Problem talking to the database")
    with pytest.raises(UnreachableError, match="no 'associations' list"):
        assocs_from_json('{"errors": []}')


@pytest.mark.parametrize("release", RELEASES)
def test_sshare(release):
    rows = {(r.account, r.user): r for r in shares_from_text(sample(release, "sshare.txt"))}
    assert ("Account", "User") not in rows  # header skipped
    lattice = rows[("phys-lattice", "")]  # indented in the output
    assert lattice.grp_tres_mins == {"gres/gpu": "30000"}
    assert lattice.grp_tres_raw["gres/gpu"] == "0"
    assert rows[("root", "root")].level_fs == float("inf")
    assert rows[("phys-astro", "")].raw_shares == "parent"


@pytest.mark.parametrize("release", RELEASES)
def test_running_jobs_tres(release):
    line = sample(release, "squeue_running.txt").strip()
    account, user, tres = line.split("|")[:3]
    assert (account, user) == ("ml-llm", "root") and acc.gpus_of(parse_tres(tres)) == 2


def test_gpu_minutes_are_clipped_to_the_window():
    text = (
        "p1|u|billing=1,gres/gpu=4,node=1|2026-01-01T10:00:00|2026-01-01T12:00:00|COMPLETED\n"
        "p1|u|gres/gpu=2|2026-01-01T11:30:00|2026-01-01T11:45:00|COMPLETED\n"
        "p2|u|cpu=1|2026-01-01T10:00:00|2026-01-01T12:00:00|COMPLETED\n"  # no GPUs
        "p3|u||2026-01-01T10:00:00|2026-01-01T10:00:00|FAILED\n"  # never got resources
    )
    minutes = gpu_minutes_from_sacct(text, "2026-01-01T11:00:00", "2026-01-01T13:00:00")
    assert minutes == {"p1": 4 * 60 + 2 * 15}


# ---- Sacctmgr against canned process results (the real thing: tests/integration) ----


class FakeRun:
    def __init__(self, outputs: dict[str, tuple[int, str, str]]):
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def __call__(self, argv, **_kw):
        self.calls.append(list(argv))
        text = " ".join(argv)
        for needle, (rc, out, err) in self.outputs.items():
            if needle in text:
                return subprocess.CompletedProcess(argv, rc, out, err)
        raise AssertionError(f"unexpected command {text}")


def canned(release: str, **override) -> dict[str, tuple[int, str, str]]:
    """sacctmgr answers by command (first matching needle wins)."""
    out = {
        "--version": (0, sample(release, "version.txt"), ""),
        "--json show assoc": (0, sample("24.11", "show_assoc.json"), ""),
        "show qos": (0, sample(release, "show_qos.txt"), ""),
        "onlydefaults": (0, sample(release, "show_defaults.txt"), ""),
        "wopi": (0, sample(release, "show_assoc_tree.txt"), ""),
        "show assoc": (0, sample(release, "show_assoc.txt"), ""),
        "show account": (0, sample(release, "show_account.txt"), ""),
    }
    return {**override, **out} if override else out


@pytest.mark.parametrize("release", RELEASES)
def test_read_state_reads_the_tree_the_release_has(monkeypatch, release):
    fake = FakeRun(canned(release))
    monkeypatch.setattr(acc, "run", fake)
    state = Sacctmgr("acctdev", fmt="auto").read_state()
    assert state.assocs[("phys-lattice", "alice")] == AssocRecord(
        account="phys-lattice", user="alice", grp_tres={"gres/gpu": "4"})
    assert state.assocs[("phys-astro", "")].parent == "physics"
    assert state.default_account == {"alice": "phys-lattice", "bob": "phys-lattice", "carol": "phys-astro",
                                      "root": "root"}
    assoc_call = next(c for c in fake.calls if "assoc" in c and "onlydefaults" not in c)
    assert "wopl" in assoc_call and "wopi" in assoc_call and "cluster=acctdev" in assoc_call
    assert assoc_call[-1].endswith({"22.05": "LFT,RGT", "24.11": "ID,ParentID"}[release])
    assert not any("--json" in c for c in fake.calls) and not any("user" in c for c in fake.calls)
    # the QOS as read are the QOS part of apply's backup: every field, with a header
    header, *rows = state.qos_table.splitlines()
    assert header.startswith("Name|Description|Priority|GraceTime") and header.endswith("MinTRES")
    assert any(r.startswith("high|deadlines|1000|") for r in rows) and len(rows) == 3


def test_unknown_tree_columns_fall_back_to_parent_names(monkeypatch):
    bad_tree = (0, "root|||1|||normal||1|0\nml|||30|||||5|0\n", "")
    fake = FakeRun({"ID,ParentID": bad_tree, **canned("24.11")})
    monkeypatch.setattr(acc, "run", fake)
    state = Sacctmgr("acctt").read_state()
    assert state.assocs[("ml-llm", "")].parent == "ml"
    assert any(c[-1].endswith("ParentName") for c in fake.calls)


def test_ambiguous_text_falls_back_to_json_where_the_release_has_it(monkeypatch):
    weird = (0, sample("24.11", "show_assoc_tree.txt") + "bad|name|||1|||||9|1\n", "")
    fake = FakeRun({"ID,ParentID": weird, **canned("24.11")})
    monkeypatch.setattr(acc, "run", fake)
    state = Sacctmgr("acctt").read_state()
    assert ("phys-lattice", "bob") in state.assocs
    assert any(c[:4] == ["sacctmgr", "--json", "show", "assoc"] for c in fake.calls)


def test_ambiguous_text_on_22_05_is_an_error(monkeypatch):
    weird = (0, "bad|name||root||1|||normal|1|2\n", "")
    monkeypatch.setattr(acc, "run", FakeRun({"LFT,RGT": weird, **canned("22.05")}))
    with pytest.raises(AmbiguousOutput):
        Sacctmgr("acctdev").read_state()


def test_json_format_needs_23_02(monkeypatch):
    monkeypatch.setattr(acc, "run", FakeRun({"--version": (0, "slurm 22.05.8\n", "")}))
    with pytest.raises(UsageError, match="needs Slurm 23.02"):
        Sacctmgr("acctdev", fmt="json").read_state()
    with pytest.raises(UsageError, match="SLURMADM_SACCTMGR_FORMAT"):
        Sacctmgr("x", fmt="yaml")


def test_a_refused_change_names_sacctmgr_s_reason(monkeypatch):
    fake = FakeRun({"delete account": (
        1, " Error with request: You can not remove the default account of a user\n  C = c A = p U = u\n", "")})
    monkeypatch.setattr(acc, "run", fake)
    with pytest.raises(CommandFailed) as err:
        Sacctmgr("c").execute(["delete", "account", "where", "name=p", "cluster=c"])
    assert "You can not remove the default account of a user" in str(err.value)
    assert err.value.exit_code == 3


def test_qos_memory_limits_compare_in_one_unit():
    """A QOS with a per-user memory limit: sacctmgr's text prints `mem=64G`, its --json the count
    in MB (65536). The real 24.11 samples, with that one limit added to QOS high in both forms."""
    import json

    text = sample("24.11", "show_qos.txt").replace("|gres/gpu=128|", "|gres/gpu=128,mem=64G|")
    doc = json.loads(sample("24.11", "show_qos.json"))
    high = next(q for q in doc["qos"] if q["name"] == "high")
    high["limits"]["max"]["tres"]["per"]["user"].append({"type": "mem", "name": "", "id": 2, "count": 65536})
    from_text, from_json = qos_from_text(text)["high"], qos_from_json(json.dumps(doc))["high"]
    assert from_text.max_tres_per_user == {"gres/gpu": "128", "mem": "65536"}
    assert from_text == from_json
    assert parse_tres("mem=512M,vmem=1.5T,cpu=8,billing=64G") == {
        "mem": "512", "vmem": "1572864", "cpu": "8", "billing": "64G"}
