"""`slurmadm burnin install-schedule`: the nightly sweep as a cron.d entry or a systemd
service + timer, rendered from templates/burnin/*.j2 and written atomically."""

from __future__ import annotations

import os
import re
from pathlib import Path

import jinja2

from ..errors import UsageError
from ..resources import templates_dir
from ..site import Site
from ..site.accounts import slurm_time_seconds
from ..units import CRON_DIR, SYSTEMD_DIR, PlannedFile, slurmadm_command

UNIT = "slurmadm-burnin"
__all__ = ["CRON_DIR", "SYSTEMD_DIR", "UNIT", "PlannedFile", "cron_to_oncalendar", "plan",
           "slurmadm_command"]
DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
_NUM = r"\d{1,2}"


def _field(text: str, what: str, lo: int, hi: int, *, day_names: bool = False) -> str:
    """One cron field -> systemd calendar syntax (lists, ranges a-b -> a..b, steps */n -> lo/n)."""
    if text == "*":
        return "*"
    out = []
    for part in text.split(","):
        m = re.fullmatch(rf"(\*|{_NUM}(?:-{_NUM})?)(?:/(\d{{1,2}}))?", part)
        if not m:
            raise UsageError(f"burnin.schedule: {what} field {text!r} is not plain cron (numbers, a-b, */n, lists)")
        base, step = m.group(1), m.group(2)
        if base == "*":
            base = str(lo)
            if day_names:
                raise UsageError(f"burnin.schedule: {what} field {text!r}: steps over weekdays are not supported")
        nums = [int(x) for x in base.split("-")]
        if any(not lo <= n <= hi for n in nums):
            raise UsageError(f"burnin.schedule: {what} field {text!r} is outside {lo}-{hi}")
        if day_names:
            item = "..".join(DAYS[n] for n in nums)
        else:
            item = "..".join(str(n) for n in nums)
        out.append(item + (f"/{step}" if step else ""))
    return ",".join(out)


def cron_to_oncalendar(expr: str) -> str:
    minute, hour, dom, month, dow = expr.split()
    if dom != "*" and dow != "*":
        raise UsageError("burnin.schedule: cron runs when day-of-month OR weekday match, a systemd timer "
                         "when both do; use one of them (or --cron)")
    m = _field(minute, "minute", 0, 59)
    h = _field(hour, "hour", 0, 23)
    d = _field(dom, "day-of-month", 1, 31)
    mo = _field(month, "month", 1, 12)
    w = _field(dow, "weekday", 0, 7, day_names=True)
    return (f"{w} " if w != "*" else "") + f"*-{mo}-{d} {h}:{m}:00"


def plan(site: Site, site_file: str, *, kind: str, dest: str | None = None) -> list[PlannedFile]:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    b = site.burnin
    ctx = {
        "schedule": b.schedule,
        "command": [*slurmadm_command(), "burnin", "run", "--site", str(Path(site_file).resolve())],
        "environment": {k: os.environ[k] for k in ("SLURM_CONF",) if os.environ.get(k)},
        "log": f"{b.report_dir}/cron.log",
        "report_dir": b.report_dir,
        # systemd stops a sweep that overruns its own limit by 10 minutes (it cleans up on SIGTERM)
        "timeout_s": (slurm_time_seconds(b.sweep_time_limit) or 0) + 600,
        "unit": UNIT,
    }
    if kind == "cron":
        root = Path(dest or CRON_DIR)
        return [PlannedFile(root / UNIT, env.get_template("burnin/cron.j2").render(**ctx))]
    ctx["on_calendar"] = cron_to_oncalendar(b.schedule)
    root = Path(dest or SYSTEMD_DIR)
    return [PlannedFile(root / f"{UNIT}.service", env.get_template("burnin/systemd.service.j2").render(**ctx)),
            PlannedFile(root / f"{UNIT}.timer", env.get_template("burnin/systemd.timer.j2").render(**ctx))]
