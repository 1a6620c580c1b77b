"""`slurmadm monitor dashboard`: a Grafana dashboard over the slurmadm exporters (and, with
monitor.gpu_source = "dcgm", NVIDIA's dcgm-exporter), built with Grafana Labs' typed builders
(grafana-foundation-sdk) rather than hand-written JSON.

Variables: datasource, cluster (every scrape target carries cluster=<name>), partition (the head
exporter's slurmadm_node_partition_info) and node (the partition's nodes). Rows drill down:
fleet (GPUs by status, nodes by state, the utilisation distribution, queue, projects, and CPU,
memory, GPU memory, power and InfiniBand throughput per partition) -> partition (the same per
node of $partition) -> node (per GPU and per port of $node, errors, health checks). Every panel
has a unit and thresholds (fieldConfig); the heatmap is calculated by Grafana from time series
(no `format: heatmap`, a histogram-bucket format, on gauges). Every query is run against a real
Prometheus in the integration tests (`panel_queries`), and the SDK's models read the JSON back
(tests/unit/monitor/test_dashboard.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..site import Site

# (value, colour) steps; the first value is None (-Infinity)
GOOD_HIGH = [(None, "red"), (15, "orange"), (50, "green")]  # utilisation: low is waste
BAD_HIGH = [(None, "green"), (1, "red")]  # errors: any is bad
TEMP = [(None, "green"), (75, "orange"), (85, "red")]
FRACTION = [(None, "green"), (0.8, "orange"), (1, "red")]
NEUTRAL = [(None, "blue")]


@dataclass(frozen=True)
class P:
    """One panel: its kind, unit, thresholds and [(PromQL, legend)]."""

    title: str
    kind: str  # timeseries | stat | bargauge | table | heatmap
    unit: str
    steps: list
    targets: list[tuple[str, str]]
    width: int = 8
    instant: bool = False
    description: str = ""


class Names:
    """The GPU series of the site's GPU source, with `node` as the node label either way."""

    def __init__(self, site: Site):
        self.dcgm = site.monitor.gpu_source == "dcgm"

    def gpu(self, what: str, sel: str = "", rate: str = "") -> str:
        """A per-GPU series (labels node, gpu), filtered by the node selector `sel` (without braces);
        rate: the rate over this window (of a counter)."""
        slurmadm = {"util": "slurmadm_gpu_utilization_percent", "temp": "slurmadm_gpu_temperature_celsius",
                    "power": "slurmadm_gpu_power_watts", "fb_used": "slurmadm_gpu_memory_used_bytes",
                    "pcie": "slurmadm_gpu_pcie_replay_total"}
        dcgm = {"util": "DCGM_FI_DEV_GPU_UTIL", "temp": "DCGM_FI_DEV_GPU_TEMP", "power": "DCGM_FI_DEV_POWER_USAGE",
                "fb_used": "DCGM_FI_DEV_FB_USED", "pcie": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}
        def r(series: str) -> str:
            return f"rate({series}[{rate}])" if rate else series

        if not self.dcgm:
            return r(f"{slurmadm[what]}{{{sel}}}")
        # dcgm-exporter names the node `Hostname`; FB_USED is in MiB
        s = sel.replace("node=~", "Hostname=~")
        expr = f'label_replace({r(f"{dcgm[what]}{{{s}}}")}, "node", "$1", "Hostname", "(.*)")'
        return f"({expr} * 1048576)" if what == "fb_used" else expr


