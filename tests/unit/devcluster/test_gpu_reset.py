"""Stand-in GPU reset, reset failure, part swap and corruption (issues 34/35), read through the
REAL pynvml in child processes (the stand-in library), the fake nvidia-smi's wording and exit
codes, and the known-answer test's dev-cluster device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurmadm.devcluster import fakesmi, gpus, katdevice
from slurmadm.errors import UsageError
from slurmadm.health import xid as xidmod
from slurmadm.repair import kat
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

B200 = BUILTIN_PROFILES["hgx-b200"]
DRIVER = "570.133.20"
NODES = ("node-a", "node-b")

READ = r"""
import json, sys, pynvml as N
N.nvmlInit()
out = {}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    unc, vol, agg = N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC
    out[str(N.nvmlDeviceGetMinorNumber(h))] = {
        "serial": N.nvmlDeviceGetSerial(h), "uuid": N.nvmlDeviceGetUUID(h),
        "board_part": N.nvmlDeviceGetBoardPartNumber(h), "bus_id": N.nvmlDeviceGetPciInfo(h).busId,
        "ecc_vol": N.nvmlDeviceGetTotalEccErrors(h, unc, vol), "ecc_agg": N.nvmlDeviceGetTotalEccErrors(h, unc, agg),
        "remap": list(N.nvmlDeviceGetRemappedRows(h)),
        "recovery": N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0].value.uiVal,
        "persistence": N.nvmlDeviceGetPersistenceMode(h),
        "by_serial": N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleBySerial(N.nvmlDeviceGetSerial(h))),
    }
