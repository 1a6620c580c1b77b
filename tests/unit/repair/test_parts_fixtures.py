"""The parts parsers on real output (sources: tests/fixtures/parts/SOURCES.md,
tests/fixtures/fleet/README.md, tests/fixtures/bmc/redfish/README.md, tests/fixtures/bmc/ipmi_sim/README.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmadm.fleet import collector
from slurmadm.repair import parts

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def grep_like_the_collector(text: str) -> str:
    """What the fleet collector's `grep -E` keeps of `nvidia-smi -q` (collector.script)."""
    script = collector.script()
    pattern = re.search(r"grep -E '([^']+)'", script.split("@@nvidia-smi")[0] + script).group(1)
    return "\n".join(line for line in text.splitlines() if re.search(pattern, line))


def test_h100_nvidia_smi_q_gives_the_gpu_identity():
    text = (FIX / "parts" / "h100-jdh4-della-nvidia-smi-a.txt").read_text()
    want = [{"index": 0, "bus_id": "00000000:DB:00.0", "name": "NVIDIA H100 80GB HBM3", "serial": "1650124008279",
             "uuid": "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03", "vbios": "96.00.A5.00.01",
             "board_part": "692-2G520-0200-000"}]
    assert collector.parse_smi_gpus(text) == want
    # the collector keeps only the lines it needs, and the parse is the same
    kept = grep_like_the_collector(text)
    assert collector.parse_smi_gpus(kept) == want
    assert "Pending" not in kept  # nested lines (remapped rows, ECC) are not the identity


def test_fleet_fact_gpus_is_not_drift():
    assert "gpus" in collector.NOT_COMPARED


def test_parts_from_the_h100_fact_and_a_later_swap(tmp_path):
    from slurmadm.store import Store

    text = (FIX / "parts" / "h100-jdh4-della-nvidia-smi-a.txt").read_text()
    gpus = collector.parse_smi_gpus(text)
    with Store(tmp_path / "s.db") as store:
        store.db.execute("INSERT INTO fleet_facts (node, fact, value, ts) VALUES ('della-k18g3','gpus',?,10)",
                         (json.dumps(gpus),))
        parts.refresh(store)
        (row,) = parts.inventory(store)
        assert (row["slot"], row["part_key"], row["attrs"]["board_part"]) == \
            ("00000000:db:00.0", "1650124008279", "692-2G520-0200-000")
        swapped = [{**gpus[0], "serial": "1650124000001", "uuid": "GPU-00000000-0000-0000-0000-000000000001"}]
        store.db.execute("UPDATE fleet_facts SET value=?, ts=20 WHERE node='della-k18g3'", (json.dumps(swapped),))
        (change,) = parts.refresh(store)
        assert (change.what, change.old, change.new) == ("swapped", "1650124008279", "1650124000001")


def test_redfish_mockup_power_supplies_and_fans():
    from slurmadm.bmc.redfish import redfish_part

    docs = json.loads((FIX / "bmc" / "redfish" / "public-rackmount1.json").read_text())
    (psu,) = [redfish_part(p) for p in docs["/redfish/v1/Chassis/1U/Power"]["PowerSupplies"]]
    assert psu == {"name": "Power Supply Bay", "serial": "1Z0000001", "model": "499253-B21", "part": "0000001A3A",
                   "manufacturer": "ManufacturerName", "firmware": "1.00", "health": "Warning"}
    fan = redfish_part(docs["/redfish/v1/Chassis/1U/ThermalSubsystem/Fans/Bay1"])
    assert fan["id"] == "Bay1" and fan["model"] == "RKS-440DC" and "serial" not in fan
    seen = parts.parse_bmc("n1", json.dumps({"serial": "437XR1138R2", "psus": [psu], "fans": [fan]}), 5)
    assert [(s.kind, s.slot, s.part_key, s.keyed) for s in seen] == [
        ("board", "board", "437XR1138R2", True), ("psu", "Power Supply Bay", "1Z0000001", True),
        ("fan", "Bay1", "n1:Bay1", False)]


def test_ipmi_sim_fru_images_hold_the_serials_the_test_bed_expects():
    """tests/fixtures/bmc/ipmi_sim/fru-*.hex as pyghmi decodes them (its FRU parser, no BMC)."""
    from pyghmi.ipmi.fru import FRU

    for name, serial in (("fru-ps1.hex", "P3K04GA10001"), ("fru-ps2.hex", "P3K04GA10002"),
                         ("fru-fan1.hex", "FAN0206L40001")):
        data = bytearray(int(b, 16) for b in (FIX / "bmc" / "ipmi_sim" / name).read_text().split())
        fru = FRU(rawdata=data)
        assert fru.info["Serial Number"] == serial, fru.info
