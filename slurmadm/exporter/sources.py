"""What the node exporter reads, each behind a small Protocol so the collector never knows where
readings come from: NVML (the real pynvml), InfiniBand sysfs, /proc, the store's health verdicts,
the GPU -> job map. Every read returns plain data; the collector turns it into metrics."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..health.nodechecks import COUNTER_BITS

# ---------------------------------------------------------------------------------------- GPUs


@dataclass
class GpuSample:
    index: int
    uuid: str = ""
    name: str = ""
    bus_id: str = ""
    util_percent: float | None = None
    mem_util_percent: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    temp_c: float | None = None
    mem_temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    sm_clock_hz: float | None = None
    mem_clock_hz: float | None = None
    clock_reasons: int | None = None
    ecc: dict[tuple[str, str], float] = field(default_factory=dict)  # (type, scope) -> count
    remap: dict[str, float] = field(default_factory=dict)  # correctable/uncorrectable/pending/failure
    nvlink_errors: dict[str, float] = field(default_factory=dict)  # counter -> sum over links
    nvlink_active: int | None = None
    nvlink_total: int | None = None
    pcie_replay: float | None = None
    pids: tuple[int, ...] = ()
    error: str = ""


class GpuSource(Protocol):
    def read(self) -> tuple[str, list[GpuSample]]: ...  # (driver version, GPUs)


class NvmlGpus:
    """The real pynvml (over the real libnvidia-ml, or the dev cluster's stand-in)."""

    def __init__(self) -> None:
        self._nv: Any = None

    def _session(self):
        from ..health.nvml import Nvml

        if self._nv is None:
            self._nv = Nvml.open()
        return self._nv

    def read(self) -> tuple[str, list[GpuSample]]:
        from ..health.nvml import Nvml

        # enumerate afresh each read: a GPU that fell off the bus must disappear from the list
        if self._nv is not None:
            try:
                self._nv.mod.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nv = None
        nv: Nvml = self._session()
        out = []
        for g in nv.gpus:
            s = GpuSample(g.index, bus_id=g.bus_id, error=g.error)
            if g.handle is not None:
                try:
                    _read_gpu(nv, g.handle, s)
                except nv.mod.NVMLError as exc:
                    s.error = str(exc)
            out.append(s)
        return nv.driver_version, out


_NVLINK_COUNTERS = {"replay": "NVML_NVLINK_ERROR_DL_REPLAY", "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
                    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA"}


def _field(nv, handle, field_id) -> int | None:
    got = nv.get("nvmlDeviceGetFieldValues", handle, [field_id])
    if not got or got[0].nvmlReturn != 0:
        return None
    v = got[0]
    return int(v.value.ullVal if v.valueType == nv.mod.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG else v.value.uiVal)


def _read_gpu(nv, h, s: GpuSample) -> None:
    m = nv.mod
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    s.uuid = text(nv.get("nvmlDeviceGetUUID", h) or "")
    s.name = text(nv.get("nvmlDeviceGetName", h) or "")
    util = nv.get("nvmlDeviceGetUtilizationRates", h)
    if util is not None:
        s.util_percent, s.mem_util_percent = float(util.gpu), float(util.memory)
    mem = nv.get("nvmlDeviceGetMemoryInfo", h)
    if mem is not None:
        s.mem_used_bytes, s.mem_total_bytes = float(mem.used), float(mem.total)
    t = nv.get("nvmlDeviceGetTemperature", h, m.NVML_TEMPERATURE_GPU)
    s.temp_c = None if t is None else float(t)
    hbm = _field(nv, h, m.NVML_FI_DEV_MEMORY_TEMP)
    s.mem_temp_c = None if hbm is None else float(hbm)
    p = nv.get("nvmlDeviceGetPowerUsage", h)
    s.power_w = None if p is None else p / 1000.0
    lim = nv.get("nvmlDeviceGetEnforcedPowerLimit", h)
    s.power_limit_w = None if lim is None else lim / 1000.0
    e = nv.get("nvmlDeviceGetTotalEnergyConsumption", h)
    s.energy_j = None if e is None else e / 1000.0
    sm = nv.get("nvmlDeviceGetClockInfo", h, m.NVML_CLOCK_SM)
    s.sm_clock_hz = None if sm is None else sm * 1e6
    mc = nv.get("nvmlDeviceGetClockInfo", h, m.NVML_CLOCK_MEM)
    s.mem_clock_hz = None if mc is None else mc * 1e6
    fn = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(m, "nvmlDeviceGetCurrentClocksEventReasons")
          else "nvmlDeviceGetCurrentClocksThrottleReasons")
    r = nv.get(fn, h)
    s.clock_reasons = None if r is None else int(r)
    for etype, econst in (("corrected", m.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                          ("uncorrected", m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        for scope, sconst in (("volatile", m.NVML_VOLATILE_ECC), ("aggregate", m.NVML_AGGREGATE_ECC)):
            n = nv.get("nvmlDeviceGetTotalEccErrors", h, econst, sconst)
            if n is not None:
                s.ecc[(etype, scope)] = float(n)
    rows = nv.get("nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        corr, unc, pending, failed = rows
        s.remap = {"correctable": float(corr), "uncorrectable": float(unc), "pending": float(bool(pending)),
                   "failure": float(bool(failed))}
    links = 0
    active = 0
    errors = {k: 0.0 for k in _NVLINK_COUNTERS}
    for link in range(64):
        try:
            state = m.nvmlDeviceGetNvLinkState(h, link)
        except m.NVMLError:
            break
        links += 1
        if state == m.NVML_FEATURE_ENABLED:
            active += 1
        for name, const in _NVLINK_COUNTERS.items():
            c = getattr(m, const, None)
            if c is not None:
                errors[name] += nv.get("nvmlDeviceGetNvLinkErrorCounter", h, link, c) or 0
    if links:
        s.nvlink_active, s.nvlink_total, s.nvlink_errors = active, links, errors
    rep = nv.get("nvmlDeviceGetPcieReplayCounter", h)
    s.pcie_replay = None if rep is None else float(rep)
    procs = list(nv.get("nvmlDeviceGetComputeRunningProcesses", h) or [])
    procs += list(nv.get("nvmlDeviceGetGraphicsRunningProcesses", h) or [])
    s.pids = tuple(sorted({int(p.pid) for p in procs}))


# ---------------------------------------------------------------------------------- InfiniBand


@dataclass
class IbPort:
    hca: str
    port: str
    state: int  # 4 = ACTIVE
    phys_state: int  # 5 = LinkUp
    rate_gbps: float
    link_layer: str
    counters: dict[str, float]
    wide: frozenset[str] = frozenset()  # counters read 64 bits wide (counters_ext/*_64)


class IbSource(Protocol):
    def read(self) -> list[IbPort]: ...


# counters/ files worth exporting: data counters (4-byte words), packets, transmit wait (ticks
# the port had data to send and no credits: congestion) and error counters
IB_DATA = {"port_xmit_data": "transmit", "port_rcv_data": "receive"}
IB_PACKETS = {"port_xmit_packets": "transmit", "port_rcv_packets": "receive"}
IB_WAIT = "port_xmit_wait"
IB_ERRORS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_xmit_discards",
             "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors",
             "port_xmit_constraint_errors", "port_rcv_constraint_errors", "VL15_dropped")
# Widths of the PortCounters attribute (IBA vol. 1, PortCounters; the kernel's
# drivers/infiniband/core/sysfs.c PORT_PMA_ATTR widths): a PMA counter stops at its maximum
# instead of wrapping. Where the HCA has PortCountersExtended the kernel shows the data and packet
# counters 64 bits wide in the same files; older OFED stacks put those in counters_ext/<name>_64.
IB_COUNTER_BITS = {**COUNTER_BITS, "port_xmit_data": 32, "port_rcv_data": 32, "port_xmit_packets": 32,
                   "port_rcv_packets": 32, "port_xmit_wait": 32}
IB_EXT_NAMES = {"port_xmit_data": "port_xmit_data_64", "port_rcv_data": "port_rcv_data_64",
                "port_xmit_packets": "port_xmit_packets_64", "port_rcv_packets": "port_rcv_packets_64"}


def saturated(name: str, value: float, wide: bool = False) -> bool:
    """The counter sits exactly at its width's maximum (it stopped counting). A value past that
    maximum shows the kernel reads the counter wider (PortCountersExtended), so it is not."""
    bits = 64 if wide else IB_COUNTER_BITS.get(name)
    return bits is not None and bits < 64 and value == (1 << bits) - 1


def _leading_number(text: str) -> float:
    head = text.strip().split(":")[0].split()[0] if text.strip() else ""
    try:
        return float(head)
    except ValueError:
        return 0.0


class SysfsInfiniband:
    """/sys/class/infiniband/<hca>/ports/<n>/{state,phys_state,rate,link_layer,counters/*} and,
    where present, counters_ext/*_64 (the 64-bit data and packet counters). Ports of either link
    layer: InfiniBand and Ethernet (RoCE) alike."""

    def __init__(self, root: str = "/sys"):
        self.base = os.path.join(root, "class", "infiniband")

    def read(self) -> list[IbPort]:
        out: list[IbPort] = []
        try:
            hcas = sorted(os.listdir(self.base))
        except OSError:
            return out
        for hca in hcas:
            ports_dir = os.path.join(self.base, hca, "ports")
            try:
                ports = sorted(os.listdir(ports_dir))
            except OSError:
                continue
            for port in ports:
                d = os.path.join(ports_dir, port)

                def rd(name: str, d: str = d) -> str:
                    try:
                        with open(os.path.join(d, name)) as fh:
                            return fh.read()
                    except OSError:
                        return ""

                counters: dict[str, float] = {}
                wide: set[str] = set()
                has_counters = os.path.isdir(os.path.join(d, "counters"))
                has_ext = os.path.isdir(os.path.join(d, "counters_ext"))
                for name in (*IB_DATA, *IB_PACKETS, IB_WAIT, *IB_ERRORS):
                    if has_ext and name in IB_EXT_NAMES:
                        text = rd(os.path.join("counters_ext", IB_EXT_NAMES[name]))
                        if text.strip():
                            counters[name] = _leading_number(text)
                            wide.add(name)
                            continue
                    text = rd(os.path.join("counters", name)) if has_counters else ""
                    if text.strip():
                        counters[name] = _leading_number(text)
                out.append(IbPort(hca, port, int(_leading_number(rd("state"))), int(_leading_number(rd("phys_state"))),
                                  _leading_number(rd("rate")), rd("link_layer").strip(), counters, frozenset(wide)))
        return out


# ------------------------------------------------------------------------------------ the host


@dataclass
class HostSample:
    cpu_seconds: dict[str, float]  # mode -> seconds, summed over CPUs
    cpus: int
    mem_total_bytes: float
    mem_available_bytes: float
    load: tuple[float, float, float]


class HostSource(Protocol):
    def read(self) -> HostSample: ...


CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


class ProcHost:
    def __init__(self, proc: str = "/proc"):
        self.proc = proc

    def read(self) -> HostSample:
        tick = os.sysconf("SC_CLK_TCK")
        cpu: dict[str, float] = {}
        cpus = 0
        with open(os.path.join(self.proc, "stat")) as fh:
            for line in fh:
                if line.startswith("cpu "):
                    vals = line.split()[1:]
                    cpu = {mode: int(v) / tick for mode, v in zip(CPU_MODES, vals)}
                elif line.startswith("cpu"):
                    cpus += 1
        mem: dict[str, float] = {}
        with open(os.path.join(self.proc, "meminfo")) as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    mem[key] = float(rest.split()[0]) * 1024
        with open(os.path.join(self.proc, "loadavg")) as fh:
            l1, l5, l15 = (float(x) for x in fh.read().split()[:3])
        return HostSample(cpu, cpus, mem.get("MemTotal", 0.0), mem.get("MemAvailable", 0.0), (l1, l5, l15))


# ------------------------------------------------------------------------------ health verdicts


@dataclass(frozen=True)
class Verdict:
    check_id: str
    status: str  # pass | fail | warn | error | skip
    ts: float
    context: str


@dataclass(frozen=True)
class HookErrors:
    """Health hooks that could not run on this node (health/hookerror.py)."""

    counts: dict[str, int]  # reason -> how many runs, ever
    off_since: float | None = None  # the last one, while no check result was recorded after it
    error: str = ""


class HealthSource(Protocol):
    def read(self) -> list[Verdict]: ...


class StoreHealth:
    """The latest result of every check on this node, from the store health runs write."""

    def __init__(self, store_path: str, node: str):
        self.store_path = store_path
        self.node = node

    def read(self) -> list[Verdict]:
        import sqlite3

        if not os.path.exists(self.store_path):
            return []
        db = sqlite3.connect(f"file:{self.store_path}?mode=ro", uri=True, timeout=2.0)
        try:
            rows = db.execute(
                "SELECT c.check_id, c.status, c.ts, c.context FROM check_results c JOIN "
                "(SELECT check_id, MAX(id) AS id FROM check_results WHERE node=? GROUP BY check_id) last "
                "ON c.id = last.id", (self.node,)).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            db.close()
        return [Verdict(r[0], r[1], float(r[2]), r[3]) for r in rows]

    def hook_errors(self) -> HookErrors:
        import sqlite3

        # health/hookerror.py writes them
        from ..store.read import STATE_KEY, counts, current

        if not os.path.exists(self.store_path):
            return HookErrors({})
        db = sqlite3.connect(f"file:{self.store_path}?mode=ro", uri=True, timeout=2.0)
        db.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in db.execute(
                "SELECT node, key, value FROM node_state WHERE node=? AND key LIKE 'health.hook-error%'",
                (self.node,))]
            newest = db.execute("SELECT MAX(ts) FROM check_results WHERE node=?", (self.node,)).fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return HookErrors({})
            raise
        finally:
            db.close()
        per_reason = {reason: n for (_, reason), n in counts(rows).items()}
        cur = current([r for r in rows if r["key"] == STATE_KEY], {self.node: float(newest or 0.0)})
        return HookErrors(per_reason, cur[0]["ts"] if cur else None, cur[0]["error"] if cur else "")


# ------------------------------------------------------------------------------------ the XIDs


@dataclass(frozen=True)
class XidSeen:
    bus_id: str  # NVML-style, upper case
    xid: int
    verdict: str  # fail | warn | info | ignore
    count: int
    last_ts: float


class XidSource(Protocol):
    def read(self) -> list[XidSeen]: ...


class LogXids:
    """XIDs inside the health window from the node's kernel log (the health check's own reader)."""

    def __init__(self, source: str, node: str, window_s: float, overrides: dict[str, str]):
        self.source, self.node, self.window_s, self.overrides = source, node, window_s, overrides

    def read(self) -> list[XidSeen]:
        from ..health import xid

        now = time.time()
        events = xid.read_events(self.source, self.node, now)
        return [XidSeen(f.pci, f.xid, f.verdict, f.count, f.last_ts)
                for f in xid.summarize(events, now=now, window_s=self.window_s, overrides=self.overrides)]
