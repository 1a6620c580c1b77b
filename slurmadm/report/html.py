"""The reliability report as a page (jinja2, autoescaped, no scripts, no network): a stacked column
per day of the fleet's GPU-hours (inline SVG laid out here), then the weeks, MTBF, MTTR, ETTR with
its assumptions, and the nodes that cost most. The first line is also the page title."""

from __future__ import annotations

import datetime as dt
from typing import Any

import jinja2

from ..resources import templates_dir

# What a day's GPU-hours went to, bottom to top, with its colour.
STACK = (("completed", "completed runs", "#2e7d32"), ("lost_infrastructure", "lost: infrastructure", "#c62828"),
         ("lost_unknown", "lost: unknown", "#8e24aa"), ("lost_user", "lost: user", "#ef8f00"),
         ("other", "other runs (cancelled, timeout, running)", "#90a4ae"),
         ("out_of_service", "nodes out of service", "#5d4037"), ("idle", "idle", "#e0e0e0"))
CHART_H = 220
COL_W = 22
GAP = 6
LEFT = 44
BOTTOM = 48
TOP = 12  # room above the plot for the 100% label


def headline(rep: dict[str, Any]) -> str:
    t = rep["totals"]
    lost = t.get("lost_infrastructure", 0.0)
    alloc = t.get("allocated", 0.0)
    share = f" ({100 * lost / alloc:.1f}% of allocated)" if alloc else ""
    ettr = rep["ettr"]["value"]
    return (f"{len(rep['days'])} days, {rep['nodes']} nodes: {lost:,.1f} GPU-h lost to infrastructure{share}, "
            f"{rep['failed_runs']} failed runs, ETTR {'-' if ettr is None else f'{ettr:.3f}'}")


def rma_line(rep: dict[str, Any]) -> str:
    """One line of the window's RMA cases ('' when there were none)."""
    f = rep.get("rma") or {}
    if not f.get("cases"):
        return ""

    def median(key: str) -> str:
        s = f[key]
        return "-" if not s["n"] else f"median {s['median_s'] / 3600:,.1f} h over {s['n']}"

    models = ", ".join(f"{m} {n}" for m, n in f["per_gpu_model"].items()) or "-"
    return (f"RMA: {f['cases']} case(s), {f['open']} open; fault to RMA {median('fault_to_rma')}; "
            f"vendor turnaround {median('vendor_turnaround')}; GPUs per model: {models}")


def chart(rep: dict[str, Any]) -> dict[str, Any]:
    days = rep["days"]
    width = LEFT + len(days) * (COL_W + GAP) + GAP
    cols = []
    for i, d in enumerate(days):
        total = d.get("total") or 1.0
        x = LEFT + GAP + i * (COL_W + GAP)
        y = TOP + CHART_H
        parts = []
        for key, label, color in STACK:
            v = d.get(key, 0.0)
            h = CHART_H * v / total
            if h <= 0:
                continue
            y -= h
            parts.append({"y": round(y, 2), "h": round(h, 2), "color": color, "key": key,
                          "title": f"{d['day']} {label}: {v:,.1f} GPU-h ({100 * v / total:.1f}%)"})
        cols.append({"x": x, "parts": parts, "label": d["day"][5:], "label_x": x + COL_W / 2})
    ticks = [{"y": TOP + CHART_H - CHART_H * p / 100, "text": f"{p}%"} for p in (0, 25, 50, 75, 100)]
    return {"width": max(width, 320), "height": TOP + CHART_H + BOTTOM, "plot_h": TOP + CHART_H, "left": LEFT,
            "col_w": COL_W, "cols": cols, "ticks": ticks, "legend": STACK}


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M %Z")


def render_html(rep: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    causes = sorted({k for d in rep["days"] for k in d if k.startswith("out_") and k != "out_of_service"})
    return env.get_template("report/reliability.html.j2").render(
        r=rep, title=headline(rep), chart=chart(rep), causes=causes, rma=rma_line(rep), since=_when(rep["since"]),
        until=_when(rep["until"]))