def _panels(site: Site, release=None) -> list[tuple[str, list[P]]]:
    """`release`: the target Slurm; where it exports a count itself (25.11: jobs and node states
    per partition, 26.05: GPUs per node and partition) the panels read Slurm's series
    (exporter/slurmseries.py), and every panel's description names its source."""
    from ..config.release import METRICS_FROM
    from ..exporter.slurmseries import slurm_has

    n = Names(site)
    c = 'cluster=~"$cluster"'
    slurm_jobs = slurm_has(release, METRICS_FROM, site.monitor.slurm_metrics)
    slurm_gpus = slurm_has(release, (26, 5), site.monitor.slurm_metrics)
    nodes = f'{c}, node=~"$node"'
    part_info = f'slurmadm_node_partition_info{{{c}, partition=~"$partition"}}'
    node_info = f'slurmadm_node_partition_info{{{c}, partition=~"$partition", node=~"$node"}}'

    def per_part(node_expr: str) -> str:
        """A per-node value summed per partition (a node in two partitions counts in both)."""
        return f"sum by (partition) ({part_info} * on (node) group_left () ({node_expr}))"

    def per_node(node_expr: str) -> str:
        """A per-node value for the nodes of $partition."""
        return f"max by (node) ({node_info} * on (node) group_left () ({node_expr}))"

    cpu_busy = (f'sum by (node) (rate(slurmadm_node_cpu_seconds_total{{{c}, mode!~"idle|iowait"}}[$__rate_interval]))'
                f" / sum by (node) (slurmadm_node_cpus{{{c}}})")
    mem_used = (f"sum by (node) (slurmadm_node_memory_total_bytes{{{c}}} - "
                f"slurmadm_node_memory_available_bytes{{{c}}})")
    gpu_mem = f"sum by (node) ({n.gpu('fb_used', c)})"
    power = f"sum by (node) ({n.gpu('power', c)})"
    ib = f"sum by (node) (rate(slurmadm_ib_port_data_bytes_total{{{c}}}[$__rate_interval]))"
    util = f"avg by (node) ({n.gpu('util', c)})"
    if slurm_gpus:
        # per node (a node in two partitions counts once): Slurm's GPU counts, split by slurmadm's
        # node states (Slurm has no per-node state)
        def by_state(value: str, states: str, op: str = "=~") -> str:
            return (f"sum(sum by (node) ({value}) * on (node) group_left () "
                    f'max by (node) (slurmadm_node_state{{{c}, state{op}"{states}"}})) or vector(0)')

        free = f"slurm_node_gpus{{{c}}} - slurm_node_gpus_alloc{{{c}}}"
        gpus_by_status = P("GPUs by status", "bargauge", "short", NEUTRAL, [
            (f"sum(slurm_node_gpus_alloc{{{c}}}) or vector(0)", "allocated"),
            (by_state(free, "drained|draining"), "drained"),
            (by_state(f"slurm_node_gpus{{{c}}}", "down"), "down"),
            (by_state(free, "drained|draining|down", "!~"), "idle"),
        ], 6, True, "Allocated GPUs are Slurm's count; drained, down and idle are Slurm's GPUs split by the "
                    "node states slurmadm exports (with its drain owner and reason).")
    else:
        gpus_by_status = P("GPUs by status", "bargauge", "short", NEUTRAL,
                           [(f"sum by (status) (slurmadm_partition_gpus{{{c}}})", "{{status}}")], 6, True)
    running = (f"sum(slurm_jobs_running{{{c}}}) or vector(0)" if slurm_jobs else
               f"sum(slurmadm_jobs_running{{{c}}}) or vector(0)")
    fleet = [
        gpus_by_status,
        P("Nodes by state", "bargauge", "short", NEUTRAL,
          [(f"sum by (state) (slurmadm_node_state{{{c}}})", "{{state}}")], 6, True),
        P("Fleet GPU utilisation (distribution over nodes)", "heatmap", "percent", GOOD_HIGH,
          [(util, "{{node}}")], 12, description="Each node's mean GPU utilisation; Grafana buckets the series."),
        P("Queue: pending jobs by reason", "timeseries", "short", NEUTRAL,
          [(f"sum by (reason) (slurmadm_jobs_pending{{{c}}}) or vector(0)", "{{reason}}"),
           (running, "running")], 8),
        P("Projects: GPUs in use / quota", "bargauge", "percentunit", FRACTION,
          [(f"slurmadm_project_gpus_in_use{{{c}}} / on (project) slurmadm_project_gpu_quota{{{c}}}", "{{project}}")],
          8, True),
        P("Projects: GPU time used / budget", "bargauge", "percentunit", FRACTION,
          [(f"(slurmadm_project_gpu_used_seconds{{{c}}} or on (project) "
            f"(slurmadm_project_gpu_budget_seconds{{{c}}} * 0)) / on (project) slurmadm_project_gpu_budget_seconds"
            f"{{{c}}}", "{{project}}")], 8, True),
        P("GPU utilisation per partition", "timeseries", "percent", GOOD_HIGH,
          [(f"avg by (partition) ({part_info} * on (node) group_left () ({util}))", "{{partition}}")], 8),
        P("CPU busy per partition", "timeseries", "percentunit", NEUTRAL,
          [(f"avg by (partition) ({part_info} * on (node) group_left () ({cpu_busy}))", "{{partition}}")], 8),
        P("Memory used per partition", "timeseries", "bytes", NEUTRAL, [(per_part(mem_used), "{{partition}}")], 8),
        P("GPU memory used per partition", "timeseries", "bytes", NEUTRAL, [(per_part(gpu_mem), "{{partition}}")], 8),
        P("GPU power per partition", "timeseries", "watt", NEUTRAL, [(per_part(power), "{{partition}}")], 8),
        P("InfiniBand throughput per partition", "timeseries", "Bps", NEUTRAL, [(per_part(ib), "{{partition}}")], 8),
    ]
    partition = [
        P("GPU utilisation by node ($partition)", "timeseries", "percent", GOOD_HIGH,
          [(per_node(util), "{{node}}")], 8),
        P("GPU memory used by node", "timeseries", "bytes", NEUTRAL, [(per_node(gpu_mem), "{{node}}")], 8),
        P("GPU power by node", "timeseries", "watt", NEUTRAL, [(per_node(power), "{{node}}")], 8),
        P("CPU busy by node", "timeseries", "percentunit", NEUTRAL, [(per_node(cpu_busy), "{{node}}")], 8),
        P("Memory used by node", "timeseries", "bytes", NEUTRAL, [(per_node(mem_used), "{{node}}")], 8),
        P("InfiniBand throughput by node", "timeseries", "Bps", NEUTRAL, [(per_node(ib), "{{node}}")], 8),
        P("Drained nodes by owner and reason", "table", "short", NEUTRAL,
          [(f'sum by (owner, reason) (slurmadm_node_state{{{c}, owner!=""}}) or vector(0)', "{{owner}}: {{reason}}")],
          12, True),
        P("Failing health checks", "table", "short", BAD_HIGH,
          [(f"sum by (node, check) (slurmadm_health_check_failing{{{nodes}}})", "{{node}} {{check}}")], 12, True),
    ]
    node = [
        P("GPU utilisation ($node)", "timeseries", "percent", GOOD_HIGH,
          [(f"max by (node, gpu) ({n.gpu('util', nodes)})", "{{node}} GPU{{gpu}}")], 8),
        P("GPU temperature", "timeseries", "celsius", TEMP,
          [(f"max by (node, gpu) ({n.gpu('temp', nodes)})", "{{node}} GPU{{gpu}}")], 8),
        P("GPU power", "timeseries", "watt", NEUTRAL,
          [(f"max by (node, gpu) ({n.gpu('power', nodes)})", "{{node}} GPU{{gpu}}")], 8),
        P("GPU memory used", "timeseries", "bytes", NEUTRAL,
          [(f"max by (node, gpu) ({n.gpu('fb_used', nodes)})", "{{node}} GPU{{gpu}}")], 8),
        P("InfiniBand / RoCE port throughput", "timeseries", "Bps", NEUTRAL,
          [(f"sum by (node, hca, port, direction) (rate(slurmadm_ib_port_data_bytes_total{{{nodes}}}"
            f"[$__rate_interval]))", "{{node}} {{hca}}:{{port}} {{direction}}")], 8),
        P("InfiniBand transmit wait (congestion)", "timeseries", "short", NEUTRAL,
          [(f"sum by (node, hca, port) (rate(slurmadm_ib_port_transmit_wait_total{{{nodes}}}[$__rate_interval]))",
            "{{node}} {{hca}}:{{port}}")], 8),
        P("XIDs in the health window (by class)", "table", "short", BAD_HIGH,
          [(f"max by (node, gpu, class) (slurmadm_gpu_xid_class_last{{{nodes}}})", "{{node}} GPU{{gpu}} {{class}}")],
          8, True),
        P("ECC errors (uncorrected, volatile)", "timeseries", "short", BAD_HIGH,
          [(f'sum by (node) (slurmadm_gpu_ecc_errors_total{{{nodes}, type="uncorrected", scope="volatile"}})',
            "{{node}}")], 8),
        P("NVLink and PCIe errors", "timeseries", "short", BAD_HIGH,
          [(f"sum by (node) (rate(slurmadm_gpu_nvlink_errors_total{{{nodes}}}[$__rate_interval]))", "{{node}} NVLink"),
           (f"sum by (node) ({n.gpu('pcie', nodes, '$__rate_interval')})", "{{node}} PCIe replay")], 8),
        P("InfiniBand ports up / errors", "timeseries", "short", NEUTRAL,
          [(f"sum by (node) (slurmadm_ib_port_up{{{nodes}}})", "{{node}} ports up"),
           (f"sum by (node) (rate(slurmadm_ib_port_errors_total{{{nodes}}}[$__rate_interval]))", "{{node}} errors/s")],
          12),
        P("Exporters: up and stale sources", "table", "short", BAD_HIGH,
          [(f'up{{{c}, job=~"$node_job|$head_job"}}', "{{job}} {{instance}}"),
           (f"sum by (job, source) (slurmadm_exporter_source_stale{{{c}}})", "{{job}} {{source}}")], 12, True),
    ]
    repair = [
        P("Hardware incidents open, by class and state", "bargauge", "short", BAD_HIGH,
          [(f"sum by (class, state) (slurmadm_repair_incidents{{{c}}}) or vector(0)", "{{class}} {{state}}")], 12, True,
          description="slurmadm repair: incidents not closed (repair status)."),
        P("Nodes in repair: time since the oldest open incident", "table", "s", BAD_HIGH,
          [(f"time() - max by (node) (slurmadm_repair_node_since_timestamp_seconds{{{c}}}) or vector(0)", "{{node}}")], 12, True,
          description="An alert (RepairTooLong) fires past [repair].alert_after_h."),
    ]
    cost = [
        P("GPU-hours today, by what they went to", "bargauge", "short", NEUTRAL,
          [(f"max by (kind) (slurmadm_gpu_time_today_seconds{{{c}, kind!~\"out_.+:.*|allocated|total\"}}) / 3600",
            "{{kind}}")],
          12, True, description="slurmadm report reliability, the day so far: completed runs, failed runs by "
                                "verdict (jobs failures), nodes out of service, idle. Recomputed every 10 min."),
        P("Failed job runs today, by verdict", "stat", "short", BAD_HIGH,
          [(f"max by (verdict) (slurmadm_failed_job_runs_today{{{c}}})", "{{verdict}}")], 6, True,
          description="infrastructure: a node signal within 10 min before or 5 min after the run's end."),
        P("ETTR today", "stat", "percentunit", [(None, "red"), (0.8, "orange"), (0.95, "green")],
          [(f"max(slurmadm_ettr_today{{{c}}})", "ETTR")], 6, True,
          description="Effective training time ratio (Meta, HPCA 2025); a failed run's whole time counts as lost."),
    ]
    return [("Fleet", fleet), ("Repair", repair), ("Fault cost", cost), ("Partition $partition", partition),
            ("Node $node", node)]


