"""`slurmadm top`: the live terminal view (see slurmadm/top/)."""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty

import click

from .common import get_site, site_option
from .common import markup_console as console  # slurmadm.top builds its frame with escaped rich markup


@click.command("top")
@site_option
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=5.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print one frame and exit (no terminal needed).")
@click.option("--prometheus", metavar="URL", help="GPU utilisation from here (default: monitor.prometheus_url); "
              "'' for none.")
def top(site_file: str | None, interval: float, once: bool, prometheus: str | None) -> None:
    """A live view of the cluster in the terminal.

    Live view: nodes coloured by state and GPU utilisation, drains with reasons, the queue by
    reason, projects near quota. q quits."""
    from rich.live import Live

    from ..errors import SlurmadmError
    from ..exporter.head import SlurmHead
    from ..slurm import get_backend
    from ..top import build_frame, read_frame

    site = get_site(site_file)
    url = site.monitor.prometheus_url if prometheus is None else prometheus
    source = SlurmHead(get_backend(), timeout=30)
    if once or not sys.stdin.isatty():
        console.print(build_frame(site, read_frame(site, source, url), width=console.width))  # scrolls: whole
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        with Live(console=console, screen=True, auto_refresh=False, transient=True) as live:
            last = None
            while True:
                try:
                    last = read_frame(site, source, url)
                except SlurmadmError as exc:  # Slurm away for a moment: keep the last frame, say why
                    if last is None:
                        raise
                    last.error = f"Slurm: {exc} (showing {time.strftime('%H:%M:%S', time.localtime(last.at))})"
                live.update(build_frame(site, last, width=console.width, height=console.height), refresh=True)
                deadline = time.monotonic() + interval
                while (left := deadline - time.monotonic()) > 0:
                    ready, _, _ = select.select([fd], [], [], left)
                    if ready and os.read(fd, 1) in (b"q", b"Q"):
                        return
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