print(json.dumps(out))
"""


@pytest.fixture()
def d(tmp_path: Path) -> Path:
    for node in NODES:
        gpus.write_healthy(tmp_path, node, B200, driver_version=DRIVER)
    return tmp_path


def nvml(d: Path, lib: Path, node: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMADM_FAKE_NVML", "SLURMD_NODENAME"))}
    env.update(gpus.env_for(d, lib, node))
    r = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def smi(d: Path, node: str, *argv: str) -> tuple[int, str]:
    return fakesmi.run(d, node, list(argv))


def pm_off(d: Path, node: str, gpu: int) -> None:
    assert smi(d, node, "-pm", "0", "-i", str(gpu))[0] == 0


# ------------------------------------------------------------------------------ reset


def test_reset_clears_volatile_state_keeps_lifetime_counts_and_counts(d, fake_nvml_lib):
    for kind, value in (("ecc-uncorrected", 2), ("row-remap-pending", None), ("hang", None), ("xid", 48)):
        gpus.inject(d, "node-a", 3, kind, value)
    gpus.inject(d, "node-a", 5, "ecc-uncorrected", 1)  # another GPU: untouched by GPU 3's reset
    # (GPU 3 hangs: NVML is read only after the reset)
    pm_off(d, "node-a", 3)
    assert smi(d, "node-a", "--gpu-reset", "-i", "3") == (0, "GPU 00000000:61:00.0 was successfully reset.")
    after = nvml(d, fake_nvml_lib, "node-a")
    g3 = after["3"]
    assert g3["ecc_vol"] == 0 and g3["ecc_agg"] == 2  # volatile cleared, lifetime kept
    assert g3["remap"] == [0, 1, 0, 0]  # the pending remap was applied: no longer pending
    assert g3["recovery"] == 0
    assert after["5"]["ecc_vol"] == 1
    assert gpus.reset_counts(d, "node-a") == {3: {"ok": 1, "failed": 0, "last": "ok",
                                                  "last_ts": gpus.reset_counts(d, "node-a")[3]["last_ts"]}}
    kinds = [f["kind"] for f in gpus.list_faults(d, "node-a") if f["gpu"] == 3]
    assert kinds == ["after-reset"]
    # --clear still gets back to the healthy baseline
    gpus.clear(d, "node-a", gpu=3)
    assert nvml(d, fake_nvml_lib, "node-a")["3"]["ecc_agg"] == 0


def test_reset_does_not_repair_hardware(d):
    for kind in ("row-remap-failed", "missing-gpu", "corrupt", "nvlink-down"):
        gpus.inject(d, "node-a", 1 if kind != "missing-gpu" else 2, kind)
    pm_off(d, "node-a", 1)
    assert smi(d, "node-a", "-r", "-i", "1")[0] == 0
    assert {f["kind"] for f in gpus.list_faults(d, "node-a") if f["gpu"] == 1} == {"row-remap-failed", "corrupt",
                                                                                   "nvlink-down"}
    # a lost GPU: by bus id it is lost (exit 15); not enumerated, so index 7 no longer exists (exit 6)
    code, text = smi(d, "node-a", "-r", "-i", "00000000:52:00.0")
    assert code == 15 and text == ("Unable to determine the device handle for GPU 0000:52:00.0: GPU is lost.  "
                                   "Reboot the system to recover this GPU")
    assert smi(d, "node-a", "-r", "-i", "7") == (6, "No devices were found")
    assert "missing-gpu" in {f["kind"] for f in gpus.list_faults(d, "node-a")}


def test_reboot_class_xid_survives_a_reset(d, fake_nvml_lib):
    gpus.inject(d, "node-a", 0, "xid", 79)  # fallen off the bus: a node reboot (recovery action 2)
    pm_off(d, "node-a", 0)
    assert smi(d, "node-a", "-r", "-i", "0")[0] == 0
    assert nvml(d, fake_nvml_lib, "node-a")["0"]["recovery"] == 2
    assert "recovery action changed" not in gpus.kmsg_path(d, "node-a").read_text()


def test_a_logged_reset_acknowledges_a_reset_class_xid(d):
    when = datetime.now(UTC).replace(microsecond=0)
    gpus.inject(d, "node-a", 2, "xid", 48, now=when)  # DBE: RESET_GPU workflow
    pm_off(d, "node-a", 2)
    gpus.reset(d, "node-a", [2], now=when + timedelta(microseconds=250_000))  # the same second
    lines = gpus.kmsg_path(d, "node-a").read_text().splitlines()
    assert "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)" in lines[-1]
    now = time.time()
    events = xidmod.events_from_file(str(gpus.kmsg_path(d, "node-a")), now)
    findings = xidmod.summarize(events, now=now + 7200, window_s=60)  # long after the window
    assert [(f.xid, f.resolved) for f in findings] == []  # resolved by the reset and out of the window
    recent = xidmod.summarize(events, now=now, window_s=3600)
    assert {f.xid: f.resolved for f in recent}[48] == "reset"


def test_reset_refused_while_in_use_by_persistence_or_a_process(d):
    code, text = smi(d, "node-a", "--gpu-reset", "-i", "4")  # persistence mode on, as healthy GPUs are
    assert code == 255
    assert text.splitlines()[:2] == ["The following GPUs could not be reset:",
                                     "  GPU 00000000:9D:00.0: In use by another client"]
    assert "1 device is currently being used by one or more other processes" in text
    gpus.inject(d, "node-a", 4, "leftover-process", 777)
    pm_off(d, "node-a", 4)
    assert smi(d, "node-a", "-r", "-i", "4")[0] == 255
    assert gpus.reset_counts(d, "node-a")[4] == {**gpus.reset_counts(d, "node-a")[4], "ok": 0, "failed": 2,
                                                 "last": "in-use"}
    enabled = "Enabled persistence mode for GPU 00000000:9D:00.0.\nAll done."
    assert smi(d, "node-a", "-pm", "1", "-i", "4") == (0, enabled)


def test_reset_fail_fails_once_and_changes_nothing(d, fake_nvml_lib):
    gpus.inject(d, "node-a", 6, "ecc-uncorrected", 3)
    gpus.inject(d, "node-a", 6, "reset-fail")
    pm_off(d, "node-a", 6)
    before = nvml(d, fake_nvml_lib, "node-a")
    code, text = smi(d, "node-a", "-r", "-i", "6")
    assert (code, text) == (255, "The following GPUs could not be reset:\n  GPU 00000000:D1:00.0: Unknown Error")
    assert nvml(d, fake_nvml_lib, "node-a") == before  # nothing changed
    assert gpus.reset_counts(d, "node-a")[6]["failed"] == 1
    assert smi(d, "node-a", "-r", "-i", "6")[0] == 0  # the next one works
    assert nvml(d, fake_nvml_lib, "node-a")["6"]["ecc_vol"] == 0
    assert {k: v for k, v in gpus.reset_counts(d, "node-a")[6].items() if k != "last_ts"} == {
        "ok": 1, "failed": 1, "last": "ok"}


def test_reset_of_several_gpus_reports_each(d):
    gpus.inject(d, "node-a", 1, "reset-fail")
    gpus.set_persistence(d, "node-a", list(range(8)), False)
    code, text = smi(d, "node-a", "-r")  # every GPU
    assert code == 255
    assert text.count("was successfully reset.") == 7 and "  GPU 00000000:43:00.0: Unknown Error" in text
    assert smi(d, "node-a", "-r", "-i", "0,GPU-nope") == (6, "No devices were found")
    assert smi(d, "node-a", "-r", "-pm", "0")[0] == 2


# ------------------------------------------------------------------------------ replace


def test_replace_gives_the_slot_a_new_part_as_pynvml_reads_it(d, fake_nvml_lib):
    old = nvml(d, fake_nvml_lib, "node-a")
    assert old["2"]["board_part"] == "692-2G525-0225-001"
    gpus.inject(d, "node-a", 2, "row-remap-failed")
    record = gpus.inject(d, "node-a", 2, "replace")
    new = nvml(d, fake_nvml_lib, "node-a")
    assert new["2"]["serial"] != old["2"]["serial"] and new["2"]["uuid"] != old["2"]["uuid"]
    assert record["old_serial"] == old["2"]["serial"] and record["value"] == new["2"]["serial"]
    assert new["2"]["remap"] == [0, 0, 0, 0] and new["2"]["by_serial"] == 2  # the old part's faults left with it
    assert new["2"]["bus_id"] == old["2"]["bus_id"]  # same slot
    assert {k: v for k, v in new.items() if k != "2"} == {k: v for k, v in old.items() if k != "2"}
    gpus.clear(d, "node-a", gpu=2, kind="replace")  # not a revert
    assert nvml(d, fake_nvml_lib, "node-a")["2"]["serial"] == new["2"]["serial"]


def test_a_part_moved_to_another_node_keeps_its_identity(d, fake_nvml_lib):
    a_old = nvml(d, fake_nvml_lib, "node-a")["5"]
    gpus.inject(d, "node-a", 5, "replace")  # node-a's GPU 5 comes out ...
    with pytest.raises(UsageError, match="installed in node-a GPU 0"):
        gpus.inject(d, "node-b", 1, "replace", gpus.read_state(d, "node-a")["gpus"][0]["serial"])
    gpus.inject(d, "node-b", 1, "replace", a_old["serial"])  # ... and goes into node-b's slot 1
    b = nvml(d, fake_nvml_lib, "node-b")["1"]
    assert (b["serial"], b["uuid"], b["board_part"]) == (a_old["serial"], a_old["uuid"], a_old["board_part"])
    assert not gpus.read_state(d, "node-a")["removed_parts"]  # it is no longer on the shelf
    assert gpus.inject(d, "node-b", 1, "replace", a_old["serial"])["changed"] is False  # idempotent
    fresh = gpus.inject(d, "node-b", 3, "replace", "1655000000042")  # a serial never seen: a UUID from it
    assert nvml(d, fake_nvml_lib, "node-b")["3"]["uuid"] == fresh["uuid"]
    with pytest.raises(UsageError, match="not a GPU serial"):
        gpus.inject(d, "node-b", 3, "replace", "bad serial!")


# ------------------------------------------------------------------------------ corrupt / KAT


def test_corrupt_changes_exactly_one_devices_known_answer(d):
    env = {"SLURMADM_FAKE_NVML_DIR": str(d), "SLURMADM_FAKE_NVML_NODE": "node-a"}
    devices = kat.select_devices(env)
    assert [dev.name for dev in devices] == [f"standin:node-a:gpu{i}" for i in range(8)]
    healthy = kat.known_answer(devices, seed=7)
    assert healthy.ok and healthy.basis == "majority" and len({r.digest for r in healthy.results}) == 1
    assert healthy.reference == kat.digest(kat.reference_bytes(7))  # the same as the CPU reference

    gpus.inject(d, "node-a", 4, "corrupt")
    verdict = kat.known_answer(devices, seed=7)
    assert not verdict.ok and verdict.bad == ("standin:node-a:gpu4",)
    assert [r.digest == healthy.reference for r in verdict.results] == [i != 4 for i in range(8)]
    raw_good, raw_bad = kat.reference_bytes(7), devices[4].run(7)
    assert sum((x ^ y).bit_count() for x, y in zip(raw_good, raw_bad)) == 1  # one bit
    pm_off(d, "node-a", 4)
    gpus.reset(d, "node-a", [4])  # a reset does not cure silent data corruption
    assert not kat.known_answer(devices, seed=7).ok
    gpus.inject(d, "node-a", 4, "replace")  # a new part does
    assert kat.known_answer(devices, seed=7).ok


def test_standin_devices_follow_the_node_and_visible_devices(d):
    gpus.inject(d, "node-b", 0, "missing-gpu")
    env = {"SLURMADM_FAKE_NVML_DIR": str(d), "SLURMD_NODENAME": "node-b", "CUDA_VISIBLE_DEVICES": "0,2"}
    assert [dev.name for dev in katdevice.standin_devices(env)] == ["standin:node-b:gpu1", "standin:node-b:gpu3"]
    devices = katdevice.standin_devices({"SLURMADM_FAKE_NVML_DIR": str(d), "SLURMADM_FAKE_NVML_NODE": "node-a"})
    gpus.inject(d, "node-a", 6, "hang")
    verdict = kat.known_answer(devices)
    assert verdict.bad == ("standin:node-a:gpu6",) and "hung" in verdict.detail


def test_the_dev_clusters_state_dir_is_enough(tmp_path):
    """A job submitted from `dev-cluster env` carries SLURMADM_DEV_STATE_DIR: <state>/gpus."""
    gpus.write_healthy(tmp_path / "gpus", "b200-002", B200, driver_version=DRIVER)
    env = {"SLURMADM_DEV_STATE_DIR": str(tmp_path), "SLURMD_NODENAME": "b200-002"}
    assert [dev.name for dev in kat.select_devices(env)][:2] == ["standin:b200-002:gpu0", "standin:b200-002:gpu1"]


def test_a_reboot_clears_what_a_reset_does_and_reboot_class_faults(d, fake_nvml_lib):
    gpus.inject(d, "node-a", 0, "xid", 79)  # reboot-class: a reset keeps it
    gpus.inject(d, "node-a", 1, "missing-gpu")
    gpus.inject(d, "node-a", 2, "ecc-uncorrected", 2)
    gpus.inject(d, "node-a", 3, "row-remap-failed")
    gpus.inject(d, "node-a", 4, "corrupt")
    gpus.inject(d, "node-a", 5, "reset-fail")
    gpus.set_persistence(d, "node-a", [6], False)
    removed = gpus.reboot(d, "node-a")
    assert {f["kind"] for f in removed} == {"xid", "missing-gpu", "ecc-uncorrected", "reset-fail"}
    assert {(f["gpu"], f["kind"]) for f in gpus.list_faults(d, "node-a")} == {
        (2, "after-reset"), (3, "row-remap-failed"), (4, "corrupt")}
    after = nvml(d, fake_nvml_lib, "node-a")
    assert len(after) == 8 and after["0"]["recovery"] == 0 and after["2"]["ecc_agg"] == 2
    assert after["6"]["persistence"] == 1
    booted = float((d / "node-a.boot").read_text())
    # the kernel log keeps its lines and gains the boot's banner: the health check dates the boot by it
    from slurmadm.health import xid as xidmod

    assert "kernel: Linux version" in gpus.kmsg_path(d, "node-a").read_text().splitlines()[-1]
    assert xidmod.boot_in_log(str(d / "{node}.kmsg"), "node-a", booted + 1) == pytest.approx(booted, abs=1e-3)


def test_the_fake_nodes_nvidia_smi_script_dispatches(d, tmp_path):
    from slurmadm.devcluster.fakenode import _script, _smi_script

    script = tmp_path / "nvidia-smi"
    script.write_text(_smi_script(d, "node-a", _script("==============NVSMI LOG==============")))
    script.chmod(0o755)
    q = subprocess.run([str(script), "-q"], capture_output=True, text=True, timeout=30, check=False)
    assert (q.returncode, q.stdout) == (0, "==============NVSMI LOG==============\n")
    r = subprocess.run([str(script), "--gpu-reset", "-i", "1"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 255 and "In use by another client" in r.stdout  # persistence mode holds it
    pm = subprocess.run([str(script), "-pm", "0", "-i", "1"], capture_output=True, text=True, timeout=60, check=False)
    assert pm.returncode == 0 and gpus.read_state(d, "node-a")["gpus"][1]["persistence"] == 0
