"""Prometheus alert rules generated from the site (`slurmadm monitor rules`).

Every rule is data here (name, expression, `for`, severity, what it means); the site supplies the
thresholds and the scrape job names. Alerts about one node carry a `node` label, which the
webhook (`slurmadm monitor webhook`) uses to isolate that node when monitor.actions maps the
alert to "drain". The suite checks the output with `promtool check rules` and has a `promtool
test rules` case for every rule (tests/unit/monitor/test_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ..site import Site


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    for_: str
    severity: str  # critical | warning | info
    group: str
    summary: str  # with Prometheus template fields ({{ $labels.node }})
    description: str = ""  # what it means and what to look at first (the runbook has the rest)

    def to_dict(self, actions: dict[str, str], *, cluster: str = "", runbook_base: str = "") -> dict:
        from ..exporter.slurmseries import sources

        out: dict = {"alert": self.name, "expr": self.expr}
        if self.for_ and self.for_ != "0s":
            out["for"] = self.for_
        labels = {"severity": self.severity, "source": "slurmadm"}
        if cluster:
            labels["cluster"] = cluster
        if actions.get(self.name) == "drain":
            labels["slurmadm_action"] = "drain"
        out["labels"] = labels
        out["annotations"] = {"summary": self.summary, "description": self.description or self.summary}
        if "slurm_" in self.expr:  # the rules that read Slurm's own series name whose series they read
            out["annotations"]["series"] = sources(self.expr)
        if runbook_base:
            out["annotations"]["runbook_url"] = f"{runbook_base.rstrip('/')}/{self.name}.md"
        return out


# Clock event reasons that mean the GPU is slowed by heat or power trouble (nvml.h; sw_power_cap
# is the normal state of a GPU at its power limit and gpu_idle is idleness: neither is trouble).
THROTTLE_REASONS = "hw_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown|sw_thermal_slowdown"
# Error counters whose rise (or saturation) InfinibandErrorsRising reports.
IB_ALERT_COUNTERS = "symbol_error|link_error_recovery|link_downed|port_rcv_errors|local_link_integrity_errors"
# Filesystems node_exporter lists that never fill up with user data.
PSEUDO_FS = "tmpfs|devtmpfs|overlay|squashfs|ramfs|nsfs|fuse.lxcfs"


def _dn(expr: str, *more: tuple[str, str]) -> str:
    """dcgm-exporter's `Hostname` (and other labels) copied to slurmadm's names (`node`): the
    webhook, the inhibit rules and the runbooks speak of `node`."""
    out = f'label_replace({expr}, "node", "$1", "Hostname", "(.*)")'
    for dst, src in more:
        out = f'label_replace({out}, "{dst}", "$1", "{src}", "(.*)")'
    return out


def _not_observed(site: Site) -> str:
    """The label matcher that leaves the checks in observe mode out of a health-verdict series ("" if
    none): tried on the fleet before they may drain, their failures page nobody (`slurmadm health
    observe` reports them). Check ids are `[a-z0-9-]` (site/health.py CheckId): safe in a regex."""
    ids = site.health.observed()
    return '{check!~"' + "|".join(ids) + '"}' if ids else ""


def build(site: Site, release=None) -> list[Rule]:
    """`release`: the target Slurm; from 25.11 (monitor.slurm_metrics) the rules read Slurm's own
    series where it has them (exporter/slurmseries.py) and watch its scrape."""
    from ..config.release import METRICS_FROM
    from ..exporter.slurmseries import slurm_has

    m = site.monitor
    slurm_gpus = slurm_has(release, (26, 5), m.slurm_metrics)  # slurm_partition_gpus and the GPU counts
    slurm_metrics = slurm_has(release, METRICS_FROM, m.slurm_metrics)
    nj, hj = m.node_job, m.head_job
    w = m.error_rise_window
    ff = m.flap_for
    idle_s = int(m.idle_minutes * 60)
    dcgm = m.gpu_source == "dcgm"
    gpu = "slurmadm-gpu"
    fabric = "slurmadm-fabric"
    node = "slurmadm-node"
    host = "slurmadm-host"
    cluster = "slurmadm-cluster"
    ng = "{{ $labels.node }} GPU{{ $labels.gpu }}"

    def gsel(slurmadm: str, dcgm_expr: str) -> str:
        return dcgm_expr if dcgm else slurmadm

    out = [
        Rule("GpuOverTemperature",
             gsel(f"max by (node, gpu) (slurmadm_gpu_temperature_celsius) > {m.gpu_temp_c}",
                  _dn(f"max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP) > {m.gpu_temp_c}")),
             m.gpu_temp_for, "warning", gpu, f"{ng} above {m.gpu_temp_c} C for {m.gpu_temp_for}",
             "The GPU core runs hotter than monitor.gpu_temp_c; it will slow down (thermal clock events) "
             "and may fail. Look at the node's fans, inlet temperature and the neighbouring GPUs."),
        # the XID in the summary: the webhook's drain reason carries it, so the incident it opens
        # has the catalog's class (79: GPU_LOST, reboot first), not a bare "reset the GPU"
        Rule("GpuXidFatal", 'max by (node, gpu) (slurmadm_gpu_xid_class_last{class="drain"}) > 0', "0s", "critical",
             gpu, f"{ng}: XID {{{{ $value }}}}, one NVIDIA's catalog says to drain for",
             "The kernel log has an XID whose catalog action is a GPU reset, a node reboot or a hardware "
             "workflow (e.g. 48, 79, 95, 119). Jobs on the GPU are lost; the node needs the catalog's action."),
        Rule("GpuXidSeen", 'max by (node, gpu) (slurmadm_gpu_xid_class_last{class="hardware"}) > 0', ff, "warning",
             gpu, f"{ng} logged XID {{{{ $value }}}} (a hardware note, no drain)",
             "An XID the catalog files under IGNORE or RESTART_APP but that says something about the hardware "
             "(63 row remap recorded, 92 high single-bit ECC rate, 94 contained memory error), or one the "
             "catalog lacks. Nothing is drained; watch for a repeat."),
        Rule("GpuXidApplication", 'max by (node, gpu) (slurmadm_gpu_xid_class_last{class="application"}) > 0', ff,
             "info", gpu, f"{ng} logged XID {{{{ $value }}}} (an application error)",
             "An XID NVIDIA's catalog classes as the application's own fault (RESTART_APP or IGNORE: 13 graphics "
             "engine exception, 31 memory page fault, 43 GPU stopped processing). The GPU is fine; the user's job "
             "crashed or was killed. Informational: it does not page."),
        Rule("GpuEccUncorrected",
             'max by (node, gpu) (slurmadm_gpu_ecc_errors_total{type="uncorrected", scope="volatile"}) > 0', "0s",
             "critical", gpu, f"{ng}: {{{{ $value }}}} uncorrected ECC errors",
             "Volatile uncorrectable (double-bit) ECC errors since the last driver load: data was lost and the "
             "job on the GPU may have computed garbage. Row remapping may repair it after a GPU reset."),
        Rule("GpuRowRemapFailure",
             gsel("max by (node, gpu) (slurmadm_gpu_row_remap_failure) == 1",
                  _dn("max by (Hostname, gpu) (DCGM_FI_DEV_ROW_REMAP_FAILURE) == 1")), "0s", "critical", gpu,
             f"{ng}: row remapping failed",
             "The GPU has no spare HBM rows left to remap a failing one: the memory fault is permanent. "
             "The GPU (board) needs replacing."),
        Rule("GpuNvlinkErrorsRising", f"sum by (node, gpu) (increase(slurmadm_gpu_nvlink_errors_total[{w}])) > 0",
             ff, "warning", gpu, f"{ng}: NVLink errors rising ({w})",
             "NVLink CRC, replay or recovery counters of the GPU rose in the window: a marginal link, which "
             "slows collectives (NCCL) and may go down."),
        Rule("GpuNvlinkLinksInactive",
             "max by (node, gpu) (slurmadm_gpu_nvlink_links) - max by (node, gpu) (slurmadm_gpu_nvlink_links_active)"
             " > 0", ff, "critical", gpu, f"{ng}: {{{{ $value }}}} NVLink links inactive",
             "Fewer NVLinks are up than the GPU has: NCCL traffic falls back to slower paths or fails, and "
             "multi-GPU jobs on the node run slow or hang. Fabric Manager and the NVSwitch trays are suspects."),
        Rule("GpuPcieReplayRising",
             gsel(f"sum by (node, gpu) (increase(slurmadm_gpu_pcie_replay_total[{w}])) > 0",
                  _dn(f"sum by (Hostname, gpu) (increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[{w}])) > 0")),
             ff, "warning", gpu, f"{ng}: PCIe replays rising ({w})",
             "The GPU's PCIe link retransmits packets: a bad riser, slot or retimer. Throughput to host "
             "memory and the NICs suffers; a link that keeps degrading drops the GPU off the bus (XID 79)."),
        Rule("GpuClockThrottled",
             f'max by (node, gpu) (slurmadm_gpu_clock_event_active{{reason=~"{THROTTLE_REASONS}"}}) == 1',
             ff, "warning", gpu, f"{ng}: clocks held down by a thermal or power slowdown",
             "NVML reports a hardware slowdown, a thermal slowdown or the power brake: the GPU runs below its "
             "clocks for heat or power reasons (not the normal power cap), and jobs on it run slow."),
        Rule("GpuJobIdle",
             gsel(f"min by (node, jobid, user, account) (slurmadm_gpu_job_idle_seconds) > {idle_s}",
                  _dn(f'max by (Hostname, hpc_job) (DCGM_FI_DEV_GPU_UTIL{{hpc_job!=""}}) <= {m.idle_util_percent:g}',
                      ("jobid", "hpc_job"))),
             f"{idle_s}s" if dcgm else "0s", "info", gpu,
             ("job {{ $labels.jobid }} keeps its GPUs on {{ $labels.node }} idle for over "
              f"{m.idle_minutes:g} min") if dcgm else
             ("job {{ $labels.jobid }} ({{ $labels.user }}/{{ $labels.account }}) keeps its GPUs on "
              f"{{{{ $labels.node }}}} idle for over {m.idle_minutes:g} min"),
             "A running job holds GPUs that stayed at or under monitor.idle_util_percent for monitor.idle_minutes: "
             "capacity others queue for. `slurmadm jobs idle` lists it and acts per monitor.idle_action."),
        Rule("GpuUsedWithoutAllocation", "max by (node, gpu) (slurmadm_gpu_unallocated_in_use) == 1", ff,
             "warning", gpu, f"{ng} is in use (processes or utilisation) but no job was allocated it",
             "Something uses a GPU that Slurm did not give to any job: a process outside cgroups (ssh login), a "
             "leftover from a killed job, or a gres.conf that does not match the hardware."),
        Rule("InfinibandLinkDown", "min by (node, hca, port) (slurmadm_ib_port_up) == 0", ff, "critical", fabric,
             "{{ $labels.node }} {{ $labels.hca }} port {{ $labels.port }} is not ACTIVE/LinkUp",
             "An InfiniBand (or RoCE) port of the node is not ACTIVE and LinkUp: multi-node jobs on the node fail "
             "or lose a rail. Cable, transceiver, switch port or the subnet manager."),
        Rule("InfinibandErrorsRising",
             f'(sum by (node, hca, port) (increase(slurmadm_ib_port_errors_total{{counter=~"{IB_ALERT_COUNTERS}"}}'
             f"[{w}])) > 0) or (max by (node, hca, port) (slurmadm_ib_port_saturated"
             f'{{counter=~"{IB_ALERT_COUNTERS}"}}) == 1)',
             ff, "warning", fabric, f"{{{{ $labels.node }}}} {{{{ $labels.hca }}}}: InfiniBand errors rising ({w}) "
             "or an error counter saturated",
             "Physical-layer error counters of the port rose in the window, or one sits at the maximum of its "
             "width (IBA PortCounters are 4-32 bits and stop there: a saturated counter can no longer rise, so it "
             "keeps this alert firing until the counters are cleared). A dirty or failing cable or transceiver."),
        Rule("HealthCheckFailing", f"max by (node, check) (slurmadm_health_check_failing{_not_observed(site)}) == 1",
             ff, "warning", node, "{{ $labels.node }}: health check {{ $labels.check }} failing",
             "The node's latest verdict of a slurmadm health check is fail or error. Checks that drain have "
             "drained the node already (slurmadm: <check> reason); the rest only report. Checks in observe "
             "mode (on_fail = \"observe\") never page: `slurmadm health observe` reports them."),
        Rule("NodeExporterDown", f'up{{job="{nj}"}} == 0', m.absent_for, "warning", node,
             "{{ $labels.node }}: the slurmadm node exporter does not answer",
             "Prometheus cannot scrape the node's slurmadm exporter: the node is down or the exporter stopped. "
             "Its GPU, fabric and health alerts are blind meanwhile."),
        Rule("NodeExporterAbsent", f'absent(up{{job="{nj}"}})', m.absent_for, "warning", node,
             f"no {nj} target is scraped",
             f"Prometheus has no target in the {nj} job: its configuration lost the scrape job or the targets."),
        Rule("ExporterSourceStale", "max by (job, node, source) (slurmadm_exporter_source_stale) == 1", m.absent_for,
             "warning", node, "{{ $labels.job }} {{ $labels.node }}: source {{ $labels.source }} stale (hung read?)",
             "An exporter's read of one source (NVML, sysfs, Slurm, the store) failed or ran past "
             "monitor.read_deadline_s: its metrics are the last good values, and alerts on them may be stale."),
        Rule("SlurmNodeDown", 'max by (node) (slurmadm_node_state{state="down"}) == 1', ff, "critical", cluster,
             "{{ $labels.node }}: Slurm has the node DOWN or NOT_RESPONDING",
             "slurmctld marks the node down or not responding: slurmd stopped answering (node crashed, network, "
             "munge) or an admin set it DOWN. Its jobs were requeued or failed; its GPU alerts are silenced "
             "meanwhile (Alertmanager inhibit rule)."),
        Rule("HeadExporterDown", f'up{{job="{hj}"}} == 0 or absent(up{{job="{hj}"}})', m.absent_for, "warning",
             cluster, "the slurmadm head exporter does not answer",
             "Prometheus cannot scrape the head exporter: cluster, queue, project and store metrics stop."),
        Rule("PartitionDrainedGpusHigh",
             'sum by (partition) (slurmadm_partition_gpus{status=~"drained|down"}) / '
             + ("sum by (partition) (slurm_partition_gpus)" if slurm_gpus else
                "sum by (partition) (slurmadm_partition_gpus)")
             + f" > {m.drained_fraction:g}", ff, "critical", cluster,
             f"partition {{{{ $labels.partition }}}}: over {m.drained_fraction:.0%} of GPUs drained or down",
             "More of the partition's GPUs are out of service than monitor.drained_fraction: slurmadm's safety "
             "valve stops draining more automatically; users queue longer."),
        Rule("ProjectAtQuota", "slurmadm_project_gpus_in_use >= on (project) slurmadm_project_gpu_quota",
             m.quota_for, "info", cluster, f"project {{{{ $labels.project }}}} at its GPU quota for {m.quota_for}",
             "The project's running jobs hold all the GPUs its quota allows; its further jobs pend with a QOS "
             "reason. Informational, unless the project says its quota is wrong."),
        Rule("FleetDrift", "slurmadm_fleet_drift_nodes > 0", "0s", "warning", cluster,
             "{{ $value }} nodes differ from the software baseline",
             "Nodes' driver, firmware, kernel or hashed files differ from the fleet baseline (`slurmadm fleet`)."),
        # the head exporter already counts only nodes silent past store.stale_after_minutes
        Rule("StoreNodesSilent", "slurmadm_store_silent_nodes > 0", "0s", "warning", cluster,
             f"{{{{ $value }}}} nodes have sent the central store nothing for over "
             f"{site.store.stale_after_minutes} min (a node down, or its shipper failing)",
             "Nodes' health records stopped arriving at the central store."),
    ]
    if slurm_metrics:
        sj = m.slurm_job
        out.append(Rule("SlurmMetricsDown", f'up{{job="{sj}"}} == 0 or absent(up{{job="{sj}"}})', m.absent_for,
                        "warning", cluster, "slurmctld's metrics ({{ $labels.endpoint }}) do not answer",
                        "Prometheus cannot scrape slurmctld's own metrics (MetricsType=metrics/openmetrics): "
                        "slurmctld is down or overloaded, MetricsType is not set, PrivateData turned them off, "
                        "or the JWT (monitor.slurm_metrics_token_file) expired. Partition, job and GPU counts "
                        "stop, and PartitionDrainedGpusHigh is blind."))
    out += burnin_rules(site) + hook_rules() + repair_rules(site)
    if m.host_port:
        hsel = f'job="{m.host_job}"'
        out += [
            Rule("HostOomKill", f"sum by (node) (increase(node_vmstat_oom_kill{{{hsel}}}[{w}])) > 0", "0s", "warning",
                 host, f"{{{{ $labels.node }}}}: the kernel OOM killer ran ({w})",
                 "The node ran out of memory and the kernel killed a process (node_exporter's "
                 "node_vmstat_oom_kill): a job's memory limit is above what the node has, or a daemon leaks."),
            Rule("HostEdacUncorrectable", f"sum by (node) (node_edac_uncorrectable_errors_total{{{hsel}}}) > 0", "0s",
                 "critical", host, "{{ $labels.node }}: {{ $value }} uncorrectable host memory (EDAC) errors",
                 "The memory controller reported uncorrectable DIMM errors since boot (node_exporter's EDAC "
                 "collector): data was lost; the DIMM needs replacing."),
            Rule("HostFilesystemNearlyFull",
                 f'100 * (1 - max by (node, mountpoint) (node_filesystem_avail_bytes{{{hsel}, fstype!~"{PSEUDO_FS}"}})'
                 f' / max by (node, mountpoint) (node_filesystem_size_bytes{{{hsel}, fstype!~"{PSEUDO_FS}"}})) '
                 f"> {m.fs_full_percent:g}", ff, "warning", host,
                 f"{{{{ $labels.node }}}} {{{{ $labels.mountpoint }}}} over {m.fs_full_percent:g}% full",
                 "A filesystem of the node is nearly full: jobs writing there fail, and a full / or /var stops "
                 "slurmd, logging and the prolog."),
        ]
        mounts = [mt.path for mt in site.health.mounts]
        if mounts:
            parts = [f'label_replace(count by (node) (node_filesystem_size_bytes{{{hsel}}}) unless on (node) '
                     f'count by (node) (node_filesystem_size_bytes{{{hsel}, mountpoint="{p}"}}), '
                     f'"mountpoint", "{p}", "", "")' for p in mounts]
            out.append(Rule("HostRequiredMountMissing", " or ".join(parts), ff, "critical", host,
                            "{{ $labels.node }}: {{ $labels.mountpoint }} is not mounted",
                            "A filesystem the site requires (health.mounts) is not mounted on the node: jobs "
                            "reading or writing there fail. The `mounts` health check drains for it."))
    if dcgm:
        out.append(Rule("DcgmExporterDown", f'up{{job="{m.dcgm_job}"}} == 0', m.absent_for, "warning", gpu,
                        "{{ $labels.node }}: dcgm-exporter does not answer",
                        "Prometheus cannot scrape the node's dcgm-exporter (monitor.gpu_source = \"dcgm\"): GPU "
                        "temperature, utilisation, PCIe and row-remap alerts are blind on the node."))
    return out


def hook_rules() -> list[Rule]:
    """Health hooks that cannot run (issue 25): with a broken site file the hooks let every job
    run, so health enforcement is off on those nodes (health/hookerror.py; the node exporter's
    slurmadm_health_enforcement_off, and slurmadm_hook_errors_total{reason} beside it)."""
    return [
        Rule("HealthEnforcementOff", "count(max by (node) (slurmadm_health_enforcement_off) == 1) > 0", "0s",
             "critical", "slurmadm-hooks",
             "health enforcement off on {{ $value }} nodes: their health hooks cannot load the site "
             "(`slurmadm health status` names them)",
             "The prolog, epilog and HealthCheckProgram on these nodes cannot load the site file (a syntax "
             "error, a non-UTF-8 byte, a missing install): they let every job run and drain nothing."),
    ]


def repair_rules(site: Site) -> list[Rule]:
    """A node in repair too long (issue 34): its oldest incident not closed opened more than
    `[repair].alert_after_h` ago (the head exporter's slurmadm_repair_node_since_timestamp_seconds)."""
    hours = site.repair.alert_after_h
    return [
        Rule("RepairTooLong", f"(time() - max by (node) (slurmadm_repair_node_since_timestamp_seconds)) > {hours * 3600:g}",
             "0s", "warning", "slurmadm-repair",
             f"{{{{ $labels.node }}}}: in repair for over {hours:g} h (`slurmadm repair history {{{{ $labels.node }}}}`)",
             "A hardware incident on the node has not closed within [repair].alert_after_h: the ladder is "
             "stuck (a qualification that never ends, a reboot that never came back) or the node waits for "
             "a person (an RMA candidate, a lemon)."),
        # issue 36: InfiniBand port faults on k+ nodes under one leaf switch (slurmadm/repair/leaf.py)
        Rule("SuspectLeafSwitch", 'sum(slurmadm_repair_incidents{class="LEAF"}) > 0', "0s", "warning",
             "slurmadm-repair",
             "{{ $value }} suspect leaf switch(es): InfiniBand port faults on several nodes under one leaf "
             "(`slurmadm repair status`, `slurmadm report leaves`)",
             "Port errors or link flaps on k or more nodes under one leaf switch within minutes: the common "
             "cause is the switch or its cables, not the nodes. slurmadm opened one LEAF incident and drained "
             "no node for it."),
    ]


def _hold_reasons() -> str:
    """The check ids of burn-in's holds for the next sweep (burnin/select.py), as a regex."""
    from ..burnin.select import DUE_CHECK, SUSPECT_CHECK

    return f"{SUSPECT_CHECK}|{DUE_CHECK}"


def burnin_rules(site: Site) -> list[Rule]:
    """Burn-in stragglers (burnin/fleet.py): a node that stays slower than its fleet, sweep after
    sweep, while it passes every check (the head exporter's slurmadm_burnin_slow_sweeps). It fires
    at burnin.straggler.drain_after sweeps in a row: where the sweep drains it, or where the
    breaker kept it in service."""
    n = site.burnin.straggler.drain_after
    return [
        Rule("BurninStraggler", f"max by (node) (slurmadm_burnin_slow_sweeps) >= {n}", "0s", "warning",
             "slurmadm-burnin", "{{ $labels.node }}: slower than the fleet in {{ $value }} burn-in sweeps in a row "
             "(passes every check; `slurmadm burnin history {{ $labels.node }}`)",
             "The node passes every burn-in check but its throughput or bandwidth stays below its hardware "
             "profile's fleet median (median and MAD, burnin.straggler): it slows every multi-node job it is in."),
        # a hold for the next sweep (burnin-suspect, burnin-due) opens no repair incident, so
        # RepairTooLong never sees it: idle and held past burnin.hold_alert_after_h, nothing tests it
        Rule("BurninHoldStuck", 'max by (node, reason) (slurmadm_node_state{owner="slurmadm", state="drained", '
             f'reason=~"{_hold_reasons()}"}}) == 1', f"{site.burnin.hold_alert_after_h:g}h", "warning",
             "slurmadm-burnin", "{{ $labels.node }}: held for the next burn-in sweep ({{ $labels.reason }}) and "
             f"idle for over {site.burnin.hold_alert_after_h:g} h: no sweep has tested it (`slurmadm burnin held`)",
             "Burn-in drained the node for the next sweep's test (a suspected straggler, or a node due for "
             "burn-in) and the next sweep takes such a node first, at any hour; it is still held and idle. "
             "The sweeps are not running (the cron entry or timer, a stale lock, burnin.reservation) or "
             "leave it out (`slurmadm burnin run --dry-run` says why). It serves no jobs meanwhile."),
    ]


def render(site: Site, release=None) -> str:
    rules = build(site, release)
    actions = dict(site.monitor.actions)
    groups: dict[str, list[dict]] = {}
    for r in rules:
        groups.setdefault(r.group, []).append(r.to_dict(actions, cluster=site.cluster.name,
                                                            runbook_base=site.monitor.runbook_base_url))
    doc = {"groups": [{"name": name, "rules": items} for name, items in groups.items()]}
    head = ("# Prometheus alert rules for the slurmadm exporters, generated by `slurmadm monitor rules`\n"
            f"# from the site {site.cluster.name} (site digest {site.digest[:12]}). Regenerate; don't edit.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)
