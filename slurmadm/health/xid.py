"""XID events: NVIDIA's catalog (as data), reading them from the kernel log, a time window,
reset tracking and de-duplication.

The driver logs `NVRM: Xid (PCI:0000:1b:00): 79, pid=..., ...` to the kernel ring buffer, and
`NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 94, ...` when it can attribute the error to a MIG
instance. Sources: /dev/kmsg (records `prio,seq,usec,flags;message`), the journal
(`journalctl -k -b -o json`), or a log file whose lines start with a timestamp in one of the
shapes `line_time` knows (syslog, syslog with microseconds, ISO-8601 / RFC 3339, `dmesg -T`,
`dmesg --time-format iso`, raw dmesg and `journalctl -o short-monotonic` seconds since boot).
An XID line whose timestamp format is unknown is an error naming the line, never "now". A
seconds-since-boot stamp is dated from its boot (see `events_from_file`); one whose boot the log
does not date is kept as recent and says so: a fault never vanishes because its time is unknown.

Classification is NVIDIA's Xid catalog, kept as data next to this module
(`data/xid_catalog.csv`, and `data/xid_nvlink5.csv` for the NVLink5 144-150 sub-codes; a
144-150 line printed without its register tuple is decoded from its unit and Fatal/Nonfatal
word, the catalog's rows of that unit and severity): the catalog's immediate action decides. RESET_GPU / RESTART_BM / the NVLink and DBE workflows and a
154 that asks for a reset or reboot fail; IGNORE-class events that still say something about
the hardware (63 remap recorded, 92 high SBE rate, 94 "reset when convenient", 157) warn;
application errors (RESTART_APP, IGNORE) are info. An XID the catalog does not list warns and
names itself. Sites override any XID with `health.xid_actions`.

A fault whose action is a GPU reset or node reboot stays failing past the time window until
the reset is seen: the node booted after it, a later `154 ... to 0x0 (None)` line for that GPU,
NVML's recovery-action field reading "none" (from the driver release the catalog gives as that
XID's "Xid 154 linkage" on; before it the field stays 0 whatever happened), or an admin resumed
the node (the engine records that as an acknowledgement time).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import time
from dataclasses import field

from ..record import record

DATA = os.path.join(os.path.dirname(__file__), "data")

# The catalog's immediate-action buckets -> (our verdict, what clears it: "reset", "reboot" or "").
ACTION_VERDICT: dict[str, tuple[str, str]] = {
    "RESET_GPU": ("fail", "reset"),
    "RESTART_BM": ("fail", "reboot"),
    "WORKFLOW_XID_48": ("fail", "reset"),  # "A GPU reset or node reboot is needed to clear this error"
    "WORKFLOW_NVLINK_ERR": ("fail", "reset"),  # same words for Xid 74
    "CHECK_MECHANICALS": ("fail", ""),
    "CONTACT_SUPPORT": ("warn", ""),
    "UPDATE_SWFW": ("warn", ""),
    "RESTART_APP": ("info", ""),
    "RESTART_VM": ("info", ""),
    "IGNORE": ("info", ""),
    "CHECK_UVM": ("info", ""),  # "If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE"
    "WORKFLOW_XID_45": ("info", ""),  # follows the other Xid
    "XID_154_EVAL": ("info", ""),  # "If an XID 154 is seen along with this error, take that action"
}
# IGNORE / RESTART_APP Xids that still say something about the GPU's hardware: reported (warn).
HARDWARE_NOTES: dict[int, str] = {
    63: "row remap recorded; reset to activate",
    92: "high single-bit ECC rate",
    94: "contained memory error; reset the GPU when convenient",
    121: "corrected C2C errors; reset at a service window",
    157: "resource retirement failed: no repairs left",
}
# Xid 154's recovery actions (NVML_GPU_RECOVERY_ACTION_*, the number printed as "to 0xN (...)").
RECOVERY_ACTIONS: dict[int, tuple[str, str, str]] = {
    0: ("None", "info", ""),
    1: ("GPU Reset Required", "fail", "reset"),
    2: ("Node Reboot Required", "fail", "reboot"),
    3: ("Drain P2P", "fail", "reset"),
    4: ("Drain and Reset", "fail", "reset"),
    5: ("Recover IMEX domain", "warn", ""),
    6: ("Bus Reset", "fail", "reset"),
    7: ("System Reboot", "fail", "reboot"),
}
UNKNOWN_VERDICT = "warn"


class _Pattern:
    """A regular expression compiled on first use: a healthy node's log has no XID line, and its
    prolog should not pay for compiling the patterns that read one (half of this module's import)."""

    __slots__ = ("_args",)

    def __init__(self, *args) -> None:
        self._args = args

    def __getattr__(self, attr):
        return getattr(re.compile(*self._args), attr)  # re caches the compiled pattern


XID_RE = _Pattern(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.\d)?"
    r"(?:\s+GPU-I:(\d+))?(?:\s+GPU-CI:(\d+))?\):\s*(\d+),\s?(.*)$")
