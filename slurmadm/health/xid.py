"""XID events: NVIDIA's catalog, reading them from the kernel log, a time window and de-duplication.

The driver logs `NVRM: Xid (PCI:0000:1b:00): 79, pid=..., ...` to the kernel ring buffer. We read
/dev/kmsg (records `prio,seq,usec,flags;message`, timestamps in microseconds since boot) or a
log file whose lines start with an ISO-8601 or classic syslog timestamp.

Classification follows NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors, "analyzing the
XID catalog"): the catalog's immediate action decides. RESET_GPU / RESTART_BM / the NVLink
workflows and the memory errors fail (drain); IGNORE-class events that still say something
about the hardware (63 row-remap recording, 92 high single-bit rate) warn; application errors
(RESTART_APP of an engine, page faults) are reported as info and do not count. Sites override
any XID with `health.xid_actions`.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import re
import time
from dataclasses import dataclass

# xid -> (catalog mnemonic, NVIDIA's immediate action, our verdict)
CATALOG: dict[int, tuple[str, str, str]] = {
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "info"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "info"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "RESTART_APP", "info"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "IGNORE", "info"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "fail"),
    48: ("DBE_ERROR (double-bit ECC)", "RESET_GPU", "fail"),
    61: ("PMU_BREAKPOINT", "RESET_GPU", "fail"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", "fail"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT (row remap/page retirement recorded)", "IGNORE", "warn"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "fail"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "fail"),
    79: ("GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "fail"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "warn"),
    94: ("CONTAINED_ERROR (memory)", "RESTART_APP", "fail"),
    95: ("UNCONTAINED_ERROR (memory)", "RESET_GPU", "fail"),
    109: ("CTXSW_TIMEOUT_ERROR", "RESET_GPU", "fail"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", "fail"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", "fail"),
    120: ("GSP_ERROR", "RESET_GPU", "fail"),
    136: ("ALI_TRAINING_FAIL (link training)", "RESET_GPU", "fail"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "fail"),
    143: ("GPU_INIT_ERROR", "RESET_GPU", "fail"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154", "warn"),
}
# An XID the catalog above does not list is reported (warn) so that nobody misses it.
UNKNOWN_VERDICT = "warn"

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.\d)?\): (\d+),")
ISO_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
SYSLOG_RE = re.compile(r"^([A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2})\s")

# Read at most this much from the end of a log file (a prolog must not read a year of kern.log).
TAIL_BYTES = 4 << 20


def pci_key(domain: int, bus: int, device: int) -> str:
    """Canonical PCI address used to match XID lines with NVML's busId (`00000000:1B:00.0`)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def pci_key_from_bus_id(bus_id: str) -> str:
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", bus_id.strip())
    if not m:
        return bus_id.strip().lower()
    return pci_key(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))


@dataclass(frozen=True)
class XidEvent:
    ts: float
    pci: str
    xid: int
    line: str


@dataclass
class XidFinding:
    pci: str
    xid: int
    name: str
    action: str  # NVIDIA's immediate action
    verdict: str  # fail | warn | info | ignore
    count: int
    first_ts: float
    last_ts: float


def classify(xid: int, overrides: dict[str, str] | None = None) -> tuple[str, str, str]:
    name, action, verdict = CATALOG.get(xid, (f"XID {xid} (not in slurmadm's catalog)", "UNKNOWN", UNKNOWN_VERDICT))
    if overrides and str(xid) in overrides:
        verdict = overrides[str(xid)]
    return name, action, verdict


def parse_line(line: str, ts: float) -> XidEvent | None:
    m = XID_RE.search(line)
    if not m:
        return None
    return XidEvent(ts, pci_key(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)),
                    int(m.group(4)), line.strip())


def line_time(line: str, now: float) -> float | None:
    """Wall-clock time of a log line: ISO-8601 (naive = local time) or classic syslog."""
    m = ISO_RE.match(line)
    if m:
        text = m.group(1).replace(" ", "T").replace("Z", "+00:00")
        try:
            return dt.datetime.fromisoformat(text).timestamp()
        except ValueError:
            return None
    m = SYSLOG_RE.match(line)
    if m:
        year = dt.datetime.fromtimestamp(now).year
        try:
            stamp = dt.datetime.strptime(f"{year} {m.group(1)}", "%Y %b %d %H:%M:%S").timestamp()
        except ValueError:
            return None
        return stamp if stamp <= now + 86400 else stamp - 365 * 86400  # December lines read in January
    return None


def events_from_file(path: str, now: float) -> list[XidEvent]:
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - TAIL_BYTES))
        data = fh.read().decode("utf-8", errors="replace")
    out = []
    for line in data.splitlines():
        if "NVRM: Xid" not in line:
            continue
        ts = line_time(line, now)
        ev = parse_line(line, ts if ts is not None else now)
        if ev is not None:
            out.append(ev)
    return out


def events_from_kmsg(path: str = "/dev/kmsg") -> list[XidEvent]:
    """Every XID record still in the kernel ring buffer (non-blocking read of /dev/kmsg)."""
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
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
            text = rec.decode("utf-8", errors="replace")
            head, _, msg = text.partition(";")
            fields = head.split(",")
            if "NVRM: Xid" not in msg or len(fields) < 3:
                continue
            ev = parse_line(msg, boot + int(fields[2]) / 1e6)
            if ev is not None:
                out.append(ev)
    finally:
        os.close(fd)
    return out


def read_events(source: str, node: str, now: float) -> list[XidEvent]:
    if source == "kmsg":
        return events_from_kmsg()
    path = source.replace("{node}", node)
    try:
        return events_from_file(path, now)
    except FileNotFoundError:
        return []  # no log yet: no XIDs (a missing /dev/kmsg, by contrast, is an error)


def summarize(events: list[XidEvent], *, now: float, window_s: float,
              overrides: dict[str, str] | None = None) -> list[XidFinding]:
    """Events inside the window, one finding per (GPU, XID), oldest first."""
    found: dict[tuple[str, int], XidFinding] = {}
    for ev in events:
        if ev.ts < now - window_s or ev.ts > now + 60:
            continue
        key = (ev.pci, ev.xid)
        f = found.get(key)
        if f is None:
            name, action, verdict = classify(ev.xid, overrides)
            found[key] = XidFinding(ev.pci, ev.xid, name, action, verdict, 1, ev.ts, ev.ts)
        else:
            f.count += 1
            f.first_ts = min(f.first_ts, ev.ts)
            f.last_ts = max(f.last_ts, ev.ts)
    return sorted(found.values(), key=lambda f: (f.first_ts, f.pci, f.xid))
