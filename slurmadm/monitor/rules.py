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

    def to_dict(self, actions: dict[str, str]) -> dict:
        out: dict = {"alert": self.name, "expr": self.expr}
        if self.for_ and self.for_ != "0s":
            out["for"] = self.for_
        labels = {"severity": self.severity, "source": "slurmadm"}
        if actions.get(self.name) == "drain":
            labels["slurmadm_action"] = "drain"
        out["labels"] = labels
        out["annotations"] = {"summary": self.summary}
        return out


def build(site: Site) -> list[Rule]:
    m = site.monitor
    nj, hj = m.node_job, m.head_job
    w = m.error_rise_window
    idle_s = int(m.idle_minutes * 60)
    gpu = "slurmadm-gpu"
    fabric = "slurmadm-fabric"
    node = "slurmadm-node"
    cluster = "slurmadm-cluster"
    return [
        Rule("GpuOverTemperature", f"max by (node, gpu) (slurmadm_gpu_temperature_celsius) > {m.gpu_temp_c}",
             m.gpu_temp_for, "warning", gpu,
             f"{{{{ $labels.node }}}} GPU{{{{ $labels.gpu }}}} above {m.gpu_temp_c} C for {m.gpu_temp_for}"),
        Rule("GpuXidSeen", "max by (node, gpu) (slurmadm_gpu_last_xid) > 0", "0s", "warning", gpu,
             "{{ $labels.node }} GPU{{ $labels.gpu }} logged XID {{ $value }}"),
        Rule("GpuXidFatal", "max by (node, gpu) (slurmadm_gpu_xid_fatal) == 1", "0s", "critical", gpu,
             "{{ $labels.node }} GPU{{ $labels.gpu }}: an XID NVIDIA's catalog says to drain for"),
        Rule("GpuEccUncorrected",
             'max by (node, gpu) (slurmadm_gpu_ecc_errors_total{type="uncorrected", scope="volatile"}) > 0', "0s",
             "critical", gpu, "{{ $labels.node }} GPU{{ $labels.gpu }}: {{ $value }} uncorrected ECC errors"),
        Rule("GpuRowRemapFailure", "max by (node, gpu) (slurmadm_gpu_row_remap_failure) == 1", "0s", "critical", gpu,
             "{{ $labels.node }} GPU{{ $labels.gpu }}: row remapping failed"),
        Rule("GpuNvlinkErrorsRising", f"sum by (node, gpu) (increase(slurmadm_gpu_nvlink_errors_total[{w}])) > 0",
             "0s", "warning", gpu, f"{{{{ $labels.node }}}} GPU{{{{ $labels.gpu }}}}: NVLink errors rising ({w})"),
        Rule("GpuPcieReplayRising", f"sum by (node, gpu) (increase(slurmadm_gpu_pcie_replay_total[{w}])) > 0",
             "0s", "warning", gpu, f"{{{{ $labels.node }}}} GPU{{{{ $labels.gpu }}}}: PCIe replays rising ({w})"),
        Rule("GpuJobIdle", f"min by (node, jobid, user, account) (slurmadm_gpu_job_idle_seconds) > {idle_s}", "0s",
             "info", gpu, "job {{ $labels.jobid }} ({{ $labels.user }}/{{ $labels.account }}) keeps its GPUs on "
             f"{{{{ $labels.node }}}} idle for over {m.idle_minutes:g} min"),
        Rule("GpuUsedWithoutAllocation", "max by (node, gpu) (slurmadm_gpu_unallocated_in_use) == 1", "0s",
             "warning", gpu,
             "{{ $labels.node }} GPU{{ $labels.gpu }} is in use (processes or utilisation) "
             "but no job was allocated it"),
        Rule("InfinibandLinkDown", "min by (node, hca, port) (slurmadm_ib_port_up) == 0", "0s", "critical", fabric,
             "{{ $labels.node }} {{ $labels.hca }} port {{ $labels.port }} is not ACTIVE/LinkUp"),
        Rule("InfinibandErrorsRising",
             f"sum by (node, hca, port) (increase(slurmadm_ib_port_errors_total{{counter=~\"symbol_error|"
             f"link_error_recovery|link_downed|port_rcv_errors|local_link_integrity_errors\"}}[{w}])) > 0",
             "0s", "warning", fabric, f"{{{{ $labels.node }}}} {{{{ $labels.hca }}}}: InfiniBand errors rising ({w})"),
        Rule("HealthCheckFailing", "max by (node, check) (slurmadm_health_check_failing) == 1", "0s", "warning", node,
             "{{ $labels.node }}: health check {{ $labels.check }} failing"),
        Rule("NodeExporterDown", f'up{{job="{nj}"}} == 0', m.absent_for, "warning", node,
             "{{ $labels.node }}: the slurmadm node exporter does not answer"),
        Rule("NodeExporterAbsent", f'absent(up{{job="{nj}"}})', m.absent_for, "warning", node,
             f"no {nj} target is scraped"),
        Rule("ExporterSourceStale", "max by (job, node, source) (slurmadm_exporter_source_stale) == 1", m.absent_for,
             "warning", node, "{{ $labels.job }} {{ $labels.node }}: source {{ $labels.source }} stale (hung read?)"),
        Rule("HeadExporterDown", f'up{{job="{hj}"}} == 0 or absent(up{{job="{hj}"}})', m.absent_for, "warning",
             cluster, "the slurmadm head exporter does not answer"),
        Rule("PartitionDrainedGpusHigh",
             'sum by (partition) (slurmadm_partition_gpus{status=~"drained|down"}) / '
             f"sum by (partition) (slurmadm_partition_gpus) > {m.drained_fraction:g}", "0s", "critical", cluster,
             f"partition {{{{ $labels.partition }}}}: over {m.drained_fraction:.0%} of GPUs drained or down"),
        Rule("ProjectAtQuota", "slurmadm_project_gpus_in_use >= on (project) slurmadm_project_gpu_quota",
             m.quota_for, "info", cluster, f"project {{{{ $labels.project }}}} at its GPU quota for {m.quota_for}"),
        Rule("FleetDrift", "slurmadm_fleet_drift_nodes > 0", "0s", "warning", cluster,
             "{{ $value }} nodes differ from the software baseline"),
        # the head exporter already counts only nodes silent past store.stale_after_minutes
        Rule("StoreNodesSilent", "slurmadm_store_silent_nodes > 0", "0s", "warning", cluster,
             f"{{{{ $value }}}} nodes have sent the central store nothing for over "
             f"{site.store.stale_after_minutes} min (a node down, or its shipper failing)"),
    ] + burnin_rules(site)


