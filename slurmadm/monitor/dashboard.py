"""`slurmadm monitor dashboard`: a Grafana dashboard (JSON model) over the slurmadm exporters.

Panels: a fleet heatmap of GPU utilisation and of temperature (node x GPU), node states, drains
by owner and reason, the queue by reason, per-project GPUs in use vs quota and GPU-hours vs
budget, and error panels (XIDs, ECC, row remaps, NVLink, PCIe replays, InfiniBand, failing
health checks, idle GPUs in jobs, stale exporter sources). Every panel's query is run against a
real Prometheus in the integration tests (`PANEL_QUERIES`).
"""

from __future__ import annotations

import json

from ..site import Site

# (title, kind, [(query, legend)], width) ; kind: heatmap | timeseries | table | stat | bargauge
PANELS: list[tuple[str, str, list[tuple[str, str]], int]] = [
    ("GPU utilisation by node and GPU", "heatmap",
     [("avg by (node, gpu) (slurmadm_gpu_utilization_percent)", "{{node}} GPU{{gpu}}")], 12),
    ("GPU temperature by node and GPU", "heatmap",
     [("max by (node, gpu) (slurmadm_gpu_temperature_celsius)", "{{node}} GPU{{gpu}}")], 12),
    ("Nodes by state", "bargauge", [("sum by (state) (slurmadm_node_state)", "{{state}}")], 8),
    ("Drained nodes by owner and reason", "table",
     [("sum by (owner, reason) (slurmadm_node_state{owner!=\"\"})", "{{owner}}: {{reason}}")], 8),
    ("GPUs per partition", "timeseries",
     [("sum by (partition, status) (slurmadm_partition_gpus)", "{{partition}} {{status}}")], 8),
    ("Queue: pending jobs by reason", "timeseries",
     [("sum by (reason) (slurmadm_jobs_pending) or vector(0)", "{{reason}}"),
      ("sum(slurmadm_jobs_running) or vector(0)", "running")], 12),
    ("Projects: GPUs in use vs quota", "bargauge",
     [("slurmadm_project_gpus_in_use / on (project) slurmadm_project_gpu_quota", "{{project}}")], 12),
    ("Projects: GPU-hours used vs budget", "bargauge",
     [("(slurmadm_project_gpu_used_seconds or on (project) (slurmadm_project_gpu_budget_seconds * 0)) "
       "/ on (project) slurmadm_project_gpu_budget_seconds", "{{project}}")], 12),
    ("GPU power (W)", "timeseries", [("sum by (node) (slurmadm_gpu_power_watts)", "{{node}}")], 12),
    ("XIDs in the health window", "table", [("max by (node, gpu) (slurmadm_gpu_last_xid)", "{{node}} GPU{{gpu}}")], 6),
    ("ECC errors (uncorrected, volatile)", "timeseries",
     [("sum by (node) (slurmadm_gpu_ecc_errors_total{type=\"uncorrected\", scope=\"volatile\"})", "{{node}}")], 6),
    ("Row remap failures / pending", "stat",
     [("sum(slurmadm_gpu_row_remap_failure)", "failed"), ("sum(slurmadm_gpu_row_remap_pending)", "pending")], 6),
    ("NVLink and PCIe errors (rate)", "timeseries",
     [("sum by (node) (rate(slurmadm_gpu_nvlink_errors_total[5m]))", "{{node}} NVLink"),
      ("sum by (node) (rate(slurmadm_gpu_pcie_replay_total[5m]))", "{{node}} PCIe replay")], 6),
    ("InfiniBand ports up / errors", "timeseries",
     [("sum by (node) (slurmadm_ib_port_up) or sum by (node) (slurmadm_gpus * 0)", "{{node}} ports up"),
      ("sum by (node) (rate(slurmadm_ib_port_errors_total[5m])) or sum by (node) (slurmadm_gpus * 0)",
       "{{node}} errors/s")], 12),
    ("Failing health checks", "table",
     [("sum by (node, check) (slurmadm_health_check_failing)", "{{node}} {{check}}")], 12),
    ("Idle GPUs in running jobs (minutes)", "table",
     [("max by (jobid, user, account, node) (slurmadm_gpu_job_idle_seconds) / 60 or vector(0)",
       "{{jobid}} {{user}}")], 12),
    ("Exporters: up and stale sources", "table",
     [("up{job=~\"$node_job|$head_job\"}", "{{job}} {{instance}}"),
      ("sum by (job, source) (slurmadm_exporter_source_stale)", "{{job}} {{source}}")], 12),
]


def panel_queries(site: Site) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query, with the dashboard variables substituted."""
    subs = {"$node_job": site.monitor.node_job, "$head_job": site.monitor.head_job}
    out = []
    for title, _kind, targets, _w in PANELS:
        for expr, _legend in targets:
            for k, v in subs.items():
                expr = expr.replace(k, v)
            out.append((title, expr))
    return out


def build(site: Site) -> dict:
    panels = []
    x = y = 0
    row_h = 8
    for pid, (title, kind, targets, width) in enumerate(PANELS, start=1):
        if x + width > 24:
            x, y = 0, y + row_h
        panel = {
            "id": pid, "title": title, "type": kind, "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": x, "y": y, "w": width, "h": row_h},
            "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend,
                         "format": "heatmap" if kind == "heatmap" else ("table" if kind == "table" else "time_series"),
                         "instant": kind in ("table", "bargauge", "stat")}
                        for i, (expr, legend) in enumerate(targets)],
        }
        if kind == "heatmap":
            panel["options"] = {"calculate": False, "yAxis": {"unit": "short"}}
        panels.append(panel)
        x += width
    m = site.monitor
    return {
        "title": f"slurmadm: {site.cluster.name}",
        "uid": f"slurmadm-{site.cluster.name}"[:40],
        "tags": ["slurmadm", "slurm", "gpu"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "node_job", "type": "constant", "query": m.node_job, "hide": 2},
            {"name": "head_job", "type": "constant", "query": m.head_job, "hide": 2},
        ]},
        "panels": panels,
    }


def render(site: Site) -> str:
    return json.dumps(build(site), indent=2, sort_keys=False) + "\n"
