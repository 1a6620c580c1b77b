"""Checks an HGX B200 node needs beyond the per-GPU NVML readings: the NVSwitch fabric, clock
events, InfiniBand ports from sysfs, and the host basics NHC users expect (memory and DIMMs,
mounts, leftover processes after a job).

Facts: ../shared anchors oob-fabric-monitoring-2026-12.md (NVML fabric states and health mask,
clock-event bits, the InfiniBand sysfs layout and counter widths, NHC/Azure/OCI flap rules).
Everything here reads files (sysfs, /proc) or NVML: no subprocesses, so the prolog stays fast.
"""

from __future__ import annotations

import os
import re
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from .outcome import Ctx, Outcome


def _outcome():
    from .outcome import Outcome

    return Outcome()


# ------------------------------------------------------------------------------ NVSwitch fabric

FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
# healthMask fields: (name, shift, width, values that fail, values that warn)
HEALTH_FIELDS = [
    ("degraded bandwidth", 0, 0x3, {1}, set()),
    ("route recovery in progress", 2, 0x3, set(), {1}),
    ("route unhealthy", 4, 0x3, {1}, set()),
    ("access timeout recovery", 6, 0x3, set(), {1}),
    ("incorrect configuration", 8, 0xF, set(range(2, 16)), set()),
]


def fabric_info(nv, handle):
    """(state, status, healthMask or None) of one GPU, or None when NVML has no fabric info."""
    from ctypes import byref  # pynvml passes the struct on as given: it must be a pointer

    m = nv.mod
    if hasattr(m, "c_nvmlGpuFabricInfoV_t") and hasattr(m, "nvmlDeviceGetGpuFabricInfoV"):
        info = m.c_nvmlGpuFabricInfoV_t()
        try:
            m.nvmlDeviceGetGpuFabricInfoV(handle, byref(info))
            return int(info.state), int(info.status), int(info.healthMask)
        except (m.NVMLError_NotSupported, m.NVMLError_FunctionNotFound):
            pass
    if hasattr(m, "c_nvmlGpuFabricInfo_t") and hasattr(m, "nvmlDeviceGetGpuFabricInfo"):
        info = m.c_nvmlGpuFabricInfo_t()
        try:
            m.nvmlDeviceGetGpuFabricInfo(handle, byref(info))
            return int(info.state), int(info.status), None
        except (m.NVMLError_NotSupported, m.NVMLError_FunctionNotFound):
            pass
    return None


def process_running(comm: str, proc: str = "/proc", uid: int | None = 0) -> bool:
    """Whether a process whose /proc/<pid>/comm is `comm` (15 characters at most) runs as
    `uid` (root: a job user's process named like the daemon does not count; None: anyone's)."""
    want = comm[:15]
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                if fh.read().strip() == want and (uid is None or os.stat(f"{proc}/{pid}").st_uid == uid):
                    return True
        except OSError:
            continue
    return False


def fabric(ctx: Ctx) -> Outcome:
    """Every GPU's NVSwitch fabric registration COMPLETED with status success and a clean health
    mask; IN_PROGRESS warns, NOT_STARTED fails; Fabric Manager running."""
    out = _outcome()
    host = ctx.cfg.host
    if not host.get("nvswitches"):
        out.skip = "profile has no NVSwitches"
        return out
    nv = ctx.nvml
    supported = 0
    for g in nv.usable:
        got = fabric_info(nv, g.handle)
        if got is None or got[0] == 0:
            continue
        supported += 1
        state, status, mask = got
        name = FABRIC_STATES.get(state, f"state {state}")
        if state == 1:
            out.fail(f"GPU{g.index} fabric NOT_STARTED")
        elif state == 2:
            out.warn(f"GPU{g.index} fabric registration IN_PROGRESS")
        elif state == 3 and status != 0:
            out.fail(f"GPU{g.index} fabric COMPLETED with error (NVML status {status})")
        elif state != 3:
            out.fail(f"GPU{g.index} fabric {name}")
        if state == 3 and status == 0 and mask is not None:
            for label, shift, width, bad, meh in HEALTH_FIELDS:
                v = (mask >> shift) & width
                if v in bad:
                    out.fail(f"GPU{g.index} fabric health: {label}" + (f" ({v})" if width > 3 else ""))
                elif v in meh:
                    out.warn(f"GPU{g.index} fabric health: {label}")
    if not supported:
        out.skip = "fabric state not supported by this GPU/driver (no NVSwitch fabric here)"
        return out
    fm = host.get("fabric_manager_process")
    if fm and not process_running(fm):
        out.fail(f"Fabric Manager ({fm}) is not running")
    out.note = f"{supported} GPU(s) registered with the NVSwitch fabric"
    return out


