"""Verdicts on real kernel log lines and tool outputs (tests/fixtures/health/README.md names each
source). Each of these failed before the fix it pins: MIG-attributed XIDs were invisible, the
XID table was not NVIDIA's, reset-class XIDs aged out of the window, other timestamp formats
read as "now", a missing log file was a pass, and NCCL data corruption was "cannot run"."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from slurmadm.health import nccl, xid
from slurmadm.health.checks import CannotRun

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "health"
UTC = dt.timezone.utc


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def by_xid(findings):
    return {(f.pci, f.xid): f for f in findings}


# ------------------------------------------------------------------------------------ MIG


def test_mig_attributed_xids_are_read_and_named():
    now = ts("2026-11-29T12:00:00+00:00")
    events = xid.events_from_file(str(FIX / "xid-mig.log"), now)
    assert [(e.pci, e.xid, e.gi, e.ci) for e in events] == [
        ("0000:01:00", 94, 5, None), ("0000:01:00", 94, None, None), ("0000:1b:00", 95, 5, 0)]
    found = by_xid(xid.summarize(events, now=now, window_s=3600))
    # 94: "restart the app, reset the GPU when convenient": reported, never a drain
    assert found[("0000:01:00", 94)].verdict == "warn" and found[("0000:01:00", 94)].count == 2
    assert found[("0000:01:00", 94)].mig == ["GI 5"]
    # 95 uncontained: RESET_GPU, and the MIG instance is named
    f95 = found[("0000:1b:00", 95)]
    assert (f95.verdict, f95.action, f95.needs, f95.mig) == ("fail", "RESET_GPU", "reset", ["GI 5 CI 0"])


# ------------------------------------------------------------------------------------ catalog


@pytest.mark.parametrize("code,action,verdict", [
    (79, "RESTART_BM", "fail"), (48, "WORKFLOW_XID_48", "fail"), (95, "RESET_GPU", "fail"),
    (94, "RESTART_APP", "warn"), (13, "RESTART_APP", "info"), (31, "RESTART_APP", "info"),
    (155, "RESET_GPU", "fail"), (156, "RESET_GPU", "fail"), (158, "RESET_GPU", "fail"),
    (157, "IGNORE", "warn"), (63, "IGNORE", "warn"), (119, "RESET_GPU", "fail"), (140, "RESET_GPU", "fail"),
])
def test_actions_are_nvidias_catalog(code, action, verdict):
    name, got_action, got_verdict = xid.classify(code)
    assert (got_action, got_verdict) == (action, verdict), name
    assert xid.catalog()[code].mnemonic in name


def test_unknown_xid_warns_and_names_itself():
    name, action, verdict = xid.classify(998)
    assert verdict == "warn" and "998" in name and action == "UNKNOWN"


def test_every_catalog_row_maps_to_a_verdict():
    for code, entry in xid.catalog().items():
        v = xid.classify_event(code, "")
        assert v.verdict in ("fail", "warn", "info"), (code, entry)


def test_nvlink5_sub_codes_decide():
    now = ts("2026-11-29T12:00:00+00:00")
    found = by_xid(xid.summarize(xid.events_from_file(str(FIX / "xid-nvlink5.log"), now), now=now, window_s=3600))
    saw = found[("0000:01:00", 144)]  # SAW_MVB Nonfatal, error status 0x8: IGNORE
    assert saw.verdict == "info" and "SAW_MVB status 0x00000008" in saw.name
    peer_sw = found[("0000:43:00", 149)]  # NETIR_LINK_EVT field 38: IGNORE (investigate SW/user)
    assert peer_sw.verdict == "info" and "field 38" in peer_sw.name
    peer_dev = found[("0000:52:00", 149)]  # field 37: RESET_GPU (investigate the peer device)
    assert (peer_dev.verdict, peer_dev.action, peer_dev.needs) == ("fail", "RESET_GPU", "reset")


def test_nvlink5_fatal_sub_code_and_unlisted_combination():
    fatal = xid.classify_event(144, "SAW_MVB Fatal XC0 i0 Link 3 (0x00000001 0x00000010 0x0 0x0 0x0 0x0)")
    assert (fatal.verdict, fatal.action) == ("fail", "RESET_GPU")
    promoted = xid.classify_event(145, "RLW_RXPIPE Fatal XC0 i0 Link 3 (0x00000006 0x00000002 0x0 0x0 0x0 0x0)")
    assert promoted.action == "RESET_GPU"  # the catalog's "Action 2" for a Fatal-flagged RXPIPE line
    nonfatal = xid.classify_event(145, "RLW_RXPIPE Nonfatal XC0 i0 Link 3 (0x00000006 0x00000002 0x0 0x0 0x0 0x0)")
    assert nonfatal.verdict == "info"
    odd = xid.classify_event(146, "TLW_CTRL Nonfatal XC0 i0 Link 1 (0x00000009 0x00000040 0x0 0x0 0x0 0x0)")
    assert odd.verdict == "warn" and "not in the decode table" in odd.name


def test_154_recovery_action_from_real_lines():
    events = xid.events_from_file(str(FIX / "xid-dmesg-T.log"), ts("2026-07-11T06:00:00"))
    assert [e.xid for e in events] == [120, 154]
    assert events[0].ts == dt.datetime(2026, 7, 11, 5, 52, 47).timestamp()  # dmesg -T: local time
    v = xid.classify_event(154, events[1].text)
    assert (v.verdict, v.needs) == ("fail", "reset") and "GPU Reset Required" in v.name
    reboot = xid.events_from_file(str(FIX / "xid-79-154.log"), ts("2026-09-14T05:00:00"))
    assert [e.xid for e in reboot] == [79, 154]  # the GSP line between them is not an XID
    assert xid.classify_event(154, reboot[1].text).needs == "reboot"


# ------------------------------------------------------------------------------------ timestamps

LINE = "NVRM: Xid (PCI:0000:2a:00): 120, GSP kernel exception: load access page fault (cause:0xd)"
NOW = dt.datetime(2026, 7, 11, 6, 0, 0).timestamp()
WHEN = dt.datetime(2026, 7, 11, 5, 51, 26).timestamp()


@pytest.mark.parametrize("prefix,expected", [
    ("Jul 11 05:51:26 gpu-node-01 kernel: ", WHEN),  # journalctl -k / syslog
    ("Jul 11 05:51:26.250000 gpu-node-01 kernel: ", WHEN + 0.25),  # journalctl -o short-precise
    ("[Sat Jul 11 05:51:26 2026] ", WHEN),  # dmesg -T
    ("2026-07-11T05:51:26,250000+00:00 ", dt.datetime(2026, 7, 11, 5, 51, 26, 250000, UTC).timestamp()),  # dmesg --time-format iso
    ("2026-07-11T05:51:26+0000 gpu-node-01 kernel: ", dt.datetime(2026, 7, 11, 5, 51, 26, tzinfo=UTC).timestamp()),  # short-iso
    ("[ 3600.500000] ", 1000.0 + 3600.5),  # raw dmesg, seconds since boot
    ("[ 3600.500000] gpu-node-01 kernel: ", 1000.0 + 3600.5),  # journalctl -o short-monotonic
])
def test_log_timestamp_shapes(tmp_path, prefix, expected):
    path = tmp_path / "kern.log"
    path.write_text(prefix + LINE + "\n")
    [ev] = xid.events_from_file(str(path), NOW, boot=1000.0)
    assert ev.ts == pytest.approx(expected) and ev.xid == 120


def test_unknown_timestamp_is_refused_not_now(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text("<4>" + LINE + "\n")
    with pytest.raises(xid.XidSourceError, match="cannot tell when"):
        xid.events_from_file(str(path), NOW)


def test_journal_json_source():
    rec = '{"MESSAGE":"%s","__REALTIME_TIMESTAMP":"1783749086000000","_TRANSPORT":"kernel"}' % LINE
    other = '{"MESSAGE":"usb 1-1: new device","__REALTIME_TIMESTAMP":"1783749086000000"}'
    [ev] = xid.events_from_journal_json(rec + "\n" + other + "\n")
    assert ev.ts == 1783749086.0 and ev.xid == 120


# ------------------------------------------------------------------------------------ resets


def test_reset_class_xid_stays_until_a_reboot_or_reset():
    now = ts("2026-09-14T08:00:00+00:00")
    old = ts("2026-09-14T04:48:45+00:00")  # 3 h ago: outside a 60 min window
    ev79 = xid.XidEvent(old, "0000:02:00", 79, "", "pid=9962, name=python, GPU has fallen off the bus.")
    ev46 = xid.XidEvent(old, "0000:03:00", 46, "", "Ch 00000010")
    booted_before = old - 86400
    found = by_xid(xid.summarize([ev79, ev46], now=now, window_s=3600, boot=booted_before))
    assert found[("0000:02:00", 79)].verdict == "fail" and found[("0000:02:00", 79)].pending
    assert found[("0000:02:00", 79)].needs == "reboot"
    # a reboot after it clears both
    assert xid.summarize([ev79, ev46], now=now, window_s=3600, boot=old + 60) == []
    # an admin resume (acknowledgement) after it clears both
    assert xid.summarize([ev79, ev46], now=now, window_s=3600, boot=booted_before, ack=old + 1) == []
    # 154 "to 0x0 (None)" later on the same GPU: the GPU was reset
    reset = xid.XidEvent(old + 600, "0000:03:00", 154, "", "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")
    left = by_xid(xid.summarize([ev79, ev46, reset], now=now, window_s=3600, boot=booted_before))
    assert ("0000:03:00", 46) not in left and ("0000:02:00", 79) in left  # a reset does not satisfy a reboot
    # NVML's recovery action reads "none": clears XIDs with Xid 154 linkage only (79 has it, 46 not)
    found = by_xid(xid.summarize([ev79, ev46], now=now, window_s=3600, boot=booted_before,
                                 recovery_none={"0000:02:00", "0000:03:00"}))
    assert ("0000:03:00", 46) in found and found[("0000:02:00", 79)].verdict == "fail"  # 79 needs a reboot


def test_app_class_xid_still_ages_out():
    now = ts("2026-09-14T08:00:00+00:00")
    ev = xid.XidEvent(now - 7200, "0000:02:00", 13, "", "Graphics SM Warp Exception")
    assert xid.summarize([ev], now=now, window_s=3600, boot=0) == []


def test_kept_events_survive_a_wrapped_ring_buffer():
    ev = xid.XidEvent(1000.5, "0000:02:00", 79, "", "GPU has fallen off the bus.", 3, None)
    kept = xid.from_state(xid.to_state([ev]))
    assert [(e.ts, e.pci, e.xid, e.gi) for e in kept] == [(1000.5, "0000:02:00", 79, 3)]
    assert len(xid.merge([ev], kept)) == 1 and xid.from_state("not json") == []


# ------------------------------------------------------------------------------------ NCCL


def test_nccl_wrong_results_in_g_format_and_footer():
    got = nccl.parse_all_reduce_perf((FIX / "nccl-wrong.txt").read_text())
    assert got.busbw == pytest.approx(763.065) and got.failing_points == 1
    assert got.wrong_elements == 1048580  # %g's 1.04858e+06, rounded as printed
    assert got.describe() == "1 failing test point (1048580 wrong elements)"


def test_nccl_older_layout_counts_the_footer_not_the_error_column():
    got = nccl.parse_all_reduce_perf((FIX / "nccl-wrong-old.txt").read_text())
    assert (got.busbw, got.failing_points, got.wrong_elements) == (128.942, 2, 0)
    assert got.describe() == "2 failing test points"


def test_nccl_no_average_line_still_cannot_run():
    with pytest.raises(CannotRun):
        nccl.parse_all_reduce_perf("NCCL WARN Cuda failure 'out of memory'\n")


# ------------------------------------------------------------------------------------ issue 25


def test_nvlink5_line_without_the_tuple_is_decoded_from_unit_and_flag():
    """`145, RLW_REMAP Nonfatal XC0 i0 Link 02` (no register tuple) was "fail, needs reset": the
    catalog's Non-fatal rows for RLW_REMAP are IGNORE / XID_154_EVAL."""
    now = ts("2026-11-29T12:00:00+00:00")
    found = by_xid(xid.summarize(xid.events_from_file(str(FIX / "xid-nvlink5-bare.log"), now), now=now,
                                 window_s=3600))
    remap = found[("0000:5f:00", 145)]
    assert (remap.verdict, remap.needs) == ("info", "") and "RLW_REMAP Nonfatal" in remap.name
    assert remap.action in ("IGNORE", "XID_154_EVAL")
    fatal = found[("0000:6f:00", 145)]  # the catalog's Fatal rows for RLW_SRC_TRACK: RESET_GPU
    assert (fatal.verdict, fatal.action, fatal.needs) == ("fail", "RESET_GPU", "reset")
    # a unit the decode table does not list: the flag decides
    odd = xid.classify_event(146, "TLW_NEWUNIT Nonfatal XC0 i0 Link 1")
    assert odd.verdict == "warn" and "not in the decode table" in odd.name


