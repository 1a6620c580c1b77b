"""`slurmadm exporter`: the Prometheus exporters (see slurmadm/exporter/)."""

from __future__ import annotations

import os

import click

from ..errors import UsageError
from .common import Group, console, dry_run_option, get_site, info, reason_option, site_option


@click.group(cls=Group, invoke_without_command=True)
@click.option("--mode", type=click.Choice(["node", "head"]), help="node: a compute node's GPUs, InfiniBand, "
              "host, health verdicts and GPU->job map; head: the cluster as Slurm sees it.")
@click.option("--listen", metavar="ADDR:PORT", help="Default: monitor.node_listen / monitor.head_listen.")
@click.option("--node", help="node mode: act as this Slurm node (default: $SLURMD_NODENAME, then the host name).")
@click.option("--web-config-file", "web_config", metavar="FILE",
              help="exporter-toolkit web config (TLS, basic auth). Default: monitor.web_config_file.")
@site_option
@click.pass_context
def exporter(ctx: click.Context, mode: str | None, listen: str | None, node: str | None, web_config: str | None,
             site_file: str | None) -> None:
    """Prometheus exporters for the compute nodes and the head.

    Serve Prometheus metrics: `slurmadm exporter --mode node|head [--listen ADDR:PORT]`."""
    if ctx.invoked_subcommand is not None:
        return
    if mode is None:
        raise UsageError("exporter: --mode node|head is required (or: exporter install --mode ...)")
    from ..exporter import head_collector, node_collector
    from ..exporter.server import make_server, parse_listen, serve_forever
    from ..health.hook import local_node

    if listen is not None:
        parse_listen(listen)  # a bad address is a usage error before anything is read
    site = get_site(site_file)
    from ..exporter import webconfig

    web = webconfig.load(web_config or site.monitor.web_config_file)  # a bad file: one line, before any read
    if mode == "node":
        name = local_node(node)
        if name not in site.node_group_of:
            raise UsageError(f"--node: {name!r} is not one of the site's nodes {site.all_nodes}")
        collector = node_collector(site, name)
        listen = listen or site.monitor.node_listen
    else:
        collector = head_collector(site)
        listen = listen or site.monitor.head_listen
    server = make_server(collector, listen, web=web)
    info(f"slurmadm exporter ({mode}) on {'https' if web and web.tls else 'http'}://{listen}/metrics"
         + (" (basic auth)" if web and web.users else ""))
    serve_forever(server)


@exporter.command("install")
@click.option("--mode", type=click.Choice(["node", "head"]), required=True)
@click.option("--dest", metavar="DIR", help="Write the unit here instead of /etc/systemd/system.")
@site_option
@dry_run_option
@reason_option("install the slurmadm exporter service")
def install(mode: str, dest: str | None, site_file: str | None, dry_run: bool, reason: str) -> None:
    """Write the systemd unit slurmadm-exporter-<mode>.service (then: systemctl enable --now it)."""
    from ..units import PlannedFile, slurmadm_command
    from ..units import install as install_files
    from ..exporter.server import unit_path, unit_text
    from ..sitefile import site_path
    from ..store import Store

    site = get_site(site_file)
    path = str(site_path(site_file).resolve())
    environment = {k: os.environ[k] for k in ("SLURM_CONF",) if mode == "head" and os.environ.get(k)}
    command = [*slurmadm_command(), "exporter", "--mode", mode, "--site", path]
    planned = PlannedFile(unit_path(mode, dest), unit_text(mode, command, path, environment))
    status = planned.status()
    console.print(f"{planned.path}: {status}")
    if dry_run:
        if status != "unchanged":
            console.print(planned.text, markup=False, highlight=False)
        return
    if status != "unchanged":
        with Store.for_site(site) as store:
            install_files([planned], store, action="exporter.install", reason=reason, mode=mode)
    info(f"then: systemctl daemon-reload && systemctl enable --now slurmadm-exporter-{mode}")
