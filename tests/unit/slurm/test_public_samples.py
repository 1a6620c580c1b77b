"""Real Slurm output from public sources (tests/fixtures/slurm/SOURCES.md names each file's
origin), for the shapes the dev cluster never produces: several GPU types on one node, MIG
profiles, DYNAMIC_NORM nodes, PLANNED and COMPLETING beside a base state, maintenance
reservations with ReservationName after the reason. Each test here failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmadm.exporter.head import Job, Snapshot, aggregate, state_of
from slurmadm.slurm.model import NodeInfo, gres_gpus
from slurmadm.slurm.nodestate import BASE_STATES, FLAG_NAMES, FLAGS, SUFFIXES, decode
from slurmadm.slurm.ownership import format_reason, is_ours, may_drain, may_resume
from slurmadm.slurm.parse import nodes_from_json, nodes_from_scontrol_text

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def text_nodes(release: str, name: str) -> dict[str, NodeInfo]:
    return {n.name: n for n in nodes_from_scontrol_text((FIX / release / name).read_text())}


def json_doc(release: str, name: str) -> dict:
    return json.loads((FIX / release / name).read_text())


def json_nodes(doc: dict) -> dict[str, NodeInfo]:
    return {n.name: n for n in nodes_from_json(json.dumps(doc), "scontrol --json show node")}


# ----------------------------------------------------------------------------- multi-type GRES


def gres_samples():
    for line in (FIX / "public" / "gres-strings.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            text, gpus, source = line.split("\t")
            yield pytest.param(text, int(gpus), id=text[:40])


@pytest.mark.parametrize("text,gpus", list(gres_samples()))
def test_gres_strings_from_real_sites_count_every_gpu_entry(text, gpus):
    assert gres_gpus(text) == gpus


def test_multi_type_gres_in_the_text_path_counts_all_types():
    """26.05.2 `scontrol show nodes -o`: nb9 and nb10 have gpu:model_a:2,gpu:model_b:2."""
    nodes = text_nodes("26.05", "sckyzo-scontrol-show-nodes.txt")
    assert nodes["nb9"].gpus == 4 and nodes["nb10"].gpus == 4
    assert nodes["nb1"].gpus == 4 and nodes["na1"].gpus == 0
    assert nodes["nb9"].state == "IDLE" and nodes["nb9"].flags == {"DYNAMIC_NORM"}


def test_multi_type_gres_in_the_json_path_counts_all_types():
    """A real 25.11 data_parser node carrying the real multi-type Gres of the 26.05 sample."""
    doc = json_doc("25.11", "slurmweb-slurmrestd-node-planned.json")
    node = doc["nodes"][0]
    node["gres"], node["gres_used"] = "gpu:h100:2,gpu:h200:4", "gpu:h100:1(IDX:0),gpu:h200:4(IDX:2-5)"
    got = json_nodes(doc)["gpu1"]
    assert got.gpus == 6 and got.gpus_used == 5


def test_sinfo_gres_and_gresused_columns():
    for line in (FIX / "26.05" / "sckyzo-sinfo-gres-gresused.txt").read_text().splitlines():
        count, _state, gres, used = line.split()
        assert gres_gpus(used) == 0  # nothing allocated in that capture
        assert gres_gpus(gres) in (0, 4)
    _name, *_, gres, used = (FIX / "25.11" / "sckyzo-sinfo-node-gres-multitype.txt").read_text().split()
    assert gres_gpus(gres) == 4 and gres_gpus(used) == 1


def test_head_exporter_capacity_and_used_on_a_mixed_type_node():
    """Capacity, partition totals and "used" (capped at the node's total) on multi-type nodes."""
    nodes = list(text_nodes("26.05", "sckyzo-scontrol-show-nodes.txt").values())
    jobs = [Job("1", "RUNNING", "None", "u", "a", "gpu", True, 3, "nb9", "x"),
            Job("2", "RUNNING", "None", "u", "a", "gpu", True, 2, "nb10", "y")]
    agg = aggregate(Snapshot(nodes, jobs, {}))
    assert agg.gpus[("gpu", "allocated")] == 5  # not capped at the first type's 2
    assert agg.gpus[("gpu", "allocated")] + agg.gpus[("gpu", "idle")] == 4 + 4 + 4 + 4


# ----------------------------------------------------------------------------- node states


def test_base_states_and_flags_are_slurm_h():
    assert BASE_STATES == ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")
    for flag in ("COMPLETING", "PLANNED", "DRAIN", "NOT_RESPONDING", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                 "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "POWER_UP", "MAINTENANCE",
                 "RESERVED", "CLOUD", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "FAIL", "INVALID_REG"):
        assert flag in FLAG_NAMES and flag not in BASE_STATES
    assert len(FLAGS) == len(FLAG_NAMES) and set(SUFFIXES) == set("*~#!%$@^-")


def test_json_base_is_found_in_the_list_not_taken_from_its_end():
    """Slurm-web's real 25.11 node: state ["IDLE", "COMPLETING", "PLANNED"]."""
    node = json_nodes(json_doc("25.11", "slurmweb-slurmrestd-node-planned.json"))["gpu1"]
    assert node.state == "IDLE" and node.flags == {"COMPLETING", "PLANNED"}
    assert state_of(node) == "completing"


@pytest.mark.parametrize(
    "state,base,flags",
    [
        (["MIXED", "PLANNED"], "MIXED", {"PLANNED"}),
        (["IDLE", "COMPLETING"], "IDLE", {"COMPLETING"}),
        (["ALLOCATED", "DRAIN", "COMPLETING"], "ALLOCATED", {"DRAIN", "COMPLETING"}),
        (["DOWN", "COMPLETING"], "DOWN", {"COMPLETING"}),
        (["COMPLETING", "DOWN"], "DOWN", {"COMPLETING"}),
        (["IDLE", "CLOUD", "POWERED_DOWN"], "IDLE", {"CLOUD", "POWERED_DOWN"}),
        (["FUTURE", "DYNAMIC_FUTURE"], "FUTURE", {"DYNAMIC_FUTURE"}),
        ("REBOOT*+DRAIN", "IDLE", {"REBOOT_REQUESTED", "NOT_RESPONDING", "DRAIN"}),
        ("IDLE~+CLOUD", "IDLE", {"POWERED_DOWN", "CLOUD"}),
        ("DOWN*+DRAIN", "DOWN", {"NOT_RESPONDING", "DRAIN"}),
        ("MIXED-", "MIXED", {"PLANNED"}),
        ("idle#", "IDLE", {"POWERING_UP"}),
        ("idle!", "IDLE", {"POWER_DOWN"}),
        ("idle%", "IDLE", {"POWERING_DOWN"}),
        ("mix$", "MIXED", {"MAINTENANCE"}),
        ("alloc@", "ALLOCATED", {"REBOOT_REQUESTED"}),
        ("idle^", "IDLE", {"REBOOT_ISSUED"}),
        ("drng", "ALLOCATED", {"DRAIN"}),
        ("draining*", "ALLOCATED", {"DRAIN", "NOT_RESPONDING"}),
        ("COMPLETING", "UNKNOWN", {"COMPLETING"}),
        ("plnd", "IDLE", {"PLANNED"}),
        ("MIXED+DRAIN+DYNAMIC_NORM+MAINTENANCE+RESERVED", "MIXED", {"DRAIN", "DYNAMIC_NORM", "MAINTENANCE", "RESERVED"}),
    ],
)
def test_decode_every_form(state, base, flags):
    assert decode(state) == (base, frozenset(flags))


def test_never_drains_over_an_admins_down_while_jobs_complete():
    """Slurm-web's real 25.11 DOWN node (reason "CPU dead", root), with COMPLETING beside DOWN as
    the issue saw it: the last element was read as the base, so DOWN was lost."""
    doc = json_doc("25.11", "slurmweb-slurmrestd-node-down.json")
    doc["nodes"][0]["state"] = ["DOWN", "COMPLETING"]
    node = json_nodes(doc)["cn2"]
    assert node.state == "DOWN"
    verdict = may_drain(node)
    assert not verdict.act and "DOWN" in verdict.why


# ----------------------------------------------------------------------------- text tail fields


def test_reservation_name_after_the_reason_is_its_own_field():
    """25.11.2 `scontrol show nodes -o` in a maintenance reservation: `Reason=planned_maintenance
    [root@2026-07-22T23:31:17] ReservationName=maintenance-2026`."""
    nodes = text_nodes("25.11", "sckyzo-scontrol-show-nodes-reservation.txt")
    c1, c4 = nodes["c1"], nodes["c4"]
    assert c1.reason == "planned_maintenance" and c1.reason_user == "root" and c1.reason_time > 0
    assert c4.reason == "planned_maintenance" and c4.state == "IDLE" and "MAINTENANCE" in c4.flags
    assert nodes["c2"].reason == "" and nodes["c2"].flags >= {"PLANNED", "MAINTENANCE", "RESERVED"}
    assert nodes["c5"].reason == "" and nodes["c5"].flags == {"DYNAMIC_NORM", "RESERVED"}


def test_slurmadms_own_drain_is_still_its_own_with_trailing_fields():
    """The real c4 line with slurmadm's reason in place of the admin's, and an ordinary
    reservation (RESERVED, not MAINTENANCE): slurmadm must still recognise and resume it."""
    line = next(l for l in (FIX / "25.11" / "sckyzo-scontrol-show-nodes-reservation.txt").read_text().splitlines()
                if l.startswith("NodeName=c4 "))
    ours = format_reason("ecc-uncorrected", "GPU5 volatile DBE=2", "prolog")
    line = line.replace("+MAINTENANCE", "").replace("Reason=planned_maintenance", f"Reason={ours}")
    line = line.replace("ReservationName=maintenance-2026", "Comment=rack 7, slot=3 Extra=ticket=4712 "
                        "InstanceId=i-0abc InstanceType=p6-b200.48xlarge ReservationName=gpu-backfill")
    (node,) = nodes_from_scontrol_text(line)
    assert node.reason == ours and node.reason_user == "root"
    assert is_ours(node) and may_resume(node).act