NVLINK5_RE = _Pattern(r"^\s*([A-Z][A-Z0-9_]*)\s+(Fatal|Nonfatal|Non-fatal)\b.*?\(\s*(0x[0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+)")
# the same line as some drivers print it, without the register tuple: unit and flag only
NVLINK5_BARE_RE = _Pattern(r"^\s*([A-Z][A-Z0-9_]*)\s+(Fatal|Nonfatal|Non-fatal)\b")
RECOVERY_RE = _Pattern(r"recovery action changed from 0x([0-9a-fA-F]+)\b.*? to 0x([0-9a-fA-F]+)\b")

ISO_RE = _Pattern(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
SYSLOG_RE = _Pattern(r"^([A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2})(\.\d+)?\s")
DMESG_T_RE = _Pattern(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]\s")
MONO_RE = _Pattern(r"^\[\s*(\d+\.\d+)\]\s")
# boot markers of seconds-since-boot logs: journalctl's separator between boots, and the kernel's
# `rtc_cmos 00:00: setting system clock to 2026-11-29T10:00:00 UTC (1795860000)` (hctosys), which
# dates the boot it is logged in
BOOT_SEP_RE = _Pattern(r"^-- (?:Boot [0-9a-fA-F]+|Reboot) --")
RTC_RE = _Pattern(r"setting system clock to \S+ UTC \((\d+)\)")
# the kernel's banner, the first line of every boot: in a persistent log file (kern.log, syslog,
# journalctl -k output) with a wall-clock stamp it dates that boot
BOOT_BANNER_RE = _Pattern(r"\bkernel: (?:\[\s*\d+\.\d+\] )?Linux version \S")
MONO_SLACK_S = 60.0  # a stamp this far past the uptime still reads as this boot (clock granularity)

# Read at most this much from the end of a log file (a prolog must not read a year of kern.log).
TAIL_BYTES = 4 << 20


class XidSourceError(ValueError):
    """The XID source cannot be read as a log we understand (the message names the line)."""


@record(frozen=True)
class CatalogEntry:
    """One XID of NVIDIA's catalog: its name and immediate action."""

    xid: int
    mnemonic: str
    description: str
    applies_b100: bool
    immediate: str
    investigatory: str
    linkage: str  # "Xid 154 linkage": from this driver release the Xid sets the recovery action


@record(frozen=True)
class Nvlink5Rule:
    """The catalog's action for one NVLink5 XID (144-150) sub-code."""

    xid: int
    units: tuple[str, ...]
    link_field: int | None
    error_status: int | None
    immediate: str
    fatal_immediate: str
    severity: str


def _rows(name: str) -> list[dict[str, str]]:
    import csv

    with open(os.path.join(DATA, name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


@functools.cache
def catalog() -> dict[int, CatalogEntry]:
    return {int(r["xid"]): CatalogEntry(int(r["xid"]), r["mnemonic"], r["description"], r["applies_b100"] == "YES",
                                        r["immediate"], r["investigatory"], r["xid154_linkage"])
            for r in _rows("xid_catalog.csv")}


@functools.cache
def nvlink5_rules() -> list[Nvlink5Rule]:
    def num(text: str) -> int | None:
        return None if text == "*" else int(text, 0)

    return [Nvlink5Rule(int(r["xid"]), tuple(r["unit"].split("/")), num(r["link_field"]), num(r["error_status"]),
                        r["immediate"], r["fatal_immediate"], r["severity"]) for r in _rows("xid_nvlink5.csv")]


def pci_key(domain: int, bus: int, device: int) -> str:
    """Canonical PCI address used to match XID lines with NVML's busId (`00000000:1B:00.0`)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def pci_key_from_bus_id(bus_id: str) -> str:
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id.strip())
    if not m:
        return bus_id.strip().lower()
    return pci_key(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))


@record(frozen=True)
class XidEvent:
    """One XID line read from the kernel log."""

    ts: float
    pci: str
    xid: int
    line: str
    text: str = ""  # what follows "<xid>, " (sub-codes, recovery action)
    gi: int | None = None  # MIG GPU instance, when the driver attributed the error to one
    ci: int | None = None
    # when it was logged is not known (a seconds-since-boot stamp of a boot the log does not
    # date): `ts` is then "now", or just before the next boot the log does date, and the
    # finding says so; it is never dropped for it
    undated: str = ""


@record
class XidFinding:
    """What the XID check concludes for one GPU."""

    pci: str
    xid: int
    name: str
    action: str  # NVIDIA's immediate action
    verdict: str  # fail | warn | info | ignore
    count: int
    first_ts: float
    last_ts: float
    needs: str = ""  # "reset" / "reboot": stays failing until seen
    pending: bool = False  # only failing because the reset it needs has not been seen (outside the window)
    resolved: str = ""  # "reboot", "reset", "ack": what cleared a reset-class fault
    mig: list[str] = field(default_factory=list)
    undated: str = ""  # why its time is not known (XidEvent.undated)


@record(frozen=True)
class Verdict:
    """An XID's name, NVIDIA's action, our verdict and what clears it."""

    name: str
    action: str
    verdict: str
    needs: str


def _nvlink5(xid: int, text: str) -> tuple[str, str, str] | None:
    """(sub-code name, immediate action, severity) of an NVLink5 line, from the decode table."""
    m = NVLINK5_RE.match(text)
    if not m:
        return _nvlink5_bare(xid, text)
    unit, flag, intr, status = m.group(1), m.group(2), int(m.group(3), 16), int(m.group(4), 16)
    fatal = flag == "Fatal"
    link_field = (intr >> 20) & 0x3F
    for r in nvlink5_rules():
        if r.xid != xid or unit not in r.units:
            continue
        if r.link_field is not None and r.link_field != link_field:
            continue
        if r.error_status is not None and r.error_status != status:
            continue
        action = r.fatal_immediate if fatal and r.fatal_immediate else r.immediate
        return f"{unit} status 0x{status:08x}" + (f" field {link_field}" if r.link_field is not None else ""), \
            action, r.severity
    # not in the decode table: the line's own flag decides (slurmadm's rule)
    return f"{unit} status 0x{status:08x} (not in the decode table; {flag})", \
        "RESET_GPU" if fatal else "CONTACT_SUPPORT", flag


_VERDICT_RANK = {"fail": 3, "warn": 2, "info": 1}


def _nvlink5_bare(xid: int, text: str) -> tuple[str, str, str] | None:
    """A 144-150 line without its `(0x... 0x...)` tuple: the catalog's rows for the printed unit
    whose severity is the printed flag (Nonfatal: "Non-fatal" and the promotable "Non-fatal*"
    rows; Fatal: "Fatal", "Link Fatal", and the promotable rows with their Action 2) decide, the
    worst of them winning. A unit the decode table does not list falls back to the flag."""
    m = NVLINK5_BARE_RE.match(text)
    if not m:
        return None
    unit, flag = m.group(1), m.group(2)
    fatal = flag == "Fatal"
    actions = []
    for r in nvlink5_rules():
        if r.xid != xid or unit not in r.units:
            continue
        nonfatal_row = r.severity.startswith("Non-fatal")
        if fatal and r.fatal_immediate:
            actions.append(r.fatal_immediate)
        elif fatal != nonfatal_row:
            actions.append(r.immediate)
    if not actions:
        return f"{unit} {flag} (no status in the line; unit not in the decode table)", \
            "RESET_GPU" if fatal else "CONTACT_SUPPORT", flag
    worst = max(actions, key=lambda a: _VERDICT_RANK.get(ACTION_VERDICT.get(a, ("warn", ""))[0], 2))
    return f"{unit} {flag} (no status in the line)", worst, flag


def classify_event(xid: int, text: str = "", overrides: dict[str, str] | None = None) -> Verdict:
    entry = catalog().get(xid)
    if entry is None:
        v = Verdict(f"XID {xid} (not in NVIDIA's catalog as slurmadm has it)", "UNKNOWN", UNKNOWN_VERDICT, "")
    elif xid == 154:
        m = RECOVERY_RE.search(text)
        code = int(m.group(2), 16) if m else -1
        label, verdict, needs = RECOVERY_ACTIONS.get(code, (f"unknown recovery action {code}", "warn", ""))
        v = Verdict(f"{entry.mnemonic}: {label}", "XID_154", verdict, needs)
    elif entry.immediate == "WORKFLOW_NVLINK5_ERR":
        sub = _nvlink5(xid, text)
        if sub is None:  # no sub-code in the line (an older driver): the catalog gives no decode
            v = Verdict(f"{entry.mnemonic} (no sub-code in the line)", entry.immediate, "fail", "reset")
        else:
            name, action, _severity = sub
            verdict, needs = ACTION_VERDICT.get(action, ("warn", ""))
            v = Verdict(f"{entry.mnemonic} {name}", action, verdict, needs)
    else:
        verdict, needs = ACTION_VERDICT.get(entry.immediate, ("warn", ""))
        name = entry.mnemonic
        if verdict == "info" and xid in HARDWARE_NOTES:
            verdict, name = "warn", f"{entry.mnemonic}: {HARDWARE_NOTES[xid]}"
        if not entry.immediate:  # 162-172: the catalog gives text, no bucket
            verdict, name = "warn", f"{entry.mnemonic} ({entry.description})"
        v = Verdict(name, entry.immediate or "SEE_CATALOG", verdict, needs)
    if overrides and str(xid) in overrides:
        verdict = overrides[str(xid)]
        v = Verdict(v.name, v.action, verdict, v.needs if verdict == "fail" else "")
    return v


def driver_release(version: str) -> int | None:
    """The release branch of a driver version: `570.133.20` -> 570 (None when unknown)."""
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def linked(xid: int, driver: str) -> bool:
    """Whether this XID sets NVML's recovery action on this driver: 154 itself, or an XID the
    catalog gives an "Xid 154 linkage" release for and the running driver is that release or
    later (before it, the field stays 0 whatever happened). A linkage without a release
    (`yes`) counts on any driver; an unknown driver counts for none."""
    if xid == 154:
        return True
    entry = catalog().get(xid)
    if entry is None or not entry.linkage:
        return False
    since = entry.linkage.lstrip("Rr")
    if not since.isdigit():
        return True
    running = driver_release(driver)
    return running is not None and running >= int(since)


def classify(xid: int, overrides: dict[str, str] | None = None) -> tuple[str, str, str]:
    """(name, NVIDIA's immediate action, our verdict) of an XID without its message text."""
    v = classify_event(xid, "", overrides)
    return v.name, v.action, v.verdict


def parse_line(line: str, ts: float) -> XidEvent | None:
    m = XID_RE.search(line)
    if not m:
        return None
    return XidEvent(ts, pci_key(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)),
                    int(m.group(6)), line.strip(), m.group(7).strip(),
                    int(m.group(4)) if m.group(4) is not None else None,
                    int(m.group(5)) if m.group(5) is not None else None)


def boot_time() -> float:
    """Wall-clock time this machine booted."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def line_time(line: str, now: float, boot: float | None = None) -> float | None:
    """Wall-clock time of a log line, or None when its timestamp is not one we know. Naive
    times are local time; seconds-since-boot stamps count from `boot` (this boot)."""
    import datetime as dt  # only file sources need it: not on the /dev/kmsg prolog path

    m = ISO_RE.match(line)
    if m:
        text = m.group(1).replace(",", ".").replace(" ", "T").replace("Z", "+00:00")
        if re.search(r"[+-]\d{4}$", text):  # +0000 -> +00:00
            text = text[:-2] + ":" + text[-2:]
        try:
            return dt.datetime.fromisoformat(text).timestamp()
        except ValueError:
            return None
    m = SYSLOG_RE.match(line)
    if m:
        year = dt.datetime.fromtimestamp(now).year
        try:
            stamp = dt.datetime.strptime(f"{year} {' '.join(m.group(1).split())}", "%Y %b %d %H:%M:%S").timestamp()
        except ValueError:
            return None
        stamp += float(m.group(2) or 0)
        return stamp if stamp <= now + 86400 else stamp - 365 * 86400  # December lines read in January
    m = DMESG_T_RE.match(line)
    if m:
        try:
            return dt.datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y").timestamp()
        except ValueError:
            return None
    m = MONO_RE.match(line)
    if m:
        return (boot_time() if boot is None else boot) + float(m.group(1))
    return None


class _Boot:
    """The seconds-since-boot lines of one boot in a log file."""

    __slots__ = ("wall", "top", "events")

    def __init__(self) -> None:
        self.wall: float | None = None  # when this boot began, if the log says
        self.top = 0.0  # its highest stamp
        self.events: list[tuple[float, XidEvent]] = []


def events_from_file(path: str, now: float, boot: float | None = None) -> list[XidEvent]:
    """XIDs of a log file. Wall-clock stamps are read as `line_time` does. Seconds-since-boot
    stamps (raw dmesg, `journalctl -o short-monotonic`) are split into boots at each boot marker
    (a stamp lower than the one before, journalctl's `-- Boot ... --`), and dated from what dates
    their boot: the kernel's `setting system clock to ... (epoch)` line, else, for the last boot
    of the file only, this machine's boot when its stamps fit this machine's uptime. A line of a
    boot nothing dates is kept, never dropped: at "now", or just before the next dated boot, with
    `undated` saying why. `journalctl -o json` lines carry their own realtime stamp."""
    this_boot = boot_time() if boot is None else boot
    out: list[XidEvent] = []
    boots: list[_Boot] = []
    cur: _Boot | None = None
    last = -1.0
    for line in _file_lines(path):
        if line.startswith("["):
            m = MONO_RE.match(line)
            if m:
                mono = float(m.group(1))
                if cur is None or mono < last:
                    cur = _Boot()
                    boots.append(cur)
                last = mono
                cur.top = max(cur.top, mono)
                if "setting system clock" in line:
                    rtc = RTC_RE.search(line)
                    if rtc:
                        cur.wall = int(rtc.group(1)) - mono
                if "NVRM: Xid" in line:
                    ev = parse_line(line, 0.0)
                    if ev is not None:
                        cur.events.append((mono, ev))
                continue
        elif line.startswith("-- ") and BOOT_SEP_RE.match(line):
            cur = None
            continue
        if "NVRM: Xid" not in line:
            continue
        if line.startswith("{"):
            out.extend(events_from_journal_json(line))
            continue
        ev = parse_line(line, 0.0)
        if ev is None:
            continue
        ts = line_time(line, now, boot)
        if ts is None:
            raise XidSourceError(f"{path}: cannot tell when this XID line was logged (unknown timestamp format; "
                                 f"use syslog, ISO-8601, dmesg -T or journalctl short-iso/-precise): {line[:100]}")
        out.append(XidEvent(ts, ev.pci, ev.xid, ev.line, ev.text, ev.gi, ev.ci))
    if boots and boots[-1].wall is None and boots[-1].top <= now - this_boot + MONO_SLACK_S:
        boots[-1].wall = this_boot
    upper: float | None = None  # the next dated boot's start
    for b in reversed(boots):
        for mono, ev in b.events:
            if b.wall is not None:
                out.append(XidEvent(b.wall + mono, ev.pci, ev.xid, ev.line, ev.text, ev.gi, ev.ci))
            elif upper is not None:
                out.append(XidEvent(upper - 0.001, ev.pci, ev.xid, ev.line, ev.text, ev.gi, ev.ci,
                                    undated=f"stamped {mono:.0f} s after a boot the log does not date; "
                                            "before the next boot"))
            else:
                out.append(XidEvent(now, ev.pci, ev.xid, ev.line, ev.text, ev.gi, ev.ci,
                                    undated=f"stamped {mono:.0f} s after a boot the log does not date "
                                            "(not this boot); treated as recent"))
        if b.wall is not None:
            upper = b.wall  # an undated boot before this one is still before it
    return sorted(out, key=lambda e: e.ts)


def boot_in_log(source: str, node: str, now: float) -> float | None:
    """When the node last booted, by a log file source: its latest wall-clock-stamped kernel
    banner (`... kernel: Linux version ...`). None for kmsg/journal sources (this boot is all they
    hold) and for a file without one. A log kept across boots says it booted even where this
    machine's clock cannot (a log shipped from the node, the dev cluster's fake nodes)."""
    if source in ("kmsg", "journal"):
        return None
    latest = None
    try:
        lines = _file_lines(source.replace("{node}", node))
    except OSError:
        return None
    for line in lines:
        if "Linux version" not in line or line.startswith("[") and not DMESG_T_RE.match(line):
            continue  # a seconds-since-boot stamp does not date its boot
        if not BOOT_BANNER_RE.search(line):
            continue
        ts = line_time(line, now)
        if ts is not None and ts <= now + MONO_SLACK_S and (latest is None or ts > latest):
            latest = ts
    return latest


_CACHE: dict[tuple[str, float], tuple[float, list]] = {}
CACHE_S = 5.0  # one health run reads the kernel log once for the xid and infiniband checks


def _cached(key: str, stamp: float, load):
    now = time.monotonic()
    hit = _CACHE.get((key, stamp))
    if hit is not None and now - hit[0] < CACHE_S:
        return hit[1]
    value = load()
    _CACHE.clear()
    _CACHE[(key, stamp)] = (now, value)
    return value


def kmsg_records(path: str = "/dev/kmsg") -> list[tuple[float, str]]:
    """(wall time, first message line) of every record still in the kernel ring buffer
    (non-blocking read of /dev/kmsg: records `prio,seq,usec,flags;message`)."""
    def load() -> list[tuple[float, str]]:
        boot = boot_time()
        out = []
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    rec = os.read(fd, 8192)
                except OSError as exc:
                    if exc.errno == errno.EAGAIN:
                        break
                    if exc.errno == errno.EPIPE:  # overwritten while reading: skip ahead
                        continue
                    raise
                if not rec:
                    break
                head, _, msg = rec.decode("utf-8", errors="replace").partition(";")
                fields = head.split(",")
                if len(fields) >= 3:
                    out.append((boot + int(fields[2]) / 1e6, msg.split("\n", 1)[0]))
        finally:
            os.close(fd)
        return out

    return _cached(path, 0.0, load)


def events_from_kmsg(path: str = "/dev/kmsg") -> list[XidEvent]:
    """Every XID record still in the kernel ring buffer."""
    out = []
    for ts, msg in kmsg_records(path):
        if "NVRM: Xid" in msg:
            ev = parse_line(msg, ts)
            if ev is not None:
                out.append(ev)
    return out


def _file_lines(path: str) -> list[str]:
    st = os.stat(path)

    def load() -> list[str]:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - TAIL_BYTES))
            return fh.read().decode("utf-8", errors="replace").splitlines()

    return _cached(path, st.st_mtime_ns + st.st_size * 1e-3 + st.st_ino * 1e-9, load)


def events_from_journal_json(text: str) -> list[XidEvent]:
    """`journalctl -k -o json` output: one JSON object per line (MESSAGE, __REALTIME_TIMESTAMP in us)."""
    out = []
    for raw in text.splitlines():
        if "NVRM: Xid" not in raw:
            continue
        try:
            rec = json.loads(raw)
            msg, usec = rec["MESSAGE"], int(rec["__REALTIME_TIMESTAMP"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(msg, list):  # journald gives non-UTF-8 messages as byte arrays
            msg = bytes(msg).decode("utf-8", errors="replace")
        ev = parse_line(str(msg), usec / 1e6)
        if ev is not None:
            out.append(ev)
    return out


def journal_text(timeout: float = 10.0) -> str:
    """This boot's kernel messages from the journal as JSON lines (a reboot clears every pending
    reset anyway)."""
    def load() -> str:
        from ..errors import SlurmadmError
        from ..proc import run

        try:
            return run(["journalctl", "-k", "-b", "-o", "json", "--no-pager", "-q"], timeout=timeout).stdout
        except SlurmadmError as exc:
            raise OSError(errno.EIO, str(exc)) from None

    return _cached("journal", 0.0, load)


def events_from_journal(timeout: float = 10.0) -> list[XidEvent]:
    return events_from_journal_json(journal_text(timeout))


def read_events(source: str, node: str, now: float) -> list[XidEvent]:
    """Events from `source`: "kmsg", "journal", or a file path (`{node}` replaced). A missing file
    raises FileNotFoundError (the check reports it as an error naming the path, never a pass)."""
    if source == "kmsg":
        return events_from_kmsg()
    if source == "journal":
        return events_from_journal()
    return events_from_file(source.replace("{node}", node), now)


def latest(ev: XidEvent) -> float:
    """The latest time the event can have happened: a whole-second stamp (syslog, journalctl
    short-iso, `dmesg -T`) says only which second. An admin's resume acknowledges what was logged
    before it; a fault logged in the same second as the last drained sighting is not known to be
    before it, so it is not acknowledged (a fault never vanishes for want of a finer clock)."""
    return ev.ts + 1.0 if float(ev.ts).is_integer() else ev.ts


def summarize(events: list[XidEvent], *, now: float, window_s: float,
              overrides: dict[str, str] | None = None, boot: float | None = None, ack: float = 0.0,
              recovery_none: set[str] | frozenset[str] = frozenset(), driver: str = "",
              reset_ack: float = 0.0) -> list[XidFinding]:
    """Findings, one per (GPU, XID, sub-code), oldest first: events inside the window, plus
    reset- or reboot-class events (any age) whose reset has not been seen since.

    `boot`: when the node booted (events before it were cleared by the reboot). `ack`: an admin
    resumed the node at this time (older events are acknowledged). `reset_ack`: repair reset the
    GPUs at this time (older reset-class events are cleared; a reboot-class one is not). `recovery_none`: GPUs (PCI
    keys) whose NVML recovery-action field reads "none" now; it clears an XID only when `driver`
    (the running driver's version) has that XID's Xid 154 linkage (`linked`)."""
    reset_seen: dict[str, float] = {}
    for ev in events:
        if ev.xid == 154:
            m = RECOVERY_RE.search(ev.text)
            if m and int(m.group(2), 16) == 0:
                reset_seen[ev.pci] = max(reset_seen.get(ev.pci, 0.0), ev.ts)
    found: dict[tuple[str, int, str, bool], XidFinding] = {}
    for ev in events:
        if ev.ts > now + 60:
            continue
        v = classify_event(ev.xid, ev.text, overrides)
        if v.verdict == "ignore":
            continue
        in_window = ev.ts >= now - window_s
        resolved = ""
        if v.needs:
            if boot is not None and ev.ts < boot:
                resolved = "reboot"
            elif latest(ev) <= ack:
                resolved = "ack"
            elif v.needs == "reset" and (reset_seen.get(ev.pci, 0.0) > ev.ts or latest(ev) <= reset_ack):
                resolved = "reset"
            elif v.needs == "reset" and ev.pci in recovery_none and linked(ev.xid, driver):
                resolved = "reset"
        verdict = v.verdict
        if v.needs and resolved:
            if not in_window:
                continue
            verdict = "info"
        elif not v.needs and not in_window:
            continue
        key = (ev.pci, ev.xid, v.name, bool(resolved))
        f = found.get(key)
        if f is None:
            f = found[key] = XidFinding(ev.pci, ev.xid, v.name, v.action, verdict, 0, ev.ts, ev.ts,
                                        needs=v.needs if not resolved else "", resolved=resolved,
                                        undated=ev.undated)
            f.pending = True
        f.count += 1
        f.first_ts = min(f.first_ts, ev.ts)
        f.last_ts = max(f.last_ts, ev.ts)
        f.pending = f.pending and not in_window
        if ev.gi is not None:
            tag = f"GI {ev.gi}" + (f" CI {ev.ci}" if ev.ci is not None else "")
            if tag not in f.mig:
                f.mig.append(tag)
    return sorted(found.values(), key=lambda f: (f.first_ts, f.pci, f.xid))


def to_state(events: list[XidEvent]) -> str:
    """Events kept in the node's state so that a wrapped ring buffer cannot forget a pending reset."""
    return json.dumps([[round(e.ts, 3), e.pci, e.xid, e.text[:300], e.gi, e.ci] for e in events[-50:]])


def from_state(text: str | None) -> list[XidEvent]:
    try:
        rows = json.loads(text) if text else []
        return [XidEvent(float(ts), str(pci), int(x), f"(kept) Xid {x}", str(t), gi, ci) for ts, pci, x, t, gi, ci in rows]
    except (ValueError, TypeError):
        return []


def merge(events: list[XidEvent], kept: list[XidEvent]) -> list[XidEvent]:
    seen = {(round(e.ts), e.pci, e.xid) for e in events}
    return sorted(events + [e for e in kept if (round(e.ts), e.pci, e.xid) not in seen], key=lambda e: e.ts)


def kernel_lines(source: str, node: str, now: float, pattern: re.Pattern[str]) -> list[tuple[float, str]]:
    """(time, message) of kernel-log lines matching `pattern`, from the same sources as XIDs (read
    once per run: see _cached). File lines whose time cannot be read are skipped (the xid check
    reports such a source)."""
    if source == "kmsg":
        return [(ts, msg) for ts, msg in kmsg_records() if pattern.search(msg)]
    out: list[tuple[float, str]] = []
    if source == "journal":
        for raw in journal_text().splitlines():
            if not pattern.search(raw):
                continue
            try:
                rec = json.loads(raw)
                out.append((int(rec["__REALTIME_TIMESTAMP"]) / 1e6, str(rec["MESSAGE"])))
            except (ValueError, KeyError, TypeError):
                continue
        return out
    for line in _file_lines(source.replace("{node}", node)):
        if pattern.search(line):
            ts = line_time(line, now)
            if ts is not None:
                out.append((ts, line))
    return out
