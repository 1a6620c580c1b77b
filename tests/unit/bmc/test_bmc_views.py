"""slurmadm/bmc/views.py: what the `bmc` commands show, without click: cells stay literal text
(a reason's `[bmc]` is not markup), colour only as (text, style), and the exit codes."""

from __future__ import annotations

import pytest

from slurmadm.bmc import views as v
from slurmadm.bmc.fanout import Row
from slurmadm.bmc.ops import Step
from slurmadm.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE

pytestmark = pytest.mark.unit


def test_plan_cells_are_literal_and_styled_apart():
    steps = [Step("b200-001", "power off", True, "already drained (slurmadm: x: y [bmc])", power="on", slurm="IDLE"),
             Step("b200-002", "refused", False, "running jobs (ALLOCATED); use --drain or --force", power="on"),
             Step("b200-003", "unreachable", False, error="b200-003: BMC did not answer within 5 s")]
    title, cols, rows = v.plan_table(steps, dry_run=False)
    assert title is None and cols == ["node", "power", "slurm", "action", "why"]
    assert rows[0] == ("b200-001", "on", "IDLE", ("power off", "green"), "already drained (slurmadm: x: y [bmc])")
    assert rows[1][3] == ("refused", "yellow") and rows[2][3] == ("unreachable", "red")
    assert rows[2][4] == "b200-003: BMC did not answer within 5 s" and rows[2][1] == "?"
    assert v.plan_table(steps, dry_run=True)[2][0][3] == "power off"  # a plan is not yet done: no colour
    assert v.plan_code(steps, {}) == EXIT_UNREACHABLE
    assert v.plan_code(steps[:2], {}) == EXIT_PROBLEMS and v.plan_code(steps[:1], {}) == 0
    assert v.plan_code(steps[:1], {"b200-001": "gone"}) == EXIT_UNREACHABLE


def test_unreachable_power_status_is_one_cell_in_two_styles():
    rows = [Row("b200-001", True, "on"), Row("b200-002", False, error="no answer [x]")]
    assert v.power_status_table(rows)[2] == [("b200-001", "1", "on"),
                                             ("b200-002", "1", [("unreachable", "red"), ": no answer [x]"])]
    assert v.code(rows) == EXIT_UNREACHABLE and v.code(rows[:1], problems=True) == EXIT_PROBLEMS
    assert v.errors_table(v.unreachable(rows)) == ("unreachable", ["node", "error"], [("b200-002", "no answer [x]")])
    assert v.errors_table([]) is None