# ------------------------------------------------------------------------------ clock events

HW_CLOCK_EVENTS = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake"}


def clock_events(ctx: Ctx) -> Outcome:
    """Hardware clock-event reasons seen on two samples `clock_event_confirm_ms` apart fail
    (one sample can catch a P-state blip); SW power cap and SW thermal are normal operation."""
    out = _outcome()
    nv = ctx.nvml
    m = nv.mod
    fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(m, "nvmlDeviceGetCurrentClocksEventReasons")
          else "nvmlDeviceGetCurrentClocksThrottleReasons")
    first: dict[int, int] = {}
    for g in nv.usable:
        reasons = nv.get(fn, g.handle)
        if reasons and reasons & sum(HW_CLOCK_EVENTS):
            first[g.index] = reasons
    if first:
        time.sleep(ctx.cfg.host.get("clock_event_confirm_ms", 100) / 1000)
        by_index = {g.index: g for g in nv.usable}
        for index, before in first.items():
            now = nv.get(fn, by_index[index].handle) or 0
            both = before & now
            names = [name for bit, name in HW_CLOCK_EVENTS.items() if both & bit]
            if names:
                out.fail(f"GPU{index} clock events: {', '.join(names)}")
    out.value = len(first)
    return out


# ------------------------------------------------------------------------------ InfiniBand

# Counter widths in bits (IBA PortCounters): a narrow counter stops at its maximum.
COUNTER_BITS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16,
}
FLAP_RE = re.compile(r"(lost carrier|Link down)", re.I)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


HCA_INVENTORY_KEY = "hcas"  # node_state `health.hcas`: "mlx5_0=<node_guid> mlx5_1=..." (slurmadm/repair)


def infiniband(ctx: Ctx) -> Outcome:
    out = _outcome()
    host = ctx.cfg.host
    hcas = host.get("hcas") or []
    if not hcas:
        out.skip = "profile lists no compute HCAs"
        return out
    root = os.path.join(host.get("sysfs_root") or "/sys", "class", "infiniband")
    port = host.get("hca_port", 1)
    want_rate = f"{host.get('nic_gbps')} Gb/sec"
    want_layer = "InfiniBand" if host.get("nic_kind") == "infiniband" else "Ethernet"
    limits = host.get("ib_counter_rise_max") or {}
    active = 0
    guids: dict[str, str] = {}
    for hca in hcas:
        pdir = os.path.join(root, hca, "ports", str(port))
        if not os.path.isdir(os.path.join(root, hca)):
            out.fail(f"{hca} missing")
            continue
        guid = _read(os.path.join(root, hca, "node_guid"))
        if guid:
            guids[hca] = guid
        state, phys = _read(f"{pdir}/state"), _read(f"{pdir}/phys_state")
        rate, layer = _read(f"{pdir}/rate"), _read(f"{pdir}/link_layer")
        if state is None:
            out.fail(f"{hca} port {port} missing")
            continue
        bad = []
        if not state.endswith("ACTIVE"):
            bad.append(f"state {state}")
        if phys is not None and not phys.endswith("LinkUp"):
            bad.append(f"phys_state {phys}")
        if rate is not None and not rate.startswith(want_rate):
            bad.append(f"rate {rate} (want {want_rate})")
        if layer is not None and layer != want_layer:
            bad.append(f"link_layer {layer} (want {want_layer})")
        if bad:
            out.fail(f"{hca}:{port} " + ", ".join(bad))
        else:
            active += 1
        for name, limit in limits.items():
            text = _read(f"{pdir}/counters/{name}")
            if text is None or not text.isdigit():
                continue
            value = int(text)
            top = (1 << COUNTER_BITS[name]) - 1 if name in COUNTER_BITS else None
            key = f"ib-{hca}-{port}-{name}"
            before = ctx.state.get(key) if ctx.state is not None else None
            if ctx.state is not None and before != text:
                ctx.state.set(key, text)
            saturated = top is not None and value >= top
            if before is None or not before.isdigit():
                if saturated:
                    out.warn(f"{hca}:{port} {name} saturated at {value} (many; clear the counters)")
                continue
            rise = value - int(before)
            if saturated and int(before) < top:
                out.fail(f"{hca}:{port} {name} rose to its maximum {value} (many, > {limit})")
            elif saturated:
                out.warn(f"{hca}:{port} {name} saturated at {value} (many; clear the counters)")
            elif rise > limit:
                out.fail(f"{hca}:{port} {name} rose by {rise} (> {limit})")
    if guids and ctx.state is not None:  # each HCA's GUID: what repair keys an HCA port's incidents by
        ctx.state.set(HCA_INVENTORY_KEY, " ".join(f"{h}={g}" for h, g in sorted(guids.items())))
    if ctx.state is not None and (ctx.context in ("periodic", "run") or ctx.state.get(HCA_IDS) is None):
        ctx.state.set(HCA_IDS, hca_identity(root, hcas, port))
    flaps = _flaps(ctx, hcas)
    for hca, n in sorted(flaps.items()):
        if n >= host.get("ib_flaps_max", 2):
            out.fail(f"{hca} link flapped {n} times in {host.get('ib_flap_window_hours', 6):g} h")
    out.value = active
    out.note = f"{active}/{len(hcas)} ports ACTIVE at {want_rate}"
    return out


