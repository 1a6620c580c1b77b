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


def test_an_admins_resume_acknowledges_only_what_was_logged_before_it():
    """`ack` (the last time a run saw the node still drained) covers a microsecond-stamped XID
    logged before it; a whole-second stamp in that same second may be later, so it still fails."""
    fine = xid.parse_line("NVRM: Xid (PCI:0000:1b:00): 46, pid=1", NOW - 0.25)
    coarse = xid.parse_line("NVRM: Xid (PCI:0000:9a:00): 46, pid=1", NOW - 1.0)

    def failing(ack):
        return sorted(f.pci for f in xid.summarize([fine, coarse], now=NOW, window_s=3600, ack=ack)
                      if f.verdict == "fail")

    assert failing(0.0) == ["0000:1b:00", "0000:9a:00"]
    assert failing(NOW - 0.1) == ["0000:9a:00"]  # the whole-second line may be from NOW - 0.05
    assert failing(NOW) == []


def test_a_log_kept_across_boots_dates_the_last_boot_by_the_kernel_banner(tmp_path):
    """A persistent kern.log (or a log shipped from the node) holds each boot's first line,
    `kernel: Linux version ...`: its wall-clock stamp is when the node last booted, and a
    reboot-class XID logged before it was cleared by that boot."""
    log = tmp_path / "b200-003.kmsg"
    log.write_text("\n".join([
        "Nov 29 09:00:00 b200-003 kernel: [    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)",
        f"{iso(90)} b200-003 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        f"{iso(60)} b200-003 kernel: Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org) #1 SMP",
        "[    0.000000] Linux version 6.1.0-28-amd64 (seconds since a boot: dates nothing)",
        f"{iso(30)} b200-003 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=python, GPU has fallen off the bus.",
    ]) + "\n")
    source = str(tmp_path / "{node}.kmsg")
    booted = xid.boot_in_log(source, "b200-003", NOW)
    assert booted == pytest.approx(NOW - 60 * 60)
    events = xid.read_events(source, "b200-003", NOW)
    found = xid.summarize(events, now=NOW, window_s=600, boot=booted)
    assert [(f.pci, f.verdict) for f in found] == [("0000:9a:00", "fail")]  # the one after the boot
    assert xid.boot_in_log("kmsg", "b200-003", NOW) is None
    assert xid.boot_in_log(str(tmp_path / "nope-{node}"), "b200-003", NOW) is None
