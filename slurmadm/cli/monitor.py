"""`slurmadm monitor`: alert rules, dashboard, the Alertmanager webhook, the dev cluster's stack."""

from __future__ import annotations

import logging
import shutil

import click

from ..errors import UsageError
from ..proc import run
from .common import Group, console, get_site, info, json_option, print_json, progress, site_option


@click.group(cls=Group)
def monitor() -> None:
    """Alert rules, a dashboard, and the webhook that isolates nodes.

    Prometheus alert rules, a Grafana dashboard, and the webhook that isolates nodes on alerts."""


def _write(text: str, out: str | None, what: str) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    from ..files import write_atomic

    from pathlib import Path

    write_atomic(Path(out), text)
    info(f"{what}: wrote {out}")


def release_option(fn):
    return click.option(
        "--release", metavar="X.Y", default=None,
        help="Slurm release to write for (default: slurm.release; 'auto' asks the installed Slurm). From 25.11 "
             "Slurm's own metrics are read where they exist (monitor.slurm_metrics).")(fn)


def _release(site, release: str | None):
    from ..config.release import parse_release
    from ..exporter.slurmseries import site_release

    if release:
        return parse_release(release) if site.monitor.slurm_metrics else None
    return site_release(site)


@monitor.command("rules")
@release_option
@site_option
@click.option("--out", metavar="FILE", help="Write here (default: stdout).")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check the rules with `promtool check rules` (when promtool is installed).")
def rules_cmd(site_file: str | None, out: str | None, check: bool, release: str | None) -> None:
    """Prometheus alert rules from the site (thresholds and actions under [monitor])."""
    import tempfile

    from ..monitor import rules

    site = get_site(site_file)
    text = rules.render(site, _release(site, release))
    if check and shutil.which("promtool"):
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as fh:
            fh.write(text)
            fh.flush()
            proc = run(["promtool", "check", "rules", fh.name], check=False, timeout=60)
        if proc.returncode != 0:
            raise UsageError(f"promtool check rules refused the generated rules: {proc.stdout.strip()} "
                             f"{proc.stderr.strip()}")
    _write(text, out, "rules")


@monitor.command("dashboard")
@release_option
@site_option
@click.option("--out", metavar="FILE", help="Write here (default: stdout).")
def dashboard_cmd(site_file: str | None, out: str | None, release: str | None) -> None:
    """A Grafana dashboard (JSON model) over the slurmadm exporters (and Slurm's own metrics from 25.11)."""
    from ..monitor import dashboard

    site = get_site(site_file)
    _write(dashboard.render(site, _release(site, release)), out, "dashboard")


@monitor.command("prometheus-config")
@release_option
@site_option
@click.option("--rules-file", default="/etc/prometheus/rules/slurmadm.yml", show_default=True,
              help="Where `monitor rules --out` put the rules.")
@click.option("--alertmanager", default="127.0.0.1:9093", show_default=True, metavar="HOST:PORT")
@click.option("--out", metavar="FILE", help="Write here (default: stdout).")
def prometheus_config_cmd(site_file: str | None, rules_file: str, alertmanager: str, out: str | None,
                          release: str | None) -> None:
    """A prometheus.yml: the node exporter of every site node (labelled node=...), the head
    exporter on the first controller, slurmctld's own metrics (Slurm 25.11+), the rules, the
    Alertmanager."""
    import yaml

    from ..monitor import promconfig

    site = get_site(site_file)
    cfg = promconfig.prometheus_config(site, rules_file=rules_file, alertmanager=alertmanager,
                                       release=_release(site, release))
    _write("# written by `slurmadm monitor prometheus-config`\n" + yaml.safe_dump(cfg, sort_keys=False), out,
           "prometheus config")


@monitor.command("alertmanager-config")
@site_option
@click.option("--webhook-url", metavar="URL", help="Default: http://<monitor.webhook_listen>/alerts.")
@click.option("--out", metavar="FILE", help="Write here (default: stdout).")
def alertmanager_config_cmd(site_file: str | None, webhook_url: str | None, out: str | None) -> None:
    """An alertmanager.yml route + receiver that sends slurmadm's alerts to the webhook (token by file)."""
    import yaml

    from ..monitor import promconfig

    site = get_site(site_file)
    url = webhook_url or f"http://{site.monitor.webhook_listen}/alerts"
    _write("# written by `slurmadm monitor alertmanager-config`\n"
           + yaml.safe_dump(promconfig.alertmanager_config(site, webhook_url=url), sort_keys=False), out,
           "alertmanager config")


@monitor.command("slurm-token")
@site_option
@click.option("--lifespan-days", type=click.FloatRange(min=1 / 1440, max=3650), default=30.0, show_default=True,
              help="How long the token is valid (renew it before: a cron job or a systemd timer).")
@click.option("--group", metavar="GROUP", help="Make the token file 0640 with this group (Prometheus's); default 0600.")
@click.option("--make-key", is_flag=True, help="Create monitor.slurm_metrics_jwt_key_file first when missing "
              "(random, 0600, owned by SlurmUser); slurmctld must then be restarted before a token can be made.")