HCA_IDS = "hca-ids"  # node_state health.hca-ids: each HCA's GUID, firmware, PSID (repair/parts.py reads it)


def hca_identity(root: str, hcas: list[str], port: int) -> str:
    """Each compute HCA's node GUID, firmware and PSID (sysfs `board_id`: the PSID on mlx5) as
    JSON: three file reads per HCA, in the periodic run. Stored only when it changed."""
    import json

    rows = []
    for hca in hcas:
        row = {"hca": hca, "port": port}
        for key, name in (("guid", "node_guid"), ("firmware", "fw_ver"), ("psid", "board_id")):
            v = _read(os.path.join(root, hca, name))
            if v:
                row[key] = v
        rows.append(row)
    return json.dumps(rows, sort_keys=True, separators=(",", ":"))


def _flaps(ctx: Ctx, hcas: list[str]) -> dict[str, int]:
    """Link-down lines per HCA in the kernel log within the flap window (the XID source)."""

    host = ctx.cfg.host
    since = ctx.now - host.get("ib_flap_window_hours", 6) * 3600
    if ctx.state is not None:  # an admin resumed the node after earlier flaps (engine.HELD)
        try:
            since = max(since, float(ctx.state.get("ib-ack") or 0))
        except ValueError:
            pass
    try:
        return link_downs(ctx.cfg.xid_source, ctx.cfg.node, ctx.now, hcas, since)
    except (OSError, ValueError):
        return {}  # the xid check reports an unreadable source


def link_downs(source: str, node: str, now: float, hcas: list[str], since: float) -> dict[str, int]:
    """Link-down lines per HCA in the kernel log (`health.xid_source`) logged at `since` or later.
    OSError/ValueError: the source cannot be read. Also the repair qualification's link watch."""
    from . import xid as xidmod

    counts: dict[str, int] = {}
    for ts, line in xidmod.kernel_lines(source, node, now, FLAP_RE):
        if ts < since:
            continue
        for hca in hcas:
            if re.search(rf"\b{re.escape(hca)}\b", line):
                counts[hca] = counts.get(hca, 0) + 1
    return counts


# ------------------------------------------------------------------------------ host basics