@pytest.mark.parametrize("name,busbw", [
    ("nccl-tag-output.txt", 156.742),  # mpirun --tag-output
    ("nccl-timestamp-output.txt", 156.742),  # mpirun --timestamp-output --tag-output
    ("nccl-srun-label.txt", 25.3468),  # srun --label
])
def test_nccl_output_under_a_launcher_is_parsed(name, busbw):
    """`[1,0]<stdout>:` lines were "cannot run" (and drained the node with on_error = fail)."""
    got = nccl.parse_all_reduce_perf((FIX / name).read_text())
    assert (got.busbw, got.wrong) == (pytest.approx(busbw), False)


def test_nccl_footer_counts_test_points_and_rows_count_elements():
    got = nccl.parse_all_reduce_perf((FIX / "nccl-wrong-points.txt").read_text())
    assert (got.failing_points, got.wrong_elements) == (4, 128)
    assert got.describe() == "4 failing test points (128 wrong elements)"


def test_a_valid_bandwidth_under_mpirun_never_drains(monkeypatch):
    """The check end to end with on_error = "fail": all_reduce_perf behind a wrapper that launches
    it with mpirun --tag-output printed a valid bandwidth: the node passes."""
    import time

    from slurmadm.health import checks as C
    from slurmadm.health.config import Thresholds
    from slurmadm.health.runner import run_checks
    from tests.unit.health.test_runner import cfg, spec

    text = (FIX / "nccl-tag-output.txt").read_text()

    class Proc:
        returncode, stdout, stderr = 0, text, ""

    monkeypatch.setattr(nccl.shutil, "which", lambda exe: "/usr/bin/all_reduce_perf")
    monkeypatch.setattr(nccl, "run", lambda *a, **k: Proc())
    c = cfg(on_error="fail", thresholds=Thresholds(150.0, 87, 95, 50_000_000, 10, 1.1, 100))  # p5's floor
    pol = C.policy(spec("nccl-allreduce", nccl.check, needs_nvml=False), c)  # no NVML here
    [res] = run_checks([pol], C.Ctx(cfg=c, context="run", now=time.time()), deadline=time.monotonic() + 5)
    assert res.status == "pass" and res.action != "drain", res
    assert "156.7" in res.detail


