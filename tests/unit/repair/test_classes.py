"""The class of a verdict: NVIDIA's catalog action and our check ids, as data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from slurmadm.repair import classes

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3] / "slurmadm" / "repair"


@pytest.mark.parametrize("detail, cls, slot", [
    ("GPU2 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)", "GPU_LOST", "2"),
    ("GPU0 XID 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR (RESET_GPU)", "RESET_GPU", "0"),
    ("GPU5 XID 64 INFOROM_DRAM_RETIREMENT_FAILURE (RESET_GPU)", "RMA", "5"),
    ("GPU1 XID 48 ROBUST_CHANNEL_GPU_ECC_DBE (WORKFLOW_XID_48)", "ECC", "1"),
    ("GPU3 XID 95 ROBUST_CHANNEL_UNCONTAINED_ERROR (RESET_GPU)", "ECC", "3"),
    ("GPU4 XID 62 PMU_HALT_ERROR (RESET_GPU)", "RESET_GPU", "4"),
    ("GPU6 XID 145 NVLINK5 RLW status 0x00000004 (RESET_GPU)", "RESET_GPU", "6"),
    ("GPU7 XID 74 NVLINK_ERROR (no sub-code in the line) (WORKFLOW_NVLINK_ERR)", "NVLINK", "7"),
    ("GPU2 XID 154 GPU_RECOVERY_ACTION_CHANGED: Reboot (XID_154)", "RESTART_BM", "2"),
    ("GPU2 XID 154 GPU_RECOVERY_ACTION_CHANGED: Reset (XID_154)", "RESET_GPU", "2"),
    ("GPU1 x3 XID 54 SILENT_RUNNING_PWR_REDUCED_CLOCKING (CHECK_MECHANICALS)", "MECHANICAL", "1"),
])
def test_xid_classes_follow_the_catalog_action(detail, cls, slot):
    (f,) = classes.classify("xid", detail)
    assert (f.cls, f.slot, f.part_kind, f.opens_incident) == (cls, slot, "gpu", True)


@pytest.mark.parametrize("xid, name, action", [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
])
def test_application_xids_never_open_incidents(xid, name, action):
    (f,) = classes.classify("xid", f"GPU0 XID {xid} {name} ({action})")
    assert f.cls == "APPLICATION" and not f.opens_incident


def test_every_catalog_action_has_a_class():
    actions = set(classes._catalog().values()) - {""}
    assert actions - set(classes.action_classes()) <= {"XID_154"}


def test_several_findings_of_one_check_are_several_faults():
    detail = ("GPU2 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM); "
              "GPU3 XID 45 ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (WORKFLOW_XID_45)")
    got = [(f.cls, f.slot) for f in classes.classify("xid", detail)]
    assert got == [("GPU_LOST", "2"), ("APPLICATION", "3")]


@pytest.mark.parametrize("check_id, detail, cls, kind", [
    ("gpu-count", "GPU3 unusable (Unknown Error)", "GPU_LOST", "gpu"),
    ("row-remap", "GPU1 row remapping failed (corrected=0 uncorrected=2)", "RMA", "gpu"),
    ("row-remap", "GPU1 row remap pending (reset the GPU)", "ECC", "gpu"),
    ("ecc-uncorrected", "GPU4 volatile DBE=2", "ECC", "gpu"),
    ("thermal", "GPU2 92 C > 87 C", "THERMAL", "gpu"),
    ("mounts", "/scratch has 0.5 GiB free < 10 GiB", "DISK", "node"),
    ("mounts", "/home is not mounted", "MOUNT", "node"),
    ("infiniband", "mlx5_0 port 1 state DOWN", "HCA", "hca"),
    ("bmc-psu", "PSU2 Status: failure detected", "PSU", "psu"),
    ("bmc-fan", "FAN3: 0 RPM below critical", "FAN", "fan"),
    ("bmc-recover", "no slurmd after power-cycle", "NODE_DOWN", "node"),
    ("burnin-stress", "GPU3 2.1 TFLOPS < floor", "BURNIN", "node"),
    ("alert-GpuRowRemapFailure", "GPU2 row remap failure", "RMA", "gpu"),
])
def test_check_ids(check_id, detail, cls, kind):
    (f,) = classes.classify(check_id, detail)
    assert (f.cls, f.part_kind) == (cls, kind)


def test_a_burnin_health_failure_is_classed_by_the_checks_it_names():
    """Burn-in's health test names the suite's failed checks, "<check id>: <detail>" joined with
    "; " (a check's own findings too): each is classed as health's own drain would be, on its
    part, so an ECC error found under burn-in load is that GPU's incident, not a node-wide
    BURNIN one; the fault keeps burn-in's check id (its evidence says who found it)."""
    detail = ("infiniband: mlx5_3 link flapped 2 times in 6 h; mlx5_4 link flapped 3 times in 6 h; "
              "ecc-uncorrected: GPU5 volatile uncorrected ECC=2; xid: GPU1 XID 79 X (RESTART_BM)")
    got = [(f.cls, f.part_kind, f.slot, f.check_id) for f in classes.classify("burnin-health", detail)]
    assert got == [("HCA", "hca", "mlx5_3", "burnin-health"), ("ECC", "gpu", "5", "burnin-health"),
                   ("GPU_LOST", "gpu", "1", "burnin-health")]
    assert classes.health_checks_in(detail)[0] == ("infiniband", "mlx5_3 link flapped 2 times in 6 h; "
                                                                 "mlx5_4 link flapped 3 times in 6 h")
    # no check it knows (a suite newer than this data, a hand-made reason): burn-in's own fault
    (f,) = classes.classify("burnin-health", "gpu-widget: GPU2 sprocket loose")
    assert (f.cls, f.part_kind) == ("BURNIN", "node")
    (f,) = classes.classify("burnin-health", "12 checks: GPU2 odd")
    assert (f.cls, f.part_kind) == ("BURNIN", "node")


def test_unknown_check_is_no_fault():
    assert classes.classify("no-such-check", "whatever") == []


def test_sources_are_given():
    assert all(c.source for c in classes.classes().values())
    assert all(r.source for r in classes.check_rules())


@pytest.mark.parametrize("name", ["incidents.py", "model.py", "classes.py", "ladder.py", "__init__.py"])
def test_low_floor_imports_nothing_above_it(name):
    """The incident model sits below health, bmc, burnin, monitor and exporter: no arrow up."""
    banned = ("health", "bmc", "burnin", "monitor", "exporter", "fleet", "jobs", "top", "cli")
    tree = ast.parse((ROOT / name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            top = node.module.split(".")[0]
            assert not (node.level == 2 and top in banned), f"{name} imports ..{node.module}"
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            assert not (parts[0] == "slurmadm" and len(parts) > 1 and parts[1] in banned), node.module
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                assert not (parts[0] == "slurmadm" and len(parts) > 1 and parts[1] in banned), a.name