def host_memory(ctx: Ctx) -> Outcome:
    """MemTotal against the profile's memory_gib (a missing DIMM shows here first), the DIMM
    count from EDAC where the profile gives one, and no uncorrected memory errors in EDAC."""
    out = _outcome()
    host = ctx.cfg.host
    meminfo = _read("/proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    if not m:
        from .outcome import CannotRun

        raise CannotRun("no MemTotal in /proc/meminfo")
    have_gib = int(m.group(1)) / (1 << 20)
    want = host.get("memory_gib") or 0
    tol = host.get("memory_tolerance_fraction", 0.06)
    if want and have_gib < want * (1 - tol):
        out.fail(f"memory {have_gib:.0f} GiB < profile {want} GiB - {tol:.0%}")
    out.value = round(have_gib, 1)
    edac = os.path.join(host.get("sysfs_root") or "/sys", "devices", "system", "edac", "mc")
    dimms = 0
    ue = 0
    try:
        controllers = [d for d in os.listdir(edac) if d.startswith("mc")]
    except OSError:
        controllers = []
    for mc in controllers:
        ue += int(_read(f"{edac}/{mc}/ue_count") or 0)
        try:
            entries = os.listdir(f"{edac}/{mc}")
        except OSError:
            continue
        for d in entries:
            if (d.startswith("dimm") or d.startswith("rank")) and int(_read(f"{edac}/{mc}/{d}/size") or 0) > 0:
                dimms += 1
    if ue:
        out.fail(f"{ue} uncorrected memory error(s) in EDAC")
    want_dimms = host.get("dimms")
    if want_dimms:
        if not controllers:
            out.warn("DIMM count not checked: no EDAC memory controllers in sysfs")
        elif dimms != want_dimms:
            out.fail(f"{dimms} DIMMs populated, profile expects {want_dimms}")
    out.note = f"{have_gib:.0f} GiB" + (f", {dimms} DIMMs" if controllers else "")
    return out


def mounts(ctx: Ctx) -> Outcome:
    """Each required filesystem mounted (not the root fs showing through), writable and with free
    space. statvfs only: a hung NFS mount hangs the call and the runner's time limit reports it."""
    out = _outcome()
    specs = ctx.cfg.host.get("mounts") or []
    if not specs:
        out.skip = "no mounts listed (health.mounts)"
        return out
    for spec in specs:
        path = spec["path"]
        if not os.path.isdir(path):
            out.fail(f"{path} missing")
            continue
        if path != "/" and not os.path.ismount(path):
            out.fail(f"{path} is not mounted")
            continue
        st = os.statvfs(path)
        if spec.get("writable", True) and st.f_flag & os.ST_RDONLY:
            out.fail(f"{path} is read-only")
        free_gib = st.f_bavail * st.f_frsize / (1 << 30)
        if free_gib < spec.get("min_free_gib", 0):
            out.fail(f"{path} has {free_gib:.1f} GiB free < {spec['min_free_gib']:g} GiB")
    out.note = f"{len(specs)} mount(s) ok"
    return out


# A job's cgroup directory: `job_<id>` (cgroup v1, v2 up to 25.11, and 26.05 with cgroup.conf
# CgroupJobIdPaths=yes), or on 26.05's cgroup v2 by default the job's SLUID, `s` and 13 Crockford
# base32 characters, right under slurmstepd.scope (Slurm 26.05 NEWS: "cgroup/v2 directory
# structures are now keyed off of SLUID and not the JobId"; cgroup_v2.html shows
# /sys/fs/cgroup/system.slice/slurmstepd.scope/s5K1KKYAYG5D00/). The epilog gets both ids:
# SLURM_JOB_ID and (26.05) SLURM_JOB_SLUID.
_JOB_CGROUP = re.compile(r"/job_(\d+)(?:/|$)|slurmstepd\.scope/(s[0-9A-HJKMNP-TV-Z]{13})(?:/|$)", re.M)


def job_of_cgroup(text: str) -> str | None:
    """The job a /proc/<pid>/cgroup text places its process in: its numeric id or its SLUID."""
    m = _JOB_CGROUP.search(text)
    return (m.group(1) or m.group(2)) if m else None


def _job_of(pid: str) -> str | None:
    """The Slurm job (numeric id or 26.05 SLUID) of a process from its cgroup path, else None."""
    return job_of_cgroup(_read(f"/proc/{pid}/cgroup") or "")


def _uid_of(pid: str) -> int | None:
    text = _read(f"/proc/{pid}/status") or ""
    m = re.search(r"^Uid:\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def leftover_processes(ctx: Ctx) -> Outcome:
    """Epilog: processes of the finished job's user still alive in the job's cgroup (or, with
    leftover_outside_jobs, outside any job). Slurm has just signalled them: give them a moment."""
    out = _outcome()
    uid_text, job = os.environ.get("SLURM_JOB_UID"), os.environ.get("SLURM_JOB_ID")
    ids = {i for i in (job, os.environ.get("SLURM_JOB_SLUID")) if i}  # 26.05: cgroups keyed by SLUID
    if not uid_text or not uid_text.isdigit():
        out.skip = "not in a Slurm epilog (no SLURM_JOB_UID)"
        return out
    uid = int(uid_text)
    if uid == 0:
        out.skip = "the job ran as root"
        return out
    outside = ctx.cfg.host.get("leftover_outside_jobs", False)
    me = str(os.getpid())
    deadline = time.monotonic() + min(3.0, ctx.cfg.check_timeout_s / 2)
    while True:
        left = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit() and p != me):
            if _uid_of(pid) != uid:
                continue
            owner = _job_of(pid)
            if (owner is not None and owner in ids) or (outside and owner is None):
                left.append(pid)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if left:
        names = sorted({(_read(f"/proc/{p}/comm") or "?") for p in left})
        out.fail(f"{len(left)} process(es) of uid {uid} left after job {job or '?'}: "
                 f"pid {','.join(left[:8])} ({', '.join(names[:4])})")
    out.value = len(left)
    return out
