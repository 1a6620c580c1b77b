"""XID lines: parsing, time window, de-duplication, NVIDIA-catalog classification, site overrides."""

from __future__ import annotations

import datetime as dt

import pytest

from slurmadm.health import xid

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 29, 12, 0, 0).timestamp()


def iso(minutes_ago: float) -> str:
    return dt.datetime.fromtimestamp(NOW - minutes_ago * 60).isoformat(timespec="microseconds")


def line(minutes_ago: float, bus: str, code: int, node: str = "b200-003") -> str:
    return f"{iso(minutes_ago)} {node} kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1234, name=python, Ch 00000008"


def write_log(tmp_path, lines):
    path = tmp_path / "b200-003.kmsg"
    path.write_text("\n".join(lines + ["2026-11-29T11:59:00 b200-003 kernel: unrelated line"]) + "\n")
    return path


@pytest.mark.parametrize("code,verdict", [
    (48, "fail"), (64, "fail"), (74, "fail"), (79, "fail"), (94, "warn"), (95, "fail"), (119, "fail"),
    (120, "fail"), (140, "fail"), *[(c, "fail") for c in range(144, 151)],
    (63, "warn"), (92, "warn"), (13, "info"), (31, "info"), (999, "warn"),
])
def test_catalog_classification(code, verdict):
    assert xid.classify(code)[2] == verdict


def test_site_override_wins():
    assert xid.classify(79, {"79": "warn"})[2] == "warn"
    assert xid.classify(13, {"13": "fail"})[2] == "fail"


def test_window_and_dedup(tmp_path):
    path = write_log(tmp_path, [
        line(200, "1b", 79),  # outside a 60 min window
        line(50, "1b", 79), line(40, "1b", 79), line(10, "1b", 79),  # same GPU, same XID: one finding x3
        line(5, "1b", 63),   # same GPU, other XID
        line(5, "9a", 79),   # other GPU
    ])
    events = xid.read_events(str(tmp_path / "{node}.kmsg"), "b200-003", NOW)
    assert len(events) == 6 and path.exists()
    # booted 100 min ago: the 200-minute-old XID 79 was cleared by that reboot
    found = xid.summarize(events, now=NOW, window_s=3600, boot=NOW - 100 * 60)
    keys = [(f.pci, f.xid, f.count, f.verdict) for f in found]
    assert ("0000:1b:00", 79, 3, "fail") in keys
    assert ("0000:1b:00", 63, 1, "warn") in keys
    assert ("0000:9a:00", 79, 1, "fail") in keys
    assert len(found) == 3
    wide = xid.summarize(events, now=NOW, window_s=300 * 60)
    assert next(f for f in wide if f.xid == 79 and f.pci == "0000:1b:00").count == 4


def test_syslog_timestamps_and_bus_id_matching():
    t = xid.line_time("Nov 29 11:30:00 b200-001 kernel: NVRM: Xid (PCI:0000:1b:00): 48, ...", NOW)
    assert t == dt.datetime(2026, 11, 29, 11, 30).timestamp()
    # NVML reports busId as 00000000:1B:00.0; the kernel as 0000:1b:00
    assert xid.pci_key_from_bus_id("00000000:1B:00.0") == xid.parse_line(
        "NVRM: Xid (PCI:0000:1b:00): 48, pid=1", NOW).pci


def test_missing_log_file_and_kmsg_errors_surface(tmp_path):
    with pytest.raises(FileNotFoundError):
        xid.read_events(str(tmp_path / "none.log"), "n", NOW)
    with pytest.raises(OSError):
        xid.events_from_kmsg(str(tmp_path / "no-kmsg"))
