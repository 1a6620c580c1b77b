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


# ---------------------------------------------------------------- 128 nodes fold (issue 27)
NODES = [f"b200-{i:03d}" for i in range(1, 129)]
ODD = ("b200-040", "b200-041", "b200-120")  # 125 agree, 3 differ


def test_firmware_status_of_128_nodes_is_one_row_per_component_and_version():
    from slurmadm.bmc.firmware import Drift

    drift = []
    for n in NODES:
        drift.append(Drift(n, "BMC", "1.02" if n == "b200-041" else "1.03", "1.03"))
        drift.append(Drift(n, "BIOS", None if n == "b200-120" else "2.1", "2.1"))
    title, cols, rows, wrap = v.firmware_status_table(drift)
    assert cols == ["nodes", "n", "component", "have", "baseline", "status"] and wrap == ["nodes"]
    assert rows == [("b200-041", "1", "BMC", "1.02", "1.03", ("drift", "yellow")),
                    ("b200-[001-040,042-128]", "127", "BMC", "1.03", "1.03", "ok"),
                    ("b200-120", "1", "BIOS", "-", "2.1", ("missing", "red")),
                    ("b200-[001-119,121-128]", "127", "BIOS", "2.1", "2.1", "ok")]
    assert v.firmware_status_code([Row(n, True, {}) for n in NODES], drift) == EXIT_PROBLEMS


def test_bootdev_status_and_plan_of_128_nodes_fold_by_device_and_action():
    data = [{"node": n, "bootdev": None if n == "b200-120" else "network" if n in ODD else "default",
             "persistent": n == "b200-040", "would_change": n in ODD[:2]} for n in NODES]
    title, cols, rows, wrap = v.bootdev_status_table(data, "status", False)
    assert title is None and cols == ["nodes", "n", "bootdev", "persistent"]
    assert rows == [("b200-[001-039,042-119,121-128]", "125", "default", "False"),
                    ("b200-040", "1", "network", "True"), ("b200-041", "1", "network", "False"),
                    ("b200-120", "1", ("unreachable", "red"), "False")]
    title, cols, rows, _ = v.bootdev_status_table(data, "pxe", True)
    assert title == "plan (dry run)" and cols[-1] == "action"
    assert rows[0] == ("b200-[001-039,042-119,121-128]", "125", "default", "False", "nothing")
    assert ("b200-041", "1", "network", "False", "set pxe (persistent)") in rows


def test_sel_clear_plan_of_128_nodes_folds_counts_and_shared_errors():
    plan = [{"node": n, "would_clear": None if n in ODD else 12 if n == "b200-077" else 3,
             "error": f"{n}-bmc:623: no answer within 2 s" if n in ODD else None} for n in NODES]
    title, cols, rows, wrap = v.sel_clear_plan_table(plan)
    assert title == "plan (dry run)" and cols == ["nodes", "n", "action"]
    assert rows == [("b200-[001-039,042-076,078-119,121-128]", "124", "clear 3 event(s)"),
                    ("b200-[040-041,120]", "3", "unreachable: <node>-bmc:623: no answer within 2 s"),
                    ("b200-077", "1", "clear 12 event(s)")]
    one = v.sel_clear_plan_table(plan[119:120])[2]
    assert one == [("b200-120", "1", "unreachable: b200-120-bmc:623: no answer within 2 s")]


def test_sensors_of_128_nodes_are_one_row_per_sensor_with_the_range_and_a_row_per_alarm():
    from slurmadm.bmc.model import Sensor

    def sensors(n: str, i: int) -> list:
        hot = n == "b200-041"
        return [Sensor("GPU1 Temp", "temperature", 95.0 if hot else 38.0 + i % 7, "C",
                       "critical" if hot else "ok", {"uc": 90.0}),
                Sensor("PSU1 Status", "power_supply", None, "", "warning" if n in ODD[::2] else "ok",
                       states=("failure detected",) if n in ODD[::2] else ("presence detected",)),
                Sensor("FAN1", "fan", 7200.0, "RPM", "ok")]

    rows = [Row(n, False, error="gone") if n == "b200-120" else Row(n, True, sensors(n, i))
            for i, n in enumerate(NODES)]
    title, cols, out, wrap = v.sensors_table(rows)
    assert cols == ["nodes", "n", "sensor", "type", "reading", "status", "thresholds"] and wrap == ["nodes"]
    assert out == [
        ("b200-041", "1", "GPU1 Temp", "temperature", "95 C", ("CRITICAL", "red"), "uc=90"),
        ("b200-[001-040,042-119,121-128]", "126", "GPU1 Temp", "temperature", "38-44 C", "ok", "uc=90"),
        ("b200-040", "1", "PSU1 Status", "power_supply", "failure detected", ("warning", "yellow"), ""),
        ("b200-[001-039,041-119,121-128]", "126", "PSU1 Status", "power_supply", "presence detected", "ok", ""),
        ("b200-[001-119,121-128]", "127", "FAN1", "fan", "7200 RPM", "ok", "")]
    assert v.sensors_code(rows) == EXIT_UNREACHABLE
