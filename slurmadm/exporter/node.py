"""The node exporter's collector: GPUs (NVML), InfiniBand (sysfs), CPU/memory/load (/proc), the
latest health verdicts (the store), the last XIDs (the kernel log) and the GPU -> job map (the
prolog's records), as Prometheus metrics.

Names follow Prometheus conventions (base units in the name, `_total` for counters) and stay
close to dcgm-exporter's where the meaning is the same (DCGM_FI_DEV_GPU_UTIL ->
slurmadm_gpu_utilization_percent, DCGM_FI_DEV_GPU_TEMP -> slurmadm_gpu_temperature_celsius, ...).
Every GPU series carries `node`, `gpu`, `uuid` and `jobid`/`user`/`account` (empty when no job
holds the GPU), so a job's GPUs are one selector away, as with Princeton's jobstats.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .. import jobmap
from .cache import CachedRead
from .sources import (GpuSource, HealthSource, HostSource, IbSource, IB_DATA, IB_ERRORS, IB_PACKETS, IB_WAIT, XidSource,
                      saturated)

GPU_LABELS = ["node", "gpu", "uuid", "jobid", "user", "account"]

# Clock event reason bits (nvml.h) -> label value
CLOCK_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}

HEALTH_STATUS = ("pass", "warn", "fail", "error", "skip")

# slurmadm_gpu_xid_class_last's classes: the verdicts health.xid gives from NVIDIA's Xid catalog
# (fail: RESET_GPU/RESTART_BM/workflows; warn: IGNORE-class events with a hardware note, and XIDs
# the catalog lacks; info: RESTART_APP/IGNORE, e.g. 13, 31, 43). A site's health.xid_actions
# override moves an XID between classes; "ignore" puts it in none.
XID_CLASSES = {"drain": ("fail",), "hardware": ("warn",), "application": ("info",)}


@dataclass
class IdleTracker:
    """Per GPU: since when has the job holding it kept it at or under the idle threshold.

    Judged on the exporter's own samples (one per read): a GPU counts as idle only while every
    sample is at or under the threshold (job_defense_shield's rule); a new job, or one sample
    above, starts the clock again. State is in memory: an exporter restart restarts the clocks
    (it errs towards not reporting)."""

    threshold: float
    since: dict[int, tuple[str, float]] = field(default_factory=dict)  # gpu -> (jobid, idle since)

    def update(self, gpu: int, jobid: str, util: float | None, now: float) -> float | None:
        if not jobid or util is None:
            self.since.pop(gpu, None)
            return None
        held = self.since.get(gpu)
        if util > self.threshold:
            self.since[gpu] = (jobid, float("nan"))
            return 0.0
        if held is None or held[0] != jobid or held[1] != held[1]:  # new job, or was busy (nan)
            start = now
            self.since[gpu] = (jobid, start)
        else:
            start = held[1]
        return max(0.0, now - start)


class NodeCollector:
    def __init__(self, *, node: str, gpus: GpuSource, ib: IbSource, host: HostSource, health: HealthSource,
                 xids: XidSource, job_map_dir: str, cache_s: float, deadline_s: float, idle_util_percent: float,
                 gpu_source: str = "slurmadm"):
        """gpu_source "dcgm": leave out what dcgm-exporter's default counters have (dcgm.LEFT_OUT)."""
        self.node = node
        self.left_out: frozenset[str] = frozenset()
        if gpu_source == "dcgm":
            from .dcgm import LEFT_OUT

            self.left_out = LEFT_OUT
        self.mode = "node"
        self.job_map_dir = job_map_dir
        mk = lambda name, fn: CachedRead(name, fn, max_age_s=cache_s, deadline_s=deadline_s)  # noqa: E731
        self.reads = {
            "gpu": mk("gpu", gpus.read),
            "infiniband": mk("infiniband", ib.read),
            "host": mk("host", host.read),
            "health": mk("health", health.read),
            "hooks": mk("hooks", getattr(health, "hook_errors", lambda: None)),
            "xid": mk("xid", xids.read),
            "jobmap": mk("jobmap", lambda: jobmap.read(self.job_map_dir, self.node)),
        }
        self.idle = IdleTracker(idle_util_percent)
        self.scrapes = 0

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on what the node has

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        self.scrapes += 1
        got = {name: r.get() for name, r in self.reads.items()}
        jobs = got["jobmap"].value or {}
        yield from self._gpus(got["gpu"].value, jobs, got["xid"].value or [])
        yield from self._ib(got["infiniband"].value or [])
        yield from self._host(got["host"].value)
        yield from self._health(got["health"].value or [])
        yield from self._hooks(got["hooks"].value)
        yield from self._self(got, time.monotonic() - started)

    # ------------------------------------------------------------------ GPUs
    def _gpus(self, value, jobs, xids) -> Iterator[Metric]:
        fams: dict[str, Metric] = {}

        def g(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            if name not in fams:
                fams[name] = GaugeMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])
            return fams[name]  # type: ignore[return-value]

        def c(name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
            if name not in fams:
                fams[name] = CounterMetricFamily(name, doc, labels=[*GPU_LABELS, *extra])
            return fams[name]  # type: ignore[return-value]

        info = GaugeMetricFamily("slurmadm_gpu_info", "One series per GPU NVML enumerates (value 1)",
                                 labels=["node", "gpu", "uuid", "name", "bus_id", "driver_version"])
        count = GaugeMetricFamily("slurmadm_gpus", "GPUs NVML enumerates on the node", labels=["node"])
        if value is None:
            return
        driver, samples = value
        count.add_metric([self.node], len(samples))
        from ..health.xid import pci_key_from_bus_id

        xid_by_pci: dict[str, list] = {}
        for x in xids:
            xid_by_pci.setdefault(x.bus_id, []).append(x)
        now = time.time()
        for s in samples:
            job = jobs.get(s.index)
            base = [self.node, str(s.index), s.uuid, job.job_id if job else "", job.user if job else "",
                    job.account if job else ""]
            info.add_metric([self.node, str(s.index), s.uuid, s.name, s.bus_id, driver], 1)
            g("slurmadm_gpu_read_error", "1 when NVML could not read this GPU").add_metric(base, 1 if s.error else 0)
            pairs = [
                ("slurmadm_gpu_utilization_percent", "GPU utilisation (DCGM_FI_DEV_GPU_UTIL)", s.util_percent),
                ("slurmadm_gpu_memory_utilization_percent", "Memory controller utilisation", s.mem_util_percent),
                ("slurmadm_gpu_memory_used_bytes", "Frame buffer used (DCGM_FI_DEV_FB_USED)", s.mem_used_bytes),
                ("slurmadm_gpu_memory_total_bytes", "Frame buffer size", s.mem_total_bytes),
                ("slurmadm_gpu_temperature_celsius", "GPU temperature (DCGM_FI_DEV_GPU_TEMP)", s.temp_c),
                ("slurmadm_gpu_memory_temperature_celsius", "HBM temperature (DCGM_FI_DEV_MEMORY_TEMP)",
                 s.mem_temp_c),
                ("slurmadm_gpu_power_watts", "Power draw (DCGM_FI_DEV_POWER_USAGE)", s.power_w),
                ("slurmadm_gpu_power_limit_watts", "Enforced power limit", s.power_limit_w),
                ("slurmadm_gpu_sm_clock_hertz", "SM clock (DCGM_FI_DEV_SM_CLOCK)", s.sm_clock_hz),
                ("slurmadm_gpu_memory_clock_hertz", "Memory clock (DCGM_FI_DEV_MEM_CLOCK)", s.mem_clock_hz),
                ("slurmadm_gpu_nvlink_links_active", "NVLinks active", s.nvlink_active),
                ("slurmadm_gpu_nvlink_links", "NVLinks the GPU has", s.nvlink_total),
            ]
            for name, doc, v in pairs:
                if v is not None:
                    g(name, doc).add_metric(base, v)
            if s.energy_j is not None:
                c("slurmadm_gpu_energy_joules", "Energy since the driver loaded "
                  "(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)").add_metric(base, s.energy_j)
            if s.pcie_replay is not None:
                c("slurmadm_gpu_pcie_replay", "PCIe replays (DCGM_FI_DEV_PCIE_REPLAY_COUNTER)").add_metric(
                    base, s.pcie_replay)
            if s.clock_reasons is not None:
                g("slurmadm_gpu_clock_event_reasons", "Clock event reason bitmask (nvmlClocksEventReasons)"
                  ).add_metric(base, s.clock_reasons)
                fam = g("slurmadm_gpu_clock_event_active", "1 while a clock event reason is active", ("reason",))
                for bit, reason in CLOCK_REASONS.items():
                    fam.add_metric([*base, reason], 1 if s.clock_reasons & bit else 0)
            for (etype, scope), n in s.ecc.items():
                c("slurmadm_gpu_ecc_errors", "ECC errors (DCGM_FI_DEV_ECC_SBE/DBE_VOL/AGG_TOTAL)",
                  ("type", "scope")).add_metric([*base, etype, scope], n)
            if s.remap:
                g("slurmadm_gpu_remapped_rows", "Rows remapped (DCGM_FI_DEV_*_REMAPPED_ROWS)", ("type",)
                  ).add_metric([*base, "correctable"], s.remap["correctable"])
                fams["slurmadm_gpu_remapped_rows"].add_metric([*base, "uncorrectable"], s.remap["uncorrectable"])
                g("slurmadm_gpu_row_remap_pending", "1 while a row remap awaits a GPU reset").add_metric(
                    base, s.remap["pending"])
                g("slurmadm_gpu_row_remap_failure", "1 when row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)"
                  ).add_metric(base, s.remap["failure"])
            for counter, n in s.nvlink_errors.items():
                c("slurmadm_gpu_nvlink_errors", "NVLink errors summed over links", ("counter",)).add_metric(
                    [*base, counter], n)
            g("slurmadm_gpu_processes", "Compute and graphics processes on the GPU").add_metric(base, len(s.pids))
            g("slurmadm_gpu_unallocated_in_use", "1 when a GPU no job was allocated has processes or "
              "utilisation above monitor.idle_util_percent").add_metric(
                base, 1 if job is None and self._in_use(s) else 0)
            found = xid_by_pci.get(pci_key_from_bus_id(s.bus_id), [])
            last = max(found, key=lambda x: x.last_ts) if found else None
            g("slurmadm_gpu_last_xid", "Last XID within the health window, 0 if none (DCGM_FI_DEV_XID_ERRORS)"
              ).add_metric(base, last.xid if last else 0)
            g("slurmadm_gpu_xid_fatal", "1 when an XID in the window calls for draining (NVIDIA's catalog)"
              ).add_metric(base, 1 if any(x.verdict == "fail" for x in found) else 0)
            fam = g("slurmadm_gpu_xid_class_last", "Last XID of each class in the health window, 0 if none: drain "
                    "(the catalog's reset/reboot/workflow actions), hardware (a hardware note, no drain), application "
                    "(RESTART_APP/IGNORE: the job's own fault)", ("class",))
            for klass, verdicts in XID_CLASSES.items():
                of = [x for x in found if x.verdict in verdicts]
                fam.add_metric([*base, klass], max(of, key=lambda x: x.last_ts).xid if of else 0)
            idle = self.idle.update(s.index, job.job_id if job else "", s.util_percent, now)
            if idle is not None:
                g("slurmadm_gpu_job_idle_seconds", "How long the job holding the GPU has kept it idle").add_metric(
                    base, idle)
        yield info
        yield count
        yield from (f for name, f in fams.items() if name not in self.left_out)

    def _in_use(self, s) -> bool:
        """Someone uses the GPU: NVML lists a process on it, or it is busy (a process in another
        PID namespace, a container, NVML lists no process for; the utilisation still shows)."""
        return bool(s.pids) or (s.util_percent is not None and s.util_percent > self.idle.threshold)

    # ------------------------------------------------------------------ InfiniBand
    def _ib(self, ports) -> Iterator[Metric]:
        if not ports:
            return
        labels = ["node", "hca", "port"]
        state = GaugeMetricFamily("slurmadm_ib_port_state", "Port state (4 = ACTIVE)", labels=labels)
        phys = GaugeMetricFamily("slurmadm_ib_port_phys_state", "Physical state (5 = LinkUp)", labels=labels)
        up = GaugeMetricFamily("slurmadm_ib_port_up", "1 when ACTIVE and LinkUp", labels=labels)
        info = GaugeMetricFamily("slurmadm_ib_port_info", "One series per port, value 1: its link layer "
                                 "(InfiniBand, or Ethernet for RoCE)", labels=[*labels, "link_layer"])
        rate = GaugeMetricFamily("slurmadm_ib_port_rate_bytes_per_second", "Link rate", labels=labels)
        data = CounterMetricFamily("slurmadm_ib_port_data_bytes", "Data bytes (64-bit counters where the kernel "
                                   "has them)", labels=[*labels, "direction"])
        pkts = CounterMetricFamily("slurmadm_ib_port_packets", "Packets", labels=[*labels, "direction"])
        wait = CounterMetricFamily("slurmadm_ib_port_transmit_wait", "Ticks the port had data to send but no "
                                   "flow-control credits (port_xmit_wait: congestion)", labels=labels)
        errs = CounterMetricFamily("slurmadm_ib_port_errors", "Error counters (narrow ones saturate)",
                                   labels=[*labels, "counter"])
        sat = GaugeMetricFamily("slurmadm_ib_port_saturated", "1 when a counter sits at the maximum of its "
                                "width (IBA PortCounters): it no longer counts, so it cannot rise",
                                labels=[*labels, "counter"])
        for p in ports:
            base = [self.node, p.hca, p.port]
            state.add_metric(base, p.state)
            phys.add_metric(base, p.phys_state)
            up.add_metric(base, 1 if p.state == 4 and p.phys_state == 5 else 0)
            info.add_metric([*base, p.link_layer or "InfiniBand"], 1)
            rate.add_metric(base, p.rate_gbps * 1e9 / 8)
            for key, direction in IB_DATA.items():
                if key in p.counters:
                    data.add_metric([*base, direction], p.counters[key] * 4)  # counted in 4-byte words
            for key, direction in IB_PACKETS.items():
                if key in p.counters:
                    pkts.add_metric([*base, direction], p.counters[key])
            if IB_WAIT in p.counters:
                wait.add_metric(base, p.counters[IB_WAIT])
            for key in IB_ERRORS:
                if key in p.counters:
                    errs.add_metric([*base, key], p.counters[key])
            for key, v in p.counters.items():
                sat.add_metric([*base, key], 1 if saturated(key, v, key in p.wide) else 0)
        yield from (state, phys, up, info, rate, data, pkts, wait, errs, sat)

    # ------------------------------------------------------------------ host
    def _host(self, h) -> Iterator[Metric]:
        if h is None:
            return
        cpu = CounterMetricFamily("slurmadm_node_cpu_seconds", "CPU time by mode, all CPUs",
                                  labels=["node", "mode"])
        for mode, secs in h.cpu_seconds.items():
            cpu.add_metric([self.node, mode], secs)
        yield cpu
        for name, doc, v in (("slurmadm_node_cpus", "Online CPUs", h.cpus),
                             ("slurmadm_node_memory_total_bytes", "MemTotal", h.mem_total_bytes),
                             ("slurmadm_node_memory_available_bytes", "MemAvailable", h.mem_available_bytes),
                             ("slurmadm_node_load1", "1-minute load average", h.load[0]),
                             ("slurmadm_node_load5", "5-minute load average", h.load[1]),
                             ("slurmadm_node_load15", "15-minute load average", h.load[2])):
            fam = GaugeMetricFamily(name, doc, labels=["node"])
            fam.add_metric([self.node], v)
            yield fam

    # ------------------------------------------------------------------ health verdicts
    def _health(self, verdicts) -> Iterator[Metric]:
        status = GaugeMetricFamily("slurmadm_health_check_status", "Latest verdict of each health check "
                                   "(1 for the status it has)", labels=["node", "check", "status"])
        failing = GaugeMetricFamily("slurmadm_health_check_failing", "1 when the latest verdict is fail or error",
                                    labels=["node", "check"])
        when = GaugeMetricFamily("slurmadm_health_check_timestamp_seconds", "When the latest verdict was recorded",
                                 labels=["node", "check"])
        for v in verdicts:
            for st in HEALTH_STATUS:
                status.add_metric([self.node, v.check_id, st], 1 if v.status == st else 0)
            failing.add_metric([self.node, v.check_id], 1 if v.status in ("fail", "error") else 0)
            when.add_metric([self.node, v.check_id], v.ts)
        yield from (status, failing, when)

    def _hooks(self, value) -> Iterator[Metric]:
        """Health hooks that could not run (a broken site file): health enforcement is off."""
        if value is None:
            return
        errors = CounterMetricFamily("slurmadm_hook_errors", "Health hook runs that could not load the site "
                                     "(the job ran unchecked)", labels=["node", "reason"])
        for reason, n in sorted(value.counts.items()):
            errors.add_metric([self.node, reason], n)
        off = GaugeMetricFamily("slurmadm_health_enforcement_off", "1 while the node's last health hook run "
                                "could not load the site (no check result since)", labels=["node"])
        off.add_metric([self.node], 1 if value.off_since is not None else 0)
        yield from (errors, off)

    # ------------------------------------------------------------------ the exporter itself
    def _self(self, got, elapsed: float) -> Iterator[Metric]:
        yield from source_metrics(self.reads, got)
        d = GaugeMetricFamily("slurmadm_exporter_scrape_duration_seconds", "This scrape's collection time",
                              labels=["mode"])
        d.add_metric(["node"], elapsed)
        yield d


def source_metrics(reads: dict[str, CachedRead], got: dict) -> Iterator[Metric]:
    stale = GaugeMetricFamily("slurmadm_exporter_source_stale", "1 when a source's last read failed or timed "
                              "out: its metrics are the last good values", labels=["source"])
    age = GaugeMetricFamily("slurmadm_exporter_source_age_seconds", "Age of a source's values", labels=["source"])
    dur = GaugeMetricFamily("slurmadm_exporter_source_read_seconds", "Duration of a source's last read",
                            labels=["source"])
    errors = CounterMetricFamily("slurmadm_exporter_source_errors", "Failed reads of a source", labels=["source"])
    reads_total = CounterMetricFamily("slurmadm_exporter_source_reads", "Reads of a source", labels=["source"])
    now = time.time()
    for name, reading in got.items():
        stale.add_metric([name], 1 if reading.stale else 0)
        age.add_metric([name], now - reading.ts if reading.ts else float("inf"))
        dur.add_metric([name], reading.duration_s)
        errors.add_metric([name], reads[name].errors_total)
        reads_total.add_metric([name], reads[name].reads_total)
    yield from (stale, age, dur, errors, reads_total)
