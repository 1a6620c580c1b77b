"""Prometheus and Alertmanager configuration for the slurmadm exporters and webhook
(`slurmadm monitor prometheus-config`, `slurmadm monitor alertmanager-config`; the dev cluster's
stack uses the same builders with its own loopback targets)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from ..site import Site


def _port(listen: str) -> str:
    return listen.rpartition(":")[2]


def slurm_scrape_config(site: Site, release, *, target: str | None = None) -> list[dict]:
    """Slurm's own metrics (25.11+, monitor.slurm_metrics): one job (monitor.slurm_job) with one
    target per slurmctld endpoint on the first controller's SlurmctldPort, labelled
    endpoint=<jobs|nodes|...> (`__metrics_path__` per target); with monitor.slurm_metrics_users
    (26.05) the JWT from monitor.slurm_metrics_token_file as a Bearer token. [] otherwise."""
    from ..config.release import METRICS_FROM
    from ..exporter.slurmseries import ENDPOINTS, slurm_has

    m = site.monitor
    if not slurm_has(release, METRICS_FROM, m.slurm_metrics):
        return []
    target = target or f"{site.cluster.controllers[0]}:{site.slurm.slurmctld_port}"
    job: dict = {"job_name": m.slurm_job, "static_configs": [
        {"targets": [target], "labels": {"cluster": site.cluster.name, "endpoint": path.rsplit("/", 1)[1],
                                         "__metrics_path__": path}} for path in ENDPOINTS]}
    if m.slurm_metrics_token_file:
        job["authorization"] = {"type": "Bearer", "credentials_file": m.slurm_metrics_token_file}
    return [job]


def prometheus_config(site: Site, *, rules_file: str, alertmanager: str,
                      node_target: Callable[[int, str], str] | None = None, head_target: str | None = None,
                      interval: str = "15s", dcgm_target: Callable[[int, str], str] | None = None,
                      release=None, slurm_target: str | None = None) -> dict:
    """Scrape jobs monitor.node_job (one target per site node, labelled node=<name>) and
    monitor.head_job, the rules file, and where alerts go; node_exporter (monitor.host_job, when
    monitor.host_port) and dcgm-exporter (monitor.dcgm_job, gpu_source "dcgm") per node, each
    target labelled node=<name> (dcgm-exporter's series keep their own Hostname); slurmctld's own
    metrics where `release` (the target Slurm) has them (slurm_scrape_config)."""
    m = site.monitor
    c = site.cluster.name  # every target carries cluster=<name> (the dashboard's cluster variable)
    node_target = node_target or (lambda _i, name: f"{name}:{_port(m.node_listen)}")
    head_target = head_target or f"{site.cluster.controllers[0]}:{_port(m.head_listen)}"
    auth: dict = {}  # the exporters behind an exporter-toolkit web config (monitor.web_config_file)
    if m.scrape_ca_file:
        auth.update(scheme="https", tls_config={"ca_file": m.scrape_ca_file})
    if m.scrape_username:
        auth["basic_auth"] = {"username": m.scrape_username, "password_file": m.scrape_password_file}
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": interval if interval.endswith("s") and int(interval[:-1]) <= 10 else "10s"},
        "rule_files": [rules_file],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            # honor_labels: the exporter sets `node` itself; the target's `node` label (which `up`
            # carries) would otherwise rename the exporter's to `exported_node` on every series
            {"job_name": m.node_job, "honor_labels": True, **auth, "static_configs": [
                {"targets": [node_target(i, n)], "labels": {"cluster": c, "node": n}} for i, n in enumerate(site.node_names)]},
            {"job_name": m.head_job, **auth, "static_configs": [{"targets": [head_target], "labels": {"cluster": c}}]},
            *([{"job_name": m.host_job, "static_configs": [
                {"targets": [f"{n}:{m.host_port}"], "labels": {"cluster": c, "node": n}} for n in site.node_names]}]
              if m.host_port else []),
            *([{"job_name": m.dcgm_job, "static_configs": [
                {"targets": [(dcgm_target or (lambda _i, name: f"{name}:{m.dcgm_port}"))(i, n)],
                 "labels": {"cluster": c, "node": n}}
                for i, n in enumerate(site.node_names)]}] if m.gpu_source == "dcgm" else []),
            *slurm_scrape_config(site, release, target=slurm_target),
        ],
    }


# While a node is down (Slurm) its GPU, fabric, health and exporter alerts say nothing new.
NODE_DOWN_SILENCES = ("Gpu.*|Infiniband.*|HealthCheckFailing|ExporterSourceStale|NodeExporterDown|DcgmExporterDown|"
                      "Host.*")
CHAT_URL = re.compile(r"^https?://[A-Za-z0-9.\-]+(:\d{1,5})?(/[A-Za-z0-9._~%/+\-]*)?$")


def check_chat_url_file(path: str) -> None:
    """The chat webhook URL file holds one http(s) URL: a UsageError naming the file (never the
    URL, a secret) otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"monitor.people_chat_url_file {path}: cannot read ({exc.strerror or exc})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1 or not CHAT_URL.match(lines[0].strip()):
        raise UsageError(f"monitor.people_chat_url_file {path}: not one http(s) URL on one line")


def alertmanager_config(site: Site, *, webhook_url: str, token_file: str | None = None,
                        group_wait: str = "30s", group_interval: str = "1m", check_files: bool = True) -> dict:
    """Every alert to the webhook (send_resolved, Bearer token from a file: it never appears in
    the configuration itself); the severities in monitor.people_severities also to people (mail,
    a Slack-compatible chat webhook whose URL stays in its file), critical re-sent hourly;
    inhibit rules: a node Slurm has down silences that node's GPU, fabric, health and exporter
    alerts, and a GPU's drain-class XID its lesser XID alerts."""
    m = site.monitor
    group_by = ["alertname", "cluster", "node"]
    receivers: list[dict] = [{"name": "slurmadm", "webhook_configs": [{
        "url": webhook_url, "send_resolved": True,
        "http_config": {"authorization": {"type": "Bearer",
                                          "credentials_file": token_file or m.webhook_token_file}}}]}]
    routes: list[dict] = [{"receiver": "slurmadm", "continue": True}]
    people: dict = {"name": "people"}
    if m.people_email_to:
        people["email_configs"] = [{"to": ", ".join(m.people_email_to), "from": m.people_email_from,
                                    "smarthost": m.people_smarthost, "send_resolved": True}]
    if m.people_chat_url_file:
        if check_files:
            check_chat_url_file(m.people_chat_url_file)
        people["slack_configs"] = [{"api_url_file": m.people_chat_url_file, "send_resolved": True,
                                    "title": '[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} '
                                             '{{ .CommonLabels.cluster }} {{ .CommonLabels.node }}',
                                    "text": "{{ range .Alerts }}{{ .Annotations.summary }}\n"
                                            "{{ .Annotations.runbook_url }}\n{{ end }}"}]
    if len(people) > 1:
        receivers.append(people)
        repeat = {"critical": "1h", "warning": "4h", "info": "24h"}
        for sev in m.people_severities:
            routes.append({"receiver": "people", "matchers": [f'severity="{sev}"'], "repeat_interval": repeat[sev]})
    return {
        "route": {"receiver": "slurmadm", "group_by": group_by, "group_wait": group_wait,
                  "group_interval": group_interval, "repeat_interval": "4h", "routes": routes},
        "inhibit_rules": [
            {"source_matchers": ['alertname="SlurmNodeDown"'],
             "target_matchers": [f'alertname=~"{NODE_DOWN_SILENCES}"'], "equal": ["cluster", "node"]},
            {"source_matchers": ['alertname="GpuXidFatal"'],
             "target_matchers": ['alertname=~"GpuXidSeen|GpuXidApplication"'], "equal": ["cluster", "node", "gpu"]},
        ],
        "receivers": receivers,
    }
