"""Prometheus and Alertmanager configuration for the slurmadm exporters and webhook
(`slurmadm monitor prometheus-config`, `slurmadm monitor alertmanager-config`; the dev cluster's
stack uses the same builders with its own loopback targets)."""

from __future__ import annotations

from collections.abc import Callable

from ..site import Site


def _port(listen: str) -> str:
    return listen.rpartition(":")[2]


def prometheus_config(site: Site, *, rules_file: str, alertmanager: str,
                      node_target: Callable[[int, str], str] | None = None, head_target: str | None = None,
                      interval: str = "15s") -> dict:
    """Scrape jobs monitor.node_job (one target per site node, labelled node=<name>) and
    monitor.head_job, the rules file, and where alerts go."""
    m = site.monitor
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
            {"job_name": m.node_job, **auth, "static_configs": [
                {"targets": [node_target(i, n)], "labels": {"node": n}} for i, n in enumerate(site.node_names)]},
            {"job_name": m.head_job, **auth, "static_configs": [{"targets": [head_target]}]},
        ],
    }


def alertmanager_config(site: Site, *, webhook_url: str, token_file: str | None = None,
                        group_wait: str = "30s", group_interval: str = "1m") -> dict:
    """A route and receiver that send every slurmadm alert to the webhook (send_resolved, Bearer
    token from a file: it never appears in the configuration itself)."""
    return {
        "route": {"receiver": "slurmadm", "group_by": ["alertname", "node"], "group_wait": group_wait,
                  "group_interval": group_interval, "repeat_interval": "4h"},
        "receivers": [{"name": "slurmadm", "webhook_configs": [{
            "url": webhook_url, "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer",
                                              "credentials_file": token_file or site.monitor.webhook_token_file}}}]}],
    }
