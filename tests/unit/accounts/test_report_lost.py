"""`accounts report --since`: GPU-hours lost to infrastructure beside those used (issue 36)."""

from __future__ import annotations

import pytest

from slurmadm.accounts.report import add_lost, build_full_report, organization_table, project_table
from slurmadm.slurm.accounting import shares_from_text
from tests.unit.accounts.test_report_usage import DATA, site, state

pytestmark = pytest.mark.unit


def test_lost_hours_per_project_roll_up_to_organisations_and_show_beside_ran():
    shares = shares_from_text((DATA / "sshare_runmins.txt").read_text())
    s = site()
    projects, orgs = build_full_report(s, state(), {}, shares, {"rep-test": 90.0})
    add_lost(s, projects, orgs, {"rep-test": 16.0, "ml-thesis": 2.5})
    by = {p.project: p for p in projects}
    assert by["rep-test"].gpu_hours_lost_infra == 16.0 and by["ml-thesis"].gpu_hours_lost_infra == 2.5
    org = {o.organization: o for o in orgs}
    assert org["ml-students"].gpu_hours_lost_infra == 18.5 and org["ml"].gpu_hours_lost_infra == 18.5
    assert org["physics"].gpu_hours_lost_infra == 0.0
    assert by["rep-test"].to_json()["gpu_hours_lost_infra"] == 16.0
    cols, rows = project_table(projects, "7d")
    rep = {r[0]: dict(zip(cols, r)) for r in rows}["rep-test"]
    assert rep["ran GPU-h since 7d"] == "1.5" and rep["lost to infra GPU-h"] == "16.00"
    ocols, _ = organization_table(orgs, "7d")
    assert "lost to infra GPU-h" in ocols
    plain, _ = project_table(build_full_report(s, state(), {}, shares, {"rep-test": 90.0})[0], "7d")
    assert "lost to infra GPU-h" not in plain  # not computed: no column
