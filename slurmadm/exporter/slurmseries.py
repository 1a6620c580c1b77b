"""Which head-exporter series Slurm's own metrics replace (issue 38), as data with the source.

From 25.11 slurmctld serves OpenMetrics itself (`MetricsType=metrics/openmetrics`; GET
/metrics/jobs, /metrics/jobs-users-accts, /metrics/nodes, /metrics/partitions,
/metrics/scheduler on its own port), and 26.05 adds GPU counts. Where a release has Slurm's
series, the head exporter leaves its own out, so no count is exported twice; the alert rules and
the dashboard read Slurm's series there (monitor/rules.py, monitor/dashboard.py).

What Slurm does not have stays slurmadm's on every release: each node's state with its owned
drain reason (slurmadm_node_state, slurmadm_nodes_drained; Slurm counts drained nodes but names
neither node nor reason), node <-> partition membership, GPUs drained or down per partition,
pending jobs by reason, GPUs per project against its quota and budget, health verdicts, burn-in
and drift, and the job <-> GPU map (node exporter).

Sources: SchedMD's src/plugins/metrics/openmetrics/openmetrics.c (the metric names and labels;
25.11 and 26.05 branches) and doc/html/metrics.shtml; the names were checked against real pages
of Slurm 26.05.5 (Debian forky's slurmctld with metrics_openmetrics.so), captured in
tests/fixtures/slurm/26.05/metrics-*.txt (tests/fixtures/slurm/26.05/COMMANDS.txt says how).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, int]

# the endpoints the generated Prometheus configuration scrapes (metrics.shtml "HTTP Endpoints")
ENDPOINTS = ("/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler",
             "/metrics/jobs-users-accts")
SOURCE = "SchedMD slurm src/plugins/metrics/openmetrics/openmetrics.c; doc/html/metrics.shtml"


@dataclass(frozen=True)
class Replacement:
    series: str  # the head exporter's family
    status: str  # for slurmadm_partition_gpus: the one `status` label value replaced; "" = the family
    slurm: str  # Slurm's series (PromQL) that carries the same count
    endpoint: str
    since: Release
    note: str = ""

    @property
    def key(self) -> str:
        return f'{self.series}{{status="{self.status}"}}' if self.status else self.series


REPLACED: tuple[Replacement, ...] = (
    Replacement("slurmadm_jobs_running", "", "slurm_partition_jobs_running{partition}", "/metrics/partitions",
                (25, 11)),
    Replacement("slurmadm_nodes", "",
                "slurm_partition_nodes_{idle,alloc,mixed,down,drain,drained,draining,...}{partition}",
                "/metrics/partitions", (25, 11),
                "Slurm counts each state and flag (a node both IDLE and DRAIN is in both); slurmadm's per-node "
                "slurmadm_node_state stays"),
    Replacement("slurmadm_partition_gpus", "allocated", "slurm_partition_jobs_gpus_alloc{partition}",
                "/metrics/partitions", (26, 5), "the GPU counts arrive in 26.05"),
    Replacement("slurmadm_partition_gpus", "idle",
                "slurm_partition_gpus - slurm_partition_jobs_gpus_alloc - the drained and down GPUs (slurmadm)",
                "/metrics/partitions", (26, 5),
                "Slurm's total (slurm_partition_gpus) less its allocated GPUs and slurmadm's drained/down ones"),
)

# kept on every release, and why (`slurmadm doctor` and the how-to list them)
KEPT: tuple[tuple[str, str], ...] = (
    ("slurmadm_node_state", "per-node state with the drain's owner and reason: Slurm has neither per node"),
    ("slurmadm_nodes_drained", "drains by owner and reason (slurmadm check id or the admin's text)"),
    ("slurmadm_node_partition_info", "node <-> partition membership"),
    ('slurmadm_partition_gpus{status=~"drained|down"}', "GPUs out of service per partition"),
    ("slurmadm_jobs_pending", "pending jobs by reason (Slurm counts them per partition only)"),
    ("slurmadm_project_gpus_in_use / _gpu_quota / _gpu_used_seconds / _gpu_budget_seconds",
     "GPUs per project against the site's quota and budget"),
    ("slurmadm_store_* / slurmadm_burnin_* / slurmadm_fleet_drift_nodes", "health verdicts, burn-in, drift"),
    ("node exporter: slurmadm_gpu_* {jobid}", "the job <-> GPU map"),
)


def replaced(release: Release | None, enabled: bool = True) -> tuple[Replacement, ...]:
    """What Slurm `release` exports itself (None: unknown, nothing)."""
    if not enabled or release is None:
        return ()
    return tuple(r for r in REPLACED if release >= r.since)


def slurm_has(release: Release | None, since: Release, enabled: bool = True) -> bool:
    return enabled and release is not None and release >= since


def site_release(site, *, env=None, detect: bool = True) -> Release | None:
    """The Slurm release whose metrics the site's monitoring reads: None when monitor.slurm_metrics
    is off; slurm.release, else (auto) the installed Slurm; None when that cannot be told (the
    head exporter then exports everything, as before 25.11)."""
    from ..config.release import detect_release, parse_release
    from ..errors import SlurmadmError

    if not site.monitor.slurm_metrics:
        return None
    if site.slurm.release != "auto":
        return parse_release(site.slurm.release, what="slurm.release")
    if not detect:
        return None
    try:
        return detect_release(env)
    except SlurmadmError:
        return None


_SLURM = re.compile(r"\b(slurm_[a-z_]+)")
_SLURMADM = re.compile(r"\b(slurmadm_[a-z_]+)")


def sources(expr: str) -> str:
    """Whose series a PromQL expression reads, for a panel's or an alert's description: "Slurm
    (slurmctld /metrics)", "slurmadm", "dcgm-exporter", "node_exporter", "Prometheus (up)"."""
    out = []
    if _SLURM.search(expr):
        out.append("Slurm (slurmctld /metrics: " + ", ".join(sorted(set(_SLURM.findall(expr)))) + ")")
    if _SLURMADM.search(expr):
        out.append("slurmadm (" + ", ".join(sorted(set(_SLURMADM.findall(expr)))) + ")")
    if "DCGM_FI_" in expr:
        out.append("dcgm-exporter")
    if re.search(r"\bnode_[a-z]", expr):
        out.append("node_exporter")
    if re.search(r"\bup\{", expr) and not out:
        out.append("Prometheus (up)")
    return "; ".join(out)