def test_raw_stamps_past_the_uptime_are_kept_as_recent_not_dropped():
    """Issue 25.3, measured: a raw-dmesg file with an XID 79 and an XID 119 passed ("2 XID lines
    in the log, 0 in the last 60 min"): stamped later than the uptime, both were dropped."""
    now = ts("2026-11-29T12:00:00+00:00")
    boot = now - 3600  # up one hour; the lines say 8659 s and 9123 s: another boot's
    events = xid.events_from_file(str(FIX / "xid-raw-dmesg.log"), now, boot=boot)
    assert [(e.xid, e.ts) for e in events] == [(79, now), (119, now)]
    assert all("treated as recent" in e.undated for e in events)
    found = by_xid(xid.summarize(events, now=now, window_s=3600, boot=boot))
    assert found[("0000:01:00", 79)].verdict == "fail" and found[("0000:02:00", 119)].verdict == "fail"


def test_xid_check_fails_on_undated_lines_and_says_so(monkeypatch):
    import time

    from slurmadm.health import checks as C
    from tests.unit.health.test_runner import cfg

    monkeypatch.setattr(xid, "boot_time", lambda: time.time() - 3600)
    out = C.xid(C.Ctx(cfg=cfg(xid_source=str(FIX / "xid-raw-dmesg.log")), context="run", now=time.time()))
    texts = [f.text for f in out.findings if f.level == "fail"]
    assert any("XID 79" in t and "treated as recent" in t for t in texts), texts
    assert any("XID 119" in t for t in texts), texts
    assert "logged at a time the log does not tell" in out.note


