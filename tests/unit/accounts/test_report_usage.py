"""Issue 16 item 8: the accounts report on real sshare/sacct output (22.05 dev cluster, see
tests/unit/data/accounting/README.md): charged vs run GPU-hours kept apart, requeued runs counted,
an organisation's budget shown on the projects it limits, and running jobs' reserved time
subtracted from what is left."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.accounts.report import build_full_report, organization_table, project_table
from slurmadm.site import parse_site
from slurmadm.slurm.accounting import AccountingState, AssocRecord, gpu_minutes_from_sacct, shares_from_text
from tests.unit.siteedit import edited

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting" / "22.05"


def site():
    def add(d):
        d["projects"].append({"name": "rep-test", "organization": "ml-students", "members": ["root"],
                              "qos": ["normal", "high", "low"], "default_qos": "normal"})
    return parse_site(edited(add))


def state() -> AccountingState:
    st = AccountingState(cluster="b200")
    for account, parent, mins in (("ml", "root", {}), ("ml-students", "ml", {"gres/gpu": "1200000"}),
                                  ("rep-test", "ml-students", {}), ("ml-thesis", "ml-students", {})):
        st.assocs[(account, "")] = AssocRecord(account=account, parent=parent, grp_tres_mins=mins)
    st.assocs[("rep-test", "root")] = AssocRecord(account="rep-test", user="root")
    return st


def test_sshare_with_tres_run_mins():
    rows = {(r.account, r.user): r for r in shares_from_text((DATA / "sshare_runmins.txt").read_text())}
    rep = rows[("rep-test", "")]
    assert rep.grp_tres_raw["gres/gpu"] == "17" and rep.tres_run_mins["gres/gpu"] == "80"
    assert rows[("ml-students", "")].grp_tres_mins == {"gres/gpu": "1200000"}
    old = shares_from_text((DATA / "sshare.txt").read_text())  # captured without TRESRunMins
    assert old and all(r.tres_run_mins == {} for r in old)


def test_sacct_counts_the_requeued_run():
    text = (DATA / "sacct_requeued.txt").read_text()
    minutes = gpu_minutes_from_sacct(text, "2026-12-01T08:00:00", "2026-12-01T08:54:33")
    # 16 GPUs x 26 s + 16 x 15 s + the requeued job's first run 8 x 10 s (the running job starts at the end)
    assert minutes["rep-test"] == pytest.approx((16 * 26 + 16 * 15 + 8 * 10) / 60)


def test_report_charged_inherited_budget_and_running():
    shares = shares_from_text((DATA / "sshare_runmins.txt").read_text())
    projects, orgs = build_full_report(site(), state(), {("rep-test", "root"): 8}, shares,
                                       {"rep-test": 12.27 * 60 / 60})
    rep = {p.project: p for p in projects}["rep-test"]
    students = {o.organization: o for o in orgs}["ml-students"]
    assert rep.gpu_hours_charged == pytest.approx(17 / 60)  # x UsageFactor, not the 12.3 run minutes
    assert rep.gpu_hours_run_since == pytest.approx(12.27 / 60)
    assert rep.budget_account == "ml-students" and rep.gpu_hours_budget == 20000
    assert rep.gpu_hours_running == pytest.approx(80 / 60)
    assert rep.gpu_hours_left == pytest.approx(20000 - 17 / 60 - 80 / 60)
    assert students.gpus_in_use == 8 and students.gpu_hours_left == rep.gpu_hours_left
    assert students.gpu_hours_run_since == pytest.approx(12.27 / 60)  # rolled up from its projects
    thesis = {p.project: p for p in projects}["ml-thesis"]  # the case: no budget of its own
    assert thesis.budget_account == "ml-students" and thesis.gpu_hours_budget == 20000
    assert {o.organization for o in orgs} == {"ops", "physics", "biology", "ml", "ml-students"}


def test_the_tightest_budget_is_reported():
    st = state()
    st.assocs[("rep-test", "")] = AssocRecord(account="rep-test", parent="ml-students",
                                              grp_tres_mins={"gres/gpu": "60"})  # 1 GPU-hour of its own
    shares = shares_from_text((DATA / "sshare_runmins.txt").read_text())
    rep = {p.project: p for p in build_full_report(site(), st, {}, shares)[0]}["rep-test"]
    assert rep.budget_account == "rep-test" and rep.gpu_hours_budget == 1.0
    assert rep.gpu_hours_left == pytest.approx(1.0 - 17 / 60 - 80 / 60)


def test_report_says_unknown_not_zero_when_slurm_does_not_track_gpus():
    """AccountingStorageTRES without gres/gpu: jobs carry no gres/gpu, so "0 GPUs in use" and
    "0 GPU-hours charged" would be false; the report gives None (and the CLI a warning)."""
    from slurmadm.slurm.accounting import config_value, gpu_tres_tracked

    conf = "AccountingStorageHost   = localhost\nAccountingStorageTRES   = cpu,mem,energy,node,billing\n"
    tracked = gpu_tres_tracked(config_value(conf, "AccountingStorageTRES"))
    assert tracked is False
    shares = shares_from_text((DATA / "sshare_runmins.txt").read_text())
    projects, orgs = build_full_report(site(), state(), {}, shares, None, tracked)
    rep = {p.project: p for p in projects}["rep-test"]
    assert rep.gpus_in_use is None and rep.gpu_hours_charged is None and rep.gpu_hours_left is None
    assert all(o.gpus_in_use is None for o in orgs)
    tracked_rep = {p.project: p for p in build_full_report(site(), state(), {}, shares)[0]}["rep-test"]
    assert tracked_rep.gpus_in_use == 0 and tracked_rep.gpu_hours_charged is not None


def test_the_tables_people_read():
    shares = shares_from_text((DATA / "sshare_runmins.txt").read_text())
    st = state()
    st.accounts = {}
    projects, orgs = build_full_report(site(), st, {("rep-test", "root"): 8}, shares, {"rep-test": 90.0})
    cols, rows = project_table(projects, "1h")
    assert cols[:3] == ["project", "org", "GPU quota"] and "ran GPU-h since 1h" in cols
    by = {r[0]: dict(zip(cols, r)) for r in rows}
    rep = by["rep-test"]
    assert rep["in use"] == "8" and rep["budget GPU-h"] == "20,000.0 (ml-students)"  # inherited: named
    assert rep["ran GPU-h since 1h"] == "1.5" and rep["members (* coordinator)"] == "root"
    absent = next(r for name, r in by.items() if name.endswith(" (not in slurmdbd)"))
    assert absent["budget GPU-h"] == "-"
    ocols, orows = organization_table(orgs, None)
    assert not any(c.startswith("ran GPU-h") for c in ocols)
    org = {r[0]: dict(zip(ocols, r)) for r in orows}["ml-students"]
    assert org["budget GPU-h"] == "20,000.0" and org["parent"] == "ml"  # its own budget: no name