def burnin_rules(site: Site) -> list[Rule]:
    """Burn-in stragglers (burnin/fleet.py): a node that stays slower than its fleet, sweep after
    sweep, while it passes every check (the head exporter's slurmadm_burnin_slow_sweeps). It fires
    at burnin.straggler.drain_after sweeps in a row: where the sweep drains it, or where the
    breaker kept it in service."""
    n = site.burnin.straggler.drain_after
    return [
        Rule("BurninStraggler", f"max by (node) (slurmadm_burnin_slow_sweeps) >= {n}", "0s", "warning",
             "slurmadm-burnin", "{{ $labels.node }}: slower than the fleet in {{ $value }} burn-in sweeps in a row "
             "(passes every check; `slurmadm burnin history {{ $labels.node }}`)"),
    ]


def render(site: Site) -> str:
    rules = build(site)
    actions = dict(site.monitor.actions)
    groups: dict[str, list[dict]] = {}
    for r in rules:
        groups.setdefault(r.group, []).append(r.to_dict(actions))
    doc = {"groups": [{"name": name, "rules": items} for name, items in groups.items()]}
    head = ("# Prometheus alert rules for the slurmadm exporters, generated by `slurmadm monitor rules`\n"
            f"# from the site {site.cluster.name} (site digest {site.digest[:12]}). Regenerate; don't edit.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)
