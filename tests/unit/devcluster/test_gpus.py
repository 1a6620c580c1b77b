"""Stand-in GPU state: healthy baseline, fault validation, rendering, kernel-log lines (no gcc)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurmadm.devcluster import gpus
from slurmadm.errors import UsageError
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

B200 = BUILTIN_PROFILES["hgx-b200"]
H100 = BUILTIN_PROFILES["hgx-h100"]
WHEN = datetime(2026, 11, 29, 17, 55, tzinfo=timezone.utc)


@pytest.fixture()
def d(tmp_path: Path) -> Path:
    gpus.write_healthy(tmp_path, "b200-001", B200, driver_version="570.133.20", now=WHEN)
    gpus.write_healthy(tmp_path, "b200-002", B200, driver_version="570.133.20", now=WHEN)
    return tmp_path


def parse_state(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))


def test_healthy_identity_is_stable_per_node_and_gpu(d, tmp_path):
    a = gpus.read_state(d, "b200-001")
    b = gpus.read_state(d, "b200-002")
    again = gpus.write_healthy(tmp_path / "again", "b200-001", B200, driver_version="570.133.20")
    uuids = [g["uuid"] for g in a["gpus"]]
    assert len(set(uuids)) == 8 and uuids == [g["uuid"] for g in again["gpus"]]
    assert not set(uuids) & {g["uuid"] for g in b["gpus"]}
    assert [g["pci_bus_id"] for g in a["gpus"]] == [g["pci_bus_id"] for g in b["gpus"]]  # same board layout
    assert len({g["serial"] for g in a["gpus"]}) == 8


def test_healthy_values_follow_the_profile(d):
    state = gpus.read_state(d, "b200-001")
    assert (state["nvml_version"], state["cuda_driver_version"]) == ("12.570.133.20", 12080)
    for i, g in enumerate(state["gpus"]):
        assert g["name"] == "NVIDIA B200" and g["minor"] == i and g["numa_node"] == B200.gpus.sockets[i]
        assert g["nvlink_up"] == "1" * 18 and (g["pcie_gen"], g["pcie_width"]) == (5, 16)
        assert g["power_enforced_mw"] == 1_000_000 and g["power_mw"] < g["power_enforced_mw"]
        assert 35 <= g["temp_gpu"] <= 45 and g["persistence"] == 1 and g["ecc_mode"] == 1
    assert state["gpus"][0]["cpus"] == "0-55,112-167" and state["gpus"][4]["cpus"] == "56-111,168-223"
    h100 = gpus.healthy_gpu("h100-001", 0, H100)
    assert h100["name"] == "NVIDIA H100 80GB HBM3" and h100["arch"] == 9 and h100["power_limit_mw"] == 700_000


def test_socket_cpulist_without_smt():
    profile = B200.model_copy(update={"threads_per_core": 1})
    assert gpus.socket_cpulist(profile, 1) == "56-111"


def test_write_healthy_rejects_bad_versions_and_names(tmp_path):
    with pytest.raises(UsageError, match="driver_version"):
        gpus.write_healthy(tmp_path, "n1", B200, driver_version="latest")
    with pytest.raises(UsageError, match="cuda_version"):
        gpus.write_healthy(tmp_path, "n1", B200, driver_version="570.1", cuda_version="12")
    with pytest.raises(UsageError, match="not a plain host name"):
        gpus.write_healthy(tmp_path, "../etc", B200, driver_version="570.1")


def test_render_is_the_flat_file_the_library_reads(d):
    gpus.inject(d, "b200-001", 2, "leftover-process", 4321)
    gpus.inject(d, "b200-001", 2, "nvlink-errors", 5)
    text = (d / "b200-001.state").read_text()
    assert text == gpus.render(gpus.read_state(d, "b200-001"))
    kv = parse_state(text)
    assert kv["driver_version"] == "570.133.20" and kv["gpu.2.procs"] == f"4321:{1 << 30}"
    assert kv["gpu.2.nvlink_err.0"] == "5,0,5,0,0" and kv["gpu.1.procs"] == ""
    assert kv["gpu.7.pci_bus_id"] == "00000000:DF:00.0" and "gpu.8.name" not in kv


def test_faults_apply_only_to_their_gpu_and_stack(d):
    gpus.inject(d, "b200-001", 4, "thermal", "97")
    gpus.inject(d, "b200-001", 4, "power")
    g = gpus.effective_gpus(gpus.read_state(d, "b200-001"))
    healthy = gpus.read_state(d, "b200-001")["gpus"]
    assert g[4]["temp_gpu"] == 97 and g[4]["power_mw"] == 1_250_000
    assert g[4]["clock_reasons"] == gpus.SW_THERMAL | gpus.HW_THERMAL | gpus.HW_SLOWDOWN | gpus.SW_POWER_CAP
    assert g[4]["clock_sm"] == healthy[4]["clock_sm_max"] // 2
    assert [x for i, x in enumerate(g) if i != 4] == [x for i, x in enumerate(healthy) if i != 4]


def test_inject_again_replaces_the_fault(d):
    gpus.inject(d, "b200-001", 1, "ecc-uncorrected", 3, now=WHEN)
    gpus.inject(d, "b200-001", 1, "ecc-uncorrected", 5, now=WHEN)
    assert gpus.list_faults(d, "b200-001") == [
        {"gpu": 1, "kind": "ecc-uncorrected", "value": 5, "since": "2026-11-29T17:55:00+00:00"}]
    assert gpus.effective_gpus(gpus.read_state(d, "b200-001"))[1]["ecc_dbe_vol"] == 5


def test_defaults(d):
    expected = {"ecc-uncorrected": 1, "ecc-corrected": 60_000_000, "xid": 79, "pcie-degraded": "3x8",
                "nvlink-down": 1, "thermal": 95, "power": 1250, "retired-pages": 11, "hang": None}
    for kind in expected:
        gpus.inject(d, "b200-001", 0, kind)
    assert {f["kind"]: f["value"] for f in gpus.list_faults(d, "b200-001")} == expected


def test_clear_by_gpu_by_kind_and_all(d):
    for gpu, kind in [(0, "hang"), (0, "thermal"), (3, "thermal"), (5, "missing-gpu")]:
        gpus.inject(d, "b200-001", gpu, kind)
    gpus.inject(d, "b200-002", 0, "thermal")
    assert [(f["gpu"], f["kind"]) for f in gpus.clear(d, "b200-001", kind="thermal")] == [(0, "thermal"), (3, "thermal")]
    assert [(f["gpu"], f["kind"]) for f in gpus.clear(d, "b200-001", gpu=0)] == [(0, "hang")]
    assert gpus.clear(d, "b200-001", gpu=0) == []
    assert [(f["gpu"], f["kind"]) for f in gpus.clear(d, "b200-001")] == [(5, "missing-gpu")]
    assert gpus.list_faults(d, "b200-001") == []
    assert [f["kind"] for f in gpus.list_faults(d, "b200-002")] == ["thermal"]
    assert "gpu.5.present=1" in (d / "b200-001.state").read_text()


@pytest.mark.parametrize("gpu,kind,value,message", [
    (0, "melted", None, "unknown GPU fault 'melted'"),
    (8, "hang", None, "GPU 8 does not exist on b200-001 (GPUs 0-7)"),
    (-1, "hang", None, "GPU -1 does not exist"),
    (True, "hang", None, "GPU True does not exist"),
    ("3", "hang", None, "GPU '3' does not exist"),
    (0, "hang", 1, "fault hang takes no value"),
    (0, "ecc-uncorrected", "many", "value 'many' is not a number"),
    (0, "ecc-uncorrected", 0, "value 0 is outside 1..1000000000000"),
    (0, "nvlink-down", 19, "value 19 is outside 1..18"),
    (0, "thermal", 2.5, "is not a number"),
    (0, "leftover-process", None, "fault leftover-process needs a value"),
    (0, "pcie-degraded", "fast", "is not GENxWIDTH"),
    (0, "pcie-degraded", "5x16", "is the healthy link"),
    (0, "pcie-degraded", "6x16", "not a link this GPU can train to (max 5x16)"),
    (0, "pcie-degraded", "4x12", "not a link this GPU can train to"),
])
def test_bad_input_is_one_clear_line_and_changes_nothing(d, gpu, kind, value, message):
    before = {p.name: p.read_text() for p in d.iterdir() if p.suffix != ".lock"}
    with pytest.raises(UsageError) as e:
        gpus.inject(d, "b200-001", gpu, kind, value)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert {p.name: p.read_text() for p in d.iterdir() if p.suffix != ".lock"} == before


def test_unknown_node_and_bad_clear_arguments(d, tmp_path):
    with pytest.raises(UsageError, match="no stand-in GPUs for node 'b200-099'"):
        gpus.inject(d, "b200-099", 0, "hang")
    with pytest.raises(UsageError, match="no stand-in GPUs"):
        gpus.list_faults(d, "b200-099")
    with pytest.raises(UsageError, match="unknown GPU fault"):
        gpus.clear(d, "b200-001", kind="melted")
    with pytest.raises(UsageError, match="GPU 9 does not exist"):
        gpus.clear(d, "b200-001", gpu=9)
    with pytest.raises(UsageError, match="does not exist"):
        gpus.inject(tmp_path / "nowhere", "b200-001", 0, "hang")
    (d / "b200-003.json").write_text("{not json")
    with pytest.raises(UsageError, match="unreadable stand-in GPU state"):
        gpus.read_state(d, "b200-003")


def test_xid_line_is_journal_short_iso_with_the_gpus_pci_address(d):
    gpus.inject(d, "b200-001", 3, "xid", now=WHEN)
    gpus.inject(d, "b200-001", 0, "xid", "13", now=WHEN)
    gpus.clear(d, "b200-001")
    assert gpus.kmsg_path(d, "b200-001").read_text().splitlines() == [
        "2026-11-29T17:55:00+00:00 b200-001 kernel: NVRM: Xid (PCI:0000:61:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.",
        "2026-11-29T17:55:00+00:00 b200-001 kernel: NVRM: Xid (PCI:0000:1b:00): 13, pid=20000, name=python, "
        "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    ]
    gpus.write_healthy(d, "b200-001", B200, driver_version="570.133.20")
    assert len(gpus.kmsg_path(d, "b200-001").read_text().splitlines()) == 2  # a kernel log does not forget


def test_unknown_xid_numbers_get_a_generic_text():
    line = gpus.xid_line("n1", "00000000:9D:00.0", 777, WHEN)
    assert line.endswith("NVRM: Xid (PCI:0000:9d:00): 777, pid='<unknown>', name=<unknown>, "
                         "Unspecified error reported by the GPU")


def test_env_for(monkeypatch, tmp_path):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/x")
    assert gpus.env_for("/s", "/l", "b200-001") == {
        "LD_LIBRARY_PATH": "/l:/opt/x", "SLURMADM_FAKE_NVML_DIR": "/s", "SLURMADM_FAKE_NVML_NODE": "b200-001"}
    monkeypatch.delenv("LD_LIBRARY_PATH")
    monkeypatch.chdir(tmp_path)
    assert gpus.env_for("s", "/l") == {"LD_LIBRARY_PATH": "/l", "SLURMADM_FAKE_NVML_DIR": str(tmp_path / "s")}
    with pytest.raises(UsageError):
        gpus.env_for("/s", "/l", "a b")


def test_build_without_gcc_says_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError, match=r"gcc not found: install gcc \(apt-get install gcc\)"):
        gpus.build_library(tmp_path / "lib")
    assert not (tmp_path / "lib" / gpus.LIB_NAME).exists()


def test_state_json_round_trips(d):
    raw = json.loads((d / "b200-001.json").read_text())
    assert raw == gpus.read_state(d, "b200-001") and raw["format"] == gpus.STATE_FORMAT