def test_raw_stamps_of_an_earlier_boot_are_not_dated_into_this_one():
    now = ts("2026-11-28T10:30:00+00:00")
    events = xid.events_from_file(str(FIX / "xid-raw-two-boots.log"), now, boot=now - 86400 * 3)
    by = {e.xid: e for e in events}
    # the second boot is dated by its hctosys line: 10:00:00 UTC - 2.512345 s, + 600.25 s
    assert by[119].ts == pytest.approx(1795860000 - 2.512345 + 600.25) and not by[119].undated
    # the first boot is not dated: its 79 happened before the second boot, not "8659 s into it"
    boot2 = 1795860000 - 2.512345
    assert by[79].ts < boot2 and "before the next boot" in by[79].undated
    found = by_xid(xid.summarize(events, now=now, window_s=3600, boot=boot2))
    assert found[("0000:01:00", 79)].resolved == "reboot"  # the reboot after it cleared it


def test_journal_json_lines_in_a_file_carry_their_realtime(tmp_path):
    path = tmp_path / "kern.json"
    path.write_text('{"MESSAGE":"%s","__REALTIME_TIMESTAMP":"1783749086000000"}\n' % LINE)
    [ev] = xid.events_from_file(str(path), NOW)
    assert ev.ts == 1783749086.0 and not ev.undated


