"""The sacctmgr, sshare and sacct text readers take their columns by name, on the captures of every
release (tests/fixtures/slurm/<release>/, COMMANDS.txt): those were asked for other `format=`
lists than slurmadm's own reads (sshare `-l` prints NormUsage and no GrpTRESRaw), and read by
position they were refused or misread. Also the job captures (sacct, `scontrol show job -o`),
checked against what the same Slurm printed in its other forms at the same moment."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.slurm.accounting import (
    AmbiguousOutput,
    accounts_from_text,
    assocs_from_json,
    assocs_from_text,
    gpu_minutes_from_sacct,
    qos_from_json,
    qos_from_text,
    shares_from_text,
)
from slurmadm.slurm.parse import parse_kv_line

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
RELEASES = ["22.05", "24.11", "26.05"]
JSON_RELEASES = ["24.11", "26.05"]  # sacctmgr --json from 23.02
# the format= lists of capture.sh (README.md of the fixtures)
QOS_TEXT = ("Name,Description,Priority,Preempt,PreemptMode,Flags,UsageFactor,GraceTime,GrpTRES,GrpTRESMins,"
            "GrpJobs,GrpSubmit,MaxTRES,MaxTRESPerNode,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxTRESPA,MaxWall,MinTRES")
ASSOC_TEXT = ("Cluster,Account,User,Partition,ParentName,Share,Priority,GrpJobs,GrpSubmit,GrpTRES,GrpTRESMins,"
              "GrpTRESRunMins,GrpWall,MaxJobs,MaxSubmit,MaxTRES,MaxTRESPerNode,MaxTRESMins,MaxWall,QOS,DefaultQOS")
ACCOUNT_TEXT = "Account,Description,Organization"
SACCT_TEXT = ("JobID,JobName,User,Account,QOS,Partition,State,ExitCode,Submit,Start,End,Elapsed,NodeList,"
              "AllocTRES,Reason")


def fixture(release: str, name: str) -> str:
    return (FIX / release / name).read_text()


def test_the_captures_were_made_with_these_columns():
    for release in RELEASES:
        cmds = fixture(release, "COMMANDS.txt")
        for fields in (QOS_TEXT, ASSOC_TEXT, ACCOUNT_TEXT, SACCT_TEXT):
            assert f"format={fields}" in cmds or f"--format={fields}" in cmds, (release, fields[:20])
        assert "sshare -a -l -P" in cmds


@pytest.mark.parametrize("release", RELEASES)
def test_qos_text_by_column(release):
    qos = qos_from_text(fixture(release, "sacctmgr-show-qos.txt"), QOS_TEXT)
    assert set(qos) == {"normal", "high", "low", "debug", "burnin"}
    high, low, normal = qos["high"], qos["low"], qos["normal"]
    assert (high.priority, high.preempt, high.usage_factor, high.max_wall) == (1000, {"low"}, 2.0, 2880)
    assert high.max_tres_per_user == {"gres/gpu": "16"} and high.description == "deadlines; preempts low"
    assert (low.preempt_mode, low.usage_factor, low.grp_tres) == ("requeue", 0.5, {"gres/gpu": "8"})
    assert normal.flags == {"DenyOnLimit"} and normal.max_tres_per_user == {"gres/gpu": "32"}
    assert normal.max_wall is None and qos["burnin"].max_wall == 240 and qos["burnin"].usage_factor == 0.0


@pytest.mark.parametrize("release", JSON_RELEASES)
def test_qos_text_and_json_are_the_same_records(release):
    assert qos_from_text(fixture(release, "sacctmgr-show-qos.txt"), QOS_TEXT) == qos_from_json(
        fixture(release, "sacctmgr-show-qos.json"))


@pytest.mark.parametrize("release", RELEASES)
def test_assoc_text_by_column_with_its_parent_names(release):
    recs = assocs_from_text(fixture(release, "sacctmgr-show-assoc.txt"), fields=ASSOC_TEXT)
    rows = {r.key: r for r in recs}
    lattice = rows[("phys-lattice", "")]
    assert (lattice.parent, lattice.shares, lattice.default_qos) == ("physics", 20, "normal")
    assert lattice.grp_tres == {"gres/gpu": "24"} and lattice.grp_tres_mins == {"gres/gpu": "30000000"}
    assert lattice.qos == {"normal", "high", "low"}
    assert rows[("phys-astro", "")].shares == "parent" and rows[("phys-astro", "")].parent == "physics"
    assert rows[("physics", "")].parent == "root" and rows[("root", "")].parent == ""
    assert rows[("phys-lattice", "alice")].grp_tres == {"gres/gpu": "12"}
    assert rows[("phys-lattice", "alice")].parent == ""  # users' rows name no parent account
    assert rows[("ml-vision", "")].default_qos == "low"
    assert {u for a, u in rows if a == "ml-llm" and u} == {"alice", "frank", "grace"}


@pytest.mark.parametrize("release", JSON_RELEASES)
def test_assoc_text_and_json_are_the_same_records(release):
    text = assocs_from_text(fixture(release, "sacctmgr-show-assoc.txt"), fields=ASSOC_TEXT)
    recs, _ = assocs_from_json(fixture(release, "sacctmgr-show-assoc.json"))
    # JSON names the parent on user rows too; the text reader leaves it to the account's row
    key = lambda r: (r.account, r.user, r.partition)  # noqa: E731
    assert sorted(text, key=key) == sorted((r if not r.user else type(r)(**{**r.__dict__, "parent": ""})
                                            for r in recs), key=key)


@pytest.mark.parametrize("release", RELEASES)
def test_account_text_without_coordinators_column(release):
    accts = accounts_from_text(fixture(release, "sacctmgr-show-account.txt"), ACCOUNT_TEXT)
    assert len(accts) == 11
    assert (accts["phys-lattice"].description, accts["phys-lattice"].organization) == ("lattice qcd", "physics")
    assert accts["biology"].description == "institute of computational biology"
    assert all(not a.coordinators for a in accts.values())


@pytest.mark.parametrize("release", RELEASES)
def test_sshare_long_by_its_header(release):
    """`sshare -l` has NormUsage between RawUsage and EffectvUsage and no GrpTRESRaw."""
    rows = {(r.account, r.user): r for r in shares_from_text(fixture(release, "sshare-l.txt"))}
    assert len(rows) == 23 and ("Account", "User") not in rows
    lattice = rows[("phys-lattice", "")]
    assert lattice.raw_shares == "20" and lattice.norm_shares == pytest.approx(0.952381)
    assert lattice.effective_usage == 0.0 and lattice.fairshare is None and lattice.level_fs == 0.0
    assert lattice.grp_tres_mins == {"gres/gpu": "30000000"} and lattice.grp_tres_raw == {}
    # jobs 3 and 4 run with 12 GPUs for their 90 minutes' limit: 1080 GPU-minutes still held
    assert lattice.tres_run_mins["gres/gpu"] == "1080" and lattice.tres_run_mins["mem"] == "230400"
    assert rows[("root", "root")].level_fs == float("inf") and rows[("root", "root")].fairshare == 1.0
    assert rows[("phys-astro", "")].raw_shares == "parent"
    assert rows[("ml-vision", "heidi")].norm_shares == 1.0


def test_sshare_of_slurmadms_own_columns_in_another_order():
    text = ("User|Account|GrpTRESRaw|RawUsage\n"
            "|phys-lattice|cpu=5,gres/gpu=40|300\n"
            "alice|phys-lattice|gres/gpu=10|60\n")
    rows = shares_from_text(text)
    assert [(r.account, r.user, r.raw_usage, r.grp_tres_raw) for r in rows] == [
        ("phys-lattice", "", 300, {"cpu": "5", "gres/gpu": "40"}), ("phys-lattice", "alice", 60, {"gres/gpu": "10"})]
    assert rows[0].tres_run_mins == {} and rows[0].norm_shares is None


def test_a_read_without_the_columns_it_needs_is_one_clear_error():
    with pytest.raises(UnreachableError, match="sshare: no 'user' column"):
        shares_from_text("Account|RawShares\nroot|1\n")
    with pytest.raises(UnreachableError, match="sacctmgr show qos: no 'name' column"):
        qos_from_text("normal|1000\n", "Description,Priority")
    with pytest.raises(AmbiguousOutput):  # a row that does not fit the header
        shares_from_text("Account|User|RawShares\nroot||1|extra\n")


def _epoch(value) -> int:
    if isinstance(value, dict):  # 23.02+: {"set", "infinite", "number"}
        return int(value.get("number") or 0)
    return int(value or 0)


def _json_gpu_minutes(release: str, window_end_text: str) -> dict[str, float]:
    """GPU-minutes per account from the same capture's sacct --json, to the same window end."""
    jobs = json.loads(fixture(release, "sacct.json"))["jobs"]
    # the text is local time of the capture; find its offset from job 1 (same submit second)
    text1 = next(line for line in fixture(release, "sacct.txt").splitlines() if line.startswith("1|"))
    submit_text = dt.datetime.fromisoformat(text1.split("|")[8]).replace(tzinfo=dt.timezone.utc).timestamp()
    j1 = next(j for j in jobs if j["job_id"] == 1)
    offset = _epoch(j1["time"]["submission"]) - submit_text
    hi = dt.datetime.fromisoformat(window_end_text).replace(tzinfo=dt.timezone.utc).timestamp() + offset
    out: dict[str, float] = {}
    for j in jobs:
        gpus = sum(int(t["count"]) for t in j["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu")
        start, end = _epoch(j["time"]["start"]), _epoch(j["time"]["end"]) or hi
        if gpus and start and min(end, hi) > start:
            out[j["account"]] = out.get(j["account"], 0.0) + gpus * (min(end, hi) - start) / 60
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_sacct_text_gpu_minutes_by_column_as_sacct_json_has_them(release):
    text = fixture(release, "sacct.txt")
    starts = [line.split("|")[9] for line in text.splitlines() if line.split("|")[9] not in ("Unknown", "None", "")]
    end = (dt.datetime.fromisoformat(max(starts)) + dt.timedelta(minutes=10)).isoformat()
    got = gpu_minutes_from_sacct(text, "2020-01-01T00:00:00", end, SACCT_TEXT)
    assert set(got) == {"phys-lattice", "ops-burnin"}  # the pending job 6 ran for no minute
    # jobs 3 (4 GPUs), 4 (8) and 5 (2) run on to the window's end: about 10 minutes each; the
    # .batch steps (the same GPUs again) are not counted twice
    assert 12 * 10 <= got["phys-lattice"] < 12 * 10.5 and 2 * 10 <= got["ops-burnin"] < 2 * 10.5
    if release in JSON_RELEASES:
        want = _json_gpu_minutes(release, end)
        assert got == pytest.approx(want)


@pytest.mark.parametrize("release", RELEASES)
def test_scontrol_show_job_lines_agree_with_squeue_and_sacct(release):
    jobs = {}
    for line in fixture(release, "scontrol-show-job.txt").splitlines():
        kv = parse_kv_line(line)
        jobs[kv["JobId"]] = kv
    assert sorted(jobs) == ["1", "2", "3", "4", "5", "6"]
    for row in fixture(release, "squeue.txt").splitlines():
        jid, name, user, account, qos, part, state, reason, nodes, gres = row.split("|")
        j = jobs[jid]
        assert (j["JobName"], j["Account"], j["QOS"], j["Partition"], j["JobState"], j["Reason"]) == (
            name, account, qos, part, state, reason)
        assert j["UserId"] == f"{user}(0)" and j.get("NodeList", "(null)") in (nodes, "(null)")
        # 22.05: TRES=; a pending job has no allocation yet (its request: ReqTRES, TresPerNode)
        tres = next(j[k] for k in ("AllocTRES", "TRES", "ReqTRES", "TresPerNode") if j.get(k, "(null)") != "(null)")
        assert re.search(rf"gres/gpu[=:]{gres.rsplit(':', 1)[1]}(,|$)", tres), (jid, tres)
    sacct = {c[0]: c for c in (line.split("|") for line in fixture(release, "sacct.txt").splitlines())}
    for jid, j in jobs.items():
        assert (j["JobState"], j["ExitCode"]) == (sacct[jid][6], sacct[jid][7]), jid
    assert jobs["2"]["JobState"] == "FAILED" and jobs["2"]["ExitCode"] == "3:0"
    assert jobs["6"]["Reason"] == "QOSGrpGRES" and jobs["6"]["StartTime"] == "Unknown"
    if release == "26.05":  # SubmitLine= (free text with spaces and `=`) reads whole up to the next key
        assert jobs["3"]["SubmitLine"].startswith("sbatch ") and "--gres=gpu:4" in jobs["3"]["SubmitLine"]
        assert jobs["3"]["SubmitLine"].endswith(" --wrap sleep 3600") and jobs["3"]["WorkDir"] == "/src"
    assert jobs["3"]["BatchHost"] == "b200-001" and jobs["5"]["NodeList"] == "b200-004"