@json_option
def slurm_token_cmd(site_file: str | None, lifespan_days: float, group: str | None, make_key: bool,
                    as_json: bool) -> None:
    """Write the JWT Prometheus sends to Slurm 26.05's metrics (monitor.slurm_metrics_token_file).

    Runs `scontrol token username=<first of monitor.slurm_metrics_users>` as root on the controller
    and writes the token to the file, never to the screen. Prometheus reads the file at every scrape."""
    import time

    from ..slurm import jwt

    site = get_site(site_file)
    m = site.monitor
    if not m.slurm_metrics_users:
        raise UsageError("monitor.slurm_metrics_users is empty: Slurm's metrics need no token here")
    made = False
    if make_key:
        made = jwt.make_key(m.slurm_metrics_jwt_key_file, owner=site.slurm_user)
        if made:
            info(f"made {m.slurm_metrics_jwt_key_file} (0600, {site.slurm_user}); restart slurmctld, then run "
                 "this again without --make-key")
    if not made:
        token = jwt.fetch_token(m.slurm_metrics_users[0], lifespan_s=int(lifespan_days * 86400))
        jwt.write_token(m.slurm_metrics_token_file, token, group=group)
        exp = jwt.claims(token).get("exp")
        until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(exp)) if isinstance(exp, int) else "?"
        info(f"wrote the JWT of {m.slurm_metrics_users[0]} to {m.slurm_metrics_token_file} (valid until {until})")
    if as_json:
        print_json({"key_made": made, "token_file": None if made else m.slurm_metrics_token_file,
                    "user": m.slurm_metrics_users[0]})


@monitor.command("webhook")
@site_option
@click.option("--listen", metavar="ADDR:PORT", help="Default: monitor.webhook_listen.")
def webhook_cmd(site_file: str | None, listen: str | None) -> None:
    """Alertmanager webhook receiver: drains the node of an alert the site maps to "drain",
    resumes it on resolved (only its own drains). Token from monitor.webhook_token_file."""
    from ..exporter.server import serve_forever
    from ..monitor.webhook import Isolator, make_server, read_token
    from ..slurm import get_backend
    from ..store import Store

    site = get_site(site_file)
    m = site.monitor
    token = read_token(m.webhook_token_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from ..store import read

    isolator = Isolator(site=site, backend=get_backend(), store_factory=lambda: Store.for_site(site),
                        results_factory=(lambda: read.trusted(site)) if site.store.url else None)
    from ..exporter import webconfig

    web = webconfig.load(m.web_config_file)
    server = make_server(listen or m.webhook_listen, token=token, max_bytes=m.webhook_max_bytes, isolator=isolator,
                         web=web)
    info(f"slurmadm monitor webhook on {'https' if web and web.tls else 'http'}://{listen or m.webhook_listen}/alerts")
    start_sweeper(isolator, m.resume_check_s)
    serve_forever(server)


def start_sweeper(isolator, every_s: float) -> None:
    """Finish pending resumes (resolved alerts waiting for clean health runs) in the background."""
    import threading
    import time

    log = logging.getLogger("slurmadm.monitor.webhook")

    def loop() -> None:
        while True:
            time.sleep(every_s)  # a period, not a wait for a condition
            try:
                for r in isolator.sweep():
                    if r["why"] == "resumed":
                        log.warning("webhook: %s resumed", r["node"])
            except Exception as exc:  # noqa: BLE001 - Slurm or the store away: next period
                log.error("webhook: resume check: %s", exc)

    threading.Thread(target=loop, daemon=True, name="slurmadm-webhook-resume").start()


@monitor.group("dev-stack", cls=Group)
def dev_stack() -> None:
    """Prometheus, Alertmanager, the exporters and the webhook on a dev cluster (ports from its port base)."""


def _stack(state_dir: str | None, gpu_source: str | None = None):
    from ..devcluster.cluster import DevCluster, default_state_dir
    from ..monitor.stack import MonitorStack

    return MonitorStack(DevCluster(state_dir or default_state_dir()), gpu_source=gpu_source)


_state = click.option("--state-dir", metavar="DIR", help="The dev cluster's state directory.")


@dev_stack.command("up")
@_state
@click.option("--gpu-source", type=click.Choice(["slurmadm", "dcgm"]),
              help="GPU telemetry from slurmadm's exporter or a stand-in dcgm-exporter (a real capture); "
                   "default: the dev site's monitor.gpu_source.")
@json_option
def stack_up(state_dir: str | None, gpu_source: str | None, as_json: bool) -> None:
    status = _stack(state_dir, gpu_source).up(progress=progress)
    if as_json:
        print_json(status)
    else:
        for k, v in status["urls"].items():
            console.print(f"{k:16} {v}")


@dev_stack.command("down")
@_state
def stack_down(state_dir: str | None) -> None:
    for name in _stack(state_dir).down():
        progress(f"stopped {name}")


@dev_stack.command("status")
@_state
@json_option
def stack_status(state_dir: str | None, as_json: bool) -> None:
    status = _stack(state_dir).status()
    if as_json:
        print_json(status)
        return
    for d in status["daemons"]:
        console.print(f"{d['name']:32} {'up' if d['alive'] else 'down'}")
