"""Slurm 26.05 (issue 21): the accounting JSON readers on real 26.05.5 output, checked against what
the same sacctmgr printed as text in the same capture (tests/fixtures/slurm/26.05/, made on the dev
cluster in the Debian forky chroot, commands in COMMANDS.txt). Fast: no Slurm, no chroot; CI runs it
with the unit suite. (The node readers are pinned on the 26.05 captures in test_parse.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.slurm.accounting import assocs_from_json, parse_tres, parse_wall, qos_from_json

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "slurm" / "26.05"
# the text columns, as COMMANDS.txt asked for them
QOS_TEXT = ("Name,Description,Priority,Preempt,PreemptMode,Flags,UsageFactor,GraceTime,GrpTRES,GrpTRESMins,"
            "GrpJobs,GrpSubmit,MaxTRES,MaxTRESPerNode,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxTRESPA,MaxWall,MinTRES")
ASSOC_TEXT = ("Cluster,Account,User,Partition,ParentName,Share,Priority,GrpJobs,GrpSubmit,GrpTRES,GrpTRESMins,"
              "GrpTRESRunMins,GrpWall,MaxJobs,MaxSubmit,MaxTRES,MaxTRESPerNode,MaxTRESMins,MaxWall,QOS,DefaultQOS")


def rows(name: str, fields: str) -> list[dict[str, str]]:
    keys = fields.split(",")
    out = []
    for line in (FIX / name).read_text().splitlines():
        cols = line.split("|")
        assert len(cols) == len(keys), (name, line)
        out.append(dict(zip(keys, cols)))
    return out


def test_the_capture_lists_the_commands_it_ran():
    cmds = (FIX / "COMMANDS.txt").read_text()
    assert f"format={QOS_TEXT}" in cmds and f"format={ASSOC_TEXT}" in cmds


def test_qos_json_reads_as_sacctmgr_printed_it():
    qos = qos_from_json((FIX / "sacctmgr-show-qos.json").read_text())
    text = {r["Name"]: r for r in rows("sacctmgr-show-qos.txt", QOS_TEXT)}
    assert set(qos) == set(text) and len(qos) >= 4
    for name, r in text.items():
        q = qos[name]
        assert q.description == r["Description"], name
        assert q.priority == int(r["Priority"]), name
        assert q.preempt == frozenset(p for p in r["Preempt"].split(",") if p), name
        assert q.preempt_mode == r["PreemptMode"].lower(), name
        assert q.usage_factor == pytest.approx(float(r["UsageFactor"])), name
        assert q.max_tres_per_user == parse_tres(r["MaxTRESPU"]), name
        assert q.max_tres_per_job == parse_tres(r["MaxTRES"]), name
        assert q.grp_tres == parse_tres(r["GrpTRES"]), name
        assert q.max_wall == (parse_wall(r["MaxWall"]) if r["MaxWall"] else None), name


def test_assoc_json_reads_as_sacctmgr_printed_it():
    recs, defaults = assocs_from_json((FIX / "sacctmgr-show-assoc.json").read_text())
    text = rows("sacctmgr-show-assoc.txt", ASSOC_TEXT)
    key = lambda a, u, p: (a, u, p)  # noqa: E731
    got = {key(r.account, r.user, r.partition): r for r in recs}
    assert set(got) == {key(r["Account"], r["User"], r["Partition"]) for r in text}
    for r in text:
        a = got[key(r["Account"], r["User"], r["Partition"])]
        where = (r["Account"], r["User"])
        if not r["User"]:  # an account's own row names its parent
            assert a.parent == r["ParentName"], where
        assert a.qos == frozenset(q for q in r["QOS"].split(",") if q), where
        assert a.grp_tres == parse_tres(r["GrpTRES"]), where
        assert a.grp_tres_mins == parse_tres(r["GrpTRESMins"]), where
        assert str(a.shares) == r["Share"] or (a.shares == "parent" and r["Share"] == "parent"), where
    assert any(r.user for r in recs) and set(defaults) == {r.user for r in recs if r.user} | {"root"}