def _described(p: P) -> P:
    """The panel with its source named (exporter/slurmseries.sources) after its description."""
    from dataclasses import replace

    from ..exporter.slurmseries import sources

    named = sources(" ".join(expr for expr, _ in p.targets))
    text = f"{p.description} Source: {named}." if p.description else f"Source: {named}."
    return replace(p, description=text)


def panels(site: Site, release=None) -> list[tuple[str, list[P]]]:
    return [(row, [_described(p) for p in ps]) for row, ps in _panels(site, release)]


def _subs(site: Site) -> dict[str, str]:
    """What the dashboard's variables stand for when the integration test runs the queries: every
    cluster, partition and node."""
    return {"$node_job": site.monitor.node_job, "$head_job": site.monitor.head_job, "$cluster": ".*",
            "$partition": ".*", "$node": ".*", "$__rate_interval": "1m"}


def panel_queries(site: Site, release=None) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query, with the dashboard variables substituted."""
    out = []
    for _row, row_panels in _panels(site, release):
        for p in row_panels:
            for expr, _legend in p.targets:
                for k, v in _subs(site).items():
                    expr = expr.replace(k, v)
                out.append((p.title, expr))
    return out


def build(site: Site, release=None):
    """The dashboard builder (grafana_foundation_sdk)."""
    from grafana_foundation_sdk.builders import bargauge, heatmap, stat, table, timeseries
    from grafana_foundation_sdk.builders.dashboard import (ConstantVariable, Dashboard, DatasourceVariable,
                                                           QueryVariable, Row, ThresholdsConfig)
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.models.common import TimeZoneBrowser
    from grafana_foundation_sdk.models.dashboard import (DataSourceRef, Threshold, ThresholdsMode,
                                                         VariableRefresh)

    kinds = {"timeseries": timeseries.Panel, "stat": stat.Panel, "bargauge": bargauge.Panel, "table": table.Panel,
             "heatmap": heatmap.Panel}
    from ..config.release import METRICS_FROM
    from ..exporter.slurmseries import slurm_has

    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    m = site.monitor

    def var(name: str, label: str, query: str) -> QueryVariable:
        return (QueryVariable(name).label(label).datasource(ds).query(query).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                .multi(True).include_all(True).all_value(".*"))

    d = (Dashboard(f"slurmadm: {site.cluster.name}")
         .uid(f"slurmadm-{site.cluster.name}"[:40])
         .tags(["slurmadm", "slurm", "gpu", m.gpu_source])
         .refresh("30s").time("now-6h", "now").timezone(TimeZoneBrowser)
         .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
         .with_variable(var("cluster", "cluster", "label_values(slurmadm_node_partition_info, cluster)"
                            if slurm_has(release, METRICS_FROM, m.slurm_metrics) else
                            "label_values(slurmadm_nodes, cluster)"))
         .with_variable(var("partition", "partition",
                            'label_values(slurmadm_node_partition_info{cluster=~"$cluster"}, partition)'))
         .with_variable(var("node", "node", 'label_values(slurmadm_node_partition_info{cluster=~"$cluster", '
                                            'partition=~"$partition"}, node)'))
         .with_variable(ConstantVariable("node_job").value(m.node_job))
         .with_variable(ConstantVariable("head_job").value(m.head_job)))
    for row, row_panels in panels(site, release):
        d = d.with_row(Row(row))
        for p in row_panels:
            b = (kinds[p.kind]().title(p.title).datasource(ds).unit(p.unit).span(p.width).height(8)
                 .thresholds(ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE)
                             .steps([Threshold(value=v, color=col) for v, col in p.steps])))
            if p.description:
                b = b.description(p.description)
            if p.kind == "heatmap":
                b = b.calculate(True)  # Grafana buckets the time series itself
            if p.unit in ("percent",):
                b = b.min(0).max(100)
            for i, (expr, legend) in enumerate(p.targets):
                q = Dataquery().expr(expr).legend_format(legend).ref_id(chr(65 + i))
                q = q.instant() if p.instant else q.range()
                if p.kind == "table":
                    q = q.format("table")
                b = b.with_target(q)
            d = d.with_panel(b)
    return d


def to_dict(site: Site, release=None) -> dict:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    return json.loads(json.dumps(build(site, release).build(), cls=JSONEncoder))


def render(site: Site, release=None) -> str:
    return json.dumps(to_dict(site, release), indent=2, sort_keys=False) + "\n"
