"""Site model: monitoring (`slurmadm exporter`, `slurmadm monitor`, `slurmadm jobs idle`, `slurmadm top`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .profiles import Strict

Email = Annotated[str, Field(pattern=r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}$")]
AlertName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]
JobName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")]
ListenAddr = Annotated[str, Field(pattern=r"^[0-9A-Za-z.\-:\[\]]+:\d{1,5}$")]


class MonitorSection(Strict):
    # Where the exporters listen (`slurmadm exporter --mode node|head`, default --listen).
    # The defaults are what the roles need: Prometheus scrapes both exporters over the network
    # (the head's by controllers[0]'s name); the webhook below only hears the head's Alertmanager.
    node_listen: ListenAddr = "0.0.0.0:9410"
    head_listen: ListenAddr = "0.0.0.0:9411"
    # TLS and basic auth for the exporters (TLS only for the webhook, which keeps its bearer
    # token): a Prometheus exporter-toolkit web config file, as node_exporter's --web.config.file.
    web_config_file: Annotated[str, Field(pattern=r"^/")] | None = None
    # How the generated Prometheus configuration scrapes them then (`slurmadm monitor
    # prometheus-config`): https verified with this CA, basic auth with this user and password file.
    scrape_ca_file: Annotated[str, Field(pattern=r"^/")] | None = None
    scrape_username: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] | None = None  # basic auth user
    scrape_password_file: Annotated[str, Field(pattern=r"^/")] | None = None  # its password, a root-only file
    # A source (NVML, sysfs, the store, Slurm) is read at most once per this many seconds; a
    # scrape in between answers from the last read.
    node_cache_s: Annotated[float, Field(ge=0, le=3600)] = 5.0
    head_cache_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    # A read that has not answered within this many seconds is abandoned: the scrape answers
    # with the last good values, marked stale (slurmadm_exporter_source_stale).
    read_deadline_s: Annotated[float, Field(gt=0, le=120)] = 3.0
    # InfiniBand ports are read from <sysfs_root>/class/infiniband ({node}: the node's name);
    # unset: health.sysfs_root where the site has one, else /sys.
    sysfs_root: Annotated[str, Field(pattern=r"^/")] | None = None
    # The prolog records which job holds which GPUs here (one file per job, removed by the epilog).
    job_map_dir: Annotated[str, Field(pattern=r"^/")] = "/run/slurmadm/jobs"
    # Prometheus that `slurmadm jobs idle` and `slurmadm top` ask (http://host:port).
    prometheus_url: Annotated[str, Field(pattern=r"^https?://[0-9A-Za-z.\-:\[\]]+(/[A-Za-z0-9._/\-]*)?$")] = (
        "http://127.0.0.1:9090"
    )
    # Alert rules: job label of the exporters' scrape jobs, thresholds and `for` durations.
    node_job: JobName = "slurmadm-node"
    head_job: JobName = "slurmadm-head"
    gpu_temp_c: Annotated[int, Field(ge=30, le=150)] = 85
    gpu_temp_for: Annotated[str, Field(pattern=r"^\d+[smh]$")] = "5m"
    error_rise_window: Annotated[str, Field(pattern=r"^\d+[smh]$")] = "15m"
    drained_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1
    quota_for: Annotated[str, Field(pattern=r"^\d+[smh]$")] = "1h"
    absent_for: Annotated[str, Field(pattern=r"^\d+[smh]$")] = "5m"
    # Alerts the webhook acts on: alert name -> "drain" (isolate the node the alert names).
    actions: dict[AlertName, Literal["drain", "none"]] = {
        "GpuXidFatal": "drain",
        "GpuEccUncorrected": "drain",
        "GpuRowRemapFailure": "drain",
        "InfinibandLinkDown": "drain",
    }
    # The webhook (`slurmadm monitor webhook`): listen address, a root-only token file (the
    # Alertmanager sends `Authorization: Bearer <token>`), and the largest request it reads.
    webhook_listen: ListenAddr = "127.0.0.1:9412"
    webhook_token_file: Annotated[str, Field(pattern=r"^/")] = "/etc/slurmadm/webhook.token"
    webhook_max_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    # How often the webhook looks whether a node whose alert resolved has had its clean health runs.
    resume_check_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # Idle GPUs in running jobs (Princeton jobstats / job_defense_shield): a GPU is idle while
    # every sample is at or under idle_util_percent; a job is reported after idle_minutes.
    idle_util_percent: Annotated[float, Field(ge=0, le=100)] = 0.0
    idle_minutes: Annotated[float, Field(gt=0, le=10080)] = 60.0
    # report: list and alert only; mail: also mail the user (mail_command, once per job);
    # cancel: mail, then scancel after idle_cancel_after_minutes more idle minutes.
    idle_action: Literal["report", "mail", "cancel"] = "report"
    idle_cancel_after_minutes: Annotated[float, Field(ge=0, le=10080)] = 60.0
    idle_exempt_interactive: bool = True
    idle_exempt_partitions: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-.]+$")]] = []
    mail_command: Annotated[str, Field(pattern=r"^/")] = "/usr/bin/mail"
    # Where GPU telemetry comes from. "slurmadm": slurmadm's node exporter (NVML). "dcgm": NVIDIA's
    # dcgm-exporter, which the site already runs: rules, dashboard, `top` and `jobs idle` read its
    # names and labels (DCGM_FI_DEV_*, gpu, UUID, Hostname, modelName, hpc_job), and slurmadm's
    # node exporter keeps only what dcgm-exporter's default counters lack (health verdicts, XID
    # classes, ECC, NVLink errors and links, clock events, InfiniBand, host). README "Monitoring".
    gpu_source: Literal["slurmadm", "dcgm"] = "slurmadm"
    dcgm_job: JobName = "dcgm-exporter"   # Prometheus job of the dcgm-exporter scrape
    dcgm_port: Annotated[int, Field(ge=1, le=65535)] = 9400  # dcgm-exporter's port on every node
    # dcgm-exporter's --hpc-job-mapping-dir: the prolog writes one file per GPU index holding the
    # ids of the jobs on it ({node}: the node's name, for the dev cluster's fake nodes). Written
    # when gpu_source is "dcgm" or this key is set.
    dcgm_job_map_dir: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/{}\-]*$")] = "/run/slurmadm/dcgm-jobs"
    # Prometheus' node_exporter (host alerts: OOM kills, EDAC, filesystems, required mounts):
    # its scrape job (one target per node at host_port, labelled node=<name>); 0: not scraped.
    host_job: JobName = "node-exporter"
    host_port: Annotated[int, Field(ge=0, le=65535)] = 9100
    fs_full_percent: Annotated[float, Field(gt=0, lt=100)] = 90.0
    # Alertmanager's receiver for people (beside the webhook, which gets every alert): mail to
    # people_email_to through people_smarthost (HOST:PORT), and/or a Slack-compatible chat
    # webhook (Slack, Mattermost, Rocket.Chat) whose URL is in a root-only file (it holds a
    # secret: the configuration names only the file). Only people_severities reach people.
    people_email_to: list[Email] = []
    people_email_from: Email = "slurmadm@localhost.localdomain"  # the From: of mail to people
    people_smarthost: Annotated[str, Field(pattern=r"^[0-9A-Za-z.\-\[\]:]+:\d{1,5}$")] = "localhost:25"
    people_chat_url_file: Annotated[str, Field(pattern=r"^/[^\x00\n]*$")] | None = None
    people_severities: list[Literal["critical", "warning", "info"]] = ["critical", "warning"]
    # `for:` of the alerts a single sample could flap (error counters rising, an XID seen, a
    # failing check, node state, throttling).
    flap_for: Annotated[str, Field(pattern=r"^\d+[smh]$")] = "2m"
    # Every alert's runbook_url is <runbook_base_url>/<Alert>.md (the runbooks are docs/runbooks
    # in slurmadm's source: point this at where the site serves them, a wiki or a web view).
    runbook_base_url: Annotated[str, Field(pattern=r"^(https?://|file:///|/)[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]*$")] = (
        "file:///usr/share/doc/slurmadm/runbooks"
    )

    # Slurm's own metrics (Slurm 25.11 and later; docs/how-to/slurm-metrics.md): slurmctld serves
    # OpenMetrics on its port (MetricsType=metrics/openmetrics), Prometheus scrapes it as
    # slurm_job, and the head exporter stops exporting the series Slurm now has
    # (exporter/slurmseries.py). false: neither, on any release.
    slurm_metrics: bool = True
    slurm_job: JobName = "slurm"
    # Authentication (26.05; docs/how-to/slurm-metrics.md): MetricsAuthUsers=<these users>
    # (SlurmUser and root always may; each a user slurmctld's host knows). `config` then also
    # writes AuthAltTypes=auth/jwt and the key below for Slurm's JWTs and its HTTP listener, and
    # Prometheus sends the JWT in slurm_metrics_token_file as `Authorization: Bearer`
    # (`slurmadm monitor slurm-token` writes it: `scontrol token username=<first user>`).
    # Empty: no authentication (Slurm's default without PrivateData). The three keys go together.
    slurm_metrics_users: list[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_\-]{0,31}$")]] = []
    slurm_metrics_token_file: Annotated[str, Field(pattern=r"^/")] | None = None
    # slurmctld's HS256 key, on the controller only (AuthAltParameters and
    # SlurmctldHttpAuthParameters jwt_key=): owner root or SlurmUser, mode 0600. A path, never the
    # key itself; `slurmadm monitor slurm-token --make-key` creates it when missing.
    slurm_metrics_jwt_key_file: Annotated[str, Field(pattern=r"^/[^\x00\n,=\s]*$")] | None = None
    # With PrivateData in slurm.extra, 26.05 answers only SlurmUser and root: true writes
    # MetricsParameters=ignore_private_data (the counts readable without authentication).
    slurm_metrics_ignore_private_data: bool = False

    @model_validator(mode="after")
    def _slurm_metrics_auth(self):
        keys = {"slurm_metrics_users": bool(self.slurm_metrics_users),
                "slurm_metrics_token_file": self.slurm_metrics_token_file is not None,
                "slurm_metrics_jwt_key_file": self.slurm_metrics_jwt_key_file is not None}
        if any(keys.values()) and not all(keys.values()):
            missing = ", ".join(k for k, v in keys.items() if not v)
            raise ValueError(f"authenticated Slurm metrics need slurm_metrics_users, slurm_metrics_token_file and "
                             f"slurm_metrics_jwt_key_file together (MetricsAuthUsers, the JWT Prometheus sends, "
                             f"slurmctld's key); missing: {missing}")
        if self.slurm_metrics_jwt_key_file is not None and \
                self.slurm_metrics_jwt_key_file == self.slurm_metrics_token_file:
            raise ValueError("slurm_metrics_jwt_key_file and slurm_metrics_token_file must be different files (the "
                             "key signs tokens and stays on the controller; the token goes to Prometheus)")
        return self

    @model_validator(mode="after")
    def _scrape_auth(self):
        if (self.scrape_username is None) != (self.scrape_password_file is None):
            raise ValueError("scrape_username and scrape_password_file go together (Prometheus's basic_auth)")
        return self