@pytest.mark.parametrize("driver,cleared", [
    ("560.35.03", False),  # before R565: the field stays 0 whatever happened
    ("565.57.01", True), ("570.133.20", True),
    ("", False),  # unknown driver: the field proves nothing
])
def test_recovery_none_counts_only_from_the_linkage_release(driver, cleared):
    now = ts("2026-09-14T08:00:00+00:00")
    old = now - 3 * 3600  # outside the window, after boot: waiting for a reset
    ev = xid.XidEvent(old, "0000:1b:00", 95, "", "Uncontained memory error")  # catalog: R565
    found = xid.summarize([ev], now=now, window_s=3600, boot=old - 86400, recovery_none={"0000:1b:00"},
                          driver=driver)
    assert (found == []) is cleared


def test_linkage_release_per_xid():
    assert xid.linked(154, "")  # 154 itself on any driver
    assert not xid.linked(143, "570.133.20") and xid.linked(143, "575.51.03")  # 143: R575
    assert xid.linked(158, "550.1")  # linkage "yes", no release given
    assert not xid.linked(46, "580.1")  # no linkage


def test_xid_note_counts_only_serious_findings_in_the_window(tmp_path):
    """Issue 25.8: an application-class XID (31: RESTART_APP) read "1 in the last 60 min" on a
    passing check, as if something serious were in the window."""
    import time

    from slurmadm.health import checks as C
    from tests.unit.health.test_runner import cfg

    now = time.time()
    stamp = dt.datetime.fromtimestamp(now - 60, UTC).isoformat()
    path = tmp_path / "kern.log"
    path.write_text(f"{stamp} b200-001 kernel: NVRM: Xid (PCI:0000:1b:00): 31, pid=1234, name=python3, "
                    "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_00000000\n")
    out = C.xid(C.Ctx(cfg=cfg(xid_source=str(path)), context="run", now=now))
    assert out.findings == []
    assert out.note.startswith("1 XID line(s) in the log, 0 serious in the last 60 min"), out.note
    assert "1 informational" in out.note
