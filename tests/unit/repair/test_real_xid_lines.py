"""Real kernel-log XID lines (tests/fixtures/health, each with its source) through the whole path
repair reads: health's real xid check over the log, its result recorded as a drain, incidents
ingested, and the ladder's next step. The node's GPU inventory is NVML's (`00000000:1B:00.0`),
the lines name the kernel's `PCI:0000:1b:00`: the incident is keyed by the serial of the GPU at
that address, which is how a GPU that fell off the bus (no index any more) is still found.

What these lines found: the PCI spellings never matched (NVML's carries the function, `.0`),
so every PCI-named fault was keyed by node and address, not by the GPU's serial; and a note in
brackets holding `; ` was cut into a finding of its own that opened a RESET_GPU incident on no GPU."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from slurmadm.health import checks, engine
from slurmadm.repair import classes, incidents, ladder
from slurmadm.repair.incidents import _pci_tail
from slurmadm.store import Store
from tests.unit.health.test_runner import cfg
from tests.unit.repair.helpers import health_drain

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "health"
NODE = "b200-001"
# the buses the fixtures' lines name, one per GPU index, as NVML spells a bus id
BUSES = ["01", "02", "1b", "2a", "43", "52", "5f", "6f"]
INVENTORY = [{"index": i, "bus_id": f"00000000:{b.upper()}:00.0", "serial": f"165232510{i:03d}", "uuid": f"GPU-{i}"}
             for i, b in enumerate(BUSES)]


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


# file, the time it is read at (None: now, for the raw dmesg stamped past a short uptime), and
# the incidents it opens: (class, GPU index, the ladder's next step)
CASES = [
    ("xid-mig.log", "2026-11-29T12:00:00+00:00", [("ECC", 2, "reset")]),  # 95 uncontained; 94 is a warning
    ("xid-dmesg-T.log", "2026-07-11T06:00:00", [("RESET_GPU", 3, "reset")]),  # 120 + 154 Reset Required: one
    ("xid-79-154.log", "2026-09-14T05:00:00", [("GPU_LOST", 1, "reboot"), ("RESTART_BM", 1, "reboot")]),
    ("xid-nvlink5.log", "2026-11-29T12:00:00+00:00", [("RESET_GPU", 5, "reset")]),  # 149 field 37; 144/38 ignored
    ("xid-nvlink5-bare.log", "2026-11-29T12:00:00+00:00", [("RESET_GPU", 7, "reset")]),  # 145 RLW_SRC_TRACK Fatal
    ("xid-raw-dmesg.log", None, [("GPU_LOST", 0, "reboot"), ("RESET_GPU", 1, "reset")]),  # 79 and 119
]


def health_detail(tmp_path, log: Path, monkeypatch, boot: float) -> tuple[str, str]:
    """The xid check's status and detail over `log`, as the node's health records them."""
    monkeypatch.setattr(checks.xidmod, "boot_time", lambda: boot)
    c = cfg(node=NODE, store_path=str(tmp_path / "node.db"), xid_source=str(log),
            timeouts={"prolog": 20, "epilog": 20, "periodic": 20, "run": 20})
    report = engine.execute(c, "run", only=["xid"], act=False, use_syslog=False)
    [xid] = [r for r in report.results if r.check_id == "xid"]
    return xid.status, xid.detail


@pytest.mark.parametrize("name, when, want", CASES, ids=[c[0] for c in CASES])
def test_real_xid_lines_open_incidents_on_the_gpu_by_its_serial(tmp_path, monkeypatch, name, when, want):
    now = ts(when) if when else time.time()
    status, detail = health_detail(tmp_path, FIX / name, monkeypatch, boot=now - (86400 if when else 3600))
    assert status == "fail", detail
    with Store(tmp_path / "head.db") as store:
        store.set_node_state(NODE, "health.gpus", json.dumps(INVENTORY))
        health_drain(store, NODE, [("xid", detail)], ts=now, run_id="r1")
        incidents.ingest(store, now=now)
        got = []
        for inc in sorted(incidents.list_incidents(store), key=lambda i: (i.cls, i.slot)):
            gpu = INVENTORY[int(inc.slot)]
            assert (inc.part_kind, inc.part_key, inc.serial) == ("gpu", gpu["serial"], gpu["serial"]), inc
            assert inc.evidence[0]["gpu"]["bus_id"] == gpu["bus_id"]
            step = ladder.next_step(inc, incidents.part_history(store, inc), ladder.defaults(), now)
            got.append((inc.cls, int(inc.slot), step.action))
    assert got == want, detail


@pytest.mark.parametrize("a, b", [("00000000:1B:00.0", "0000:1b:00"), ("0000:1b:00.0", "PCI:0000:1B:00"),
                                  ("00000000:2A:00.0", "2a:00")])
def test_every_spelling_of_a_gpus_pci_address_is_the_same_gpu(a, b):
    assert _pci_tail(a) == _pci_tail(b)
    assert _pci_tail("00000000:1B:00.0") != _pci_tail("0000:2b:00")


def test_a_note_in_brackets_is_part_of_its_finding():
    detail = ("PCI 0000:01:00 XID 79 X (RESTART_BM) [logged at an unknown time: stamped 8660 s after a boot "
              "(not this boot); treated as recent]; GPU3 NVML recovery action: Reset")
    assert classes.findings(detail) == [detail.split("]; ")[0] + "]", "GPU3 NVML recovery action: Reset"]
    faults = classes.classify("xid", detail)
    assert [(f.cls, f.slot, f.pci) for f in faults] == [("GPU_LOST", "", "0000:01:00"), ("RESET_GPU", "3", "")]
    # text that names neither an XID nor NVML's recovery action opens nothing
    assert classes.classify("xid", "treated as recent]") == []
