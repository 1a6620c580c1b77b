"""The sweep report: `<report_dir>/<sweep id>/report.html` (jinja2, no scripts, no network:
bandwidth charts are inline SVG laid out here and drawn by the template), `summary.json`, and
the jobs' output under `jobs/`. `<report_dir>/latest` points at the newest sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jinja2

from ..files import write_atomic
from ..resources import templates_dir

CHART_W = 760
LABEL_W = 250
VALUE_W = 90
BAR_H = 16
GAP = 6
COLORS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#c62828", "warn": "#f9a825", "skip": "#9e9e9e",
          "skipped": "#9e9e9e"}


def compare(summary: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """Per node and per pair: last sweep's verdict and bandwidth next to this one's."""
    if not previous:
        return {"sweep_id": None, "nodes": {}, "pairs": {}}
    prev_nodes = {n["node"]: n for n in previous.get("nodes", [])}
    prev_pairs = {f"{p['a']}+{p['b']}": p for p in previous.get("pairs", [])}
    nodes = {}
    for n in summary["nodes"]:
        p = prev_nodes.get(n["node"])
        if p is None:
            continue
        nodes[n["node"]] = {"verdict": p["verdict"], "busbw_gbps": p.get("busbw_gbps"),
                            "change": _change(n.get("busbw_gbps"), p.get("busbw_gbps")),
                            "verdict_changed": p["verdict"] != n["verdict"]}
    pairs = {}
    for pr in summary["pairs"]:
        key = f"{pr['a']}+{pr['b']}"
        p = prev_pairs.get(key) or prev_pairs.get(f"{pr['b']}+{pr['a']}")
        if p is not None:
            pairs[key] = {"status": p["status"], "busbw_gbps": p.get("busbw_gbps"),
                          "change": _change(pr.get("busbw_gbps"), p.get("busbw_gbps"))}
    return {"sweep_id": previous.get("sweep_id"), "started": previous.get("started"), "nodes": nodes, "pairs": pairs}


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or not before:
        return None
    return (now - before) / before


def bar_chart(items: list[dict[str, Any]], floor: float | None, unit: str) -> dict[str, Any] | None:
    """SVG geometry for horizontal bars: items have label, value, status, previous (or None)."""
    values = [v for i in items for v in (i["value"], i.get("previous")) if v is not None]
    if not values:
        return None
    top = max(values + ([floor] if floor else [])) * 1.1
    plot_w = CHART_W - LABEL_W - VALUE_W

    def x(v: float) -> float:
        return round(LABEL_W + v / top * plot_w, 1)

    bars = []
    for k, item in enumerate(items):
        y = GAP + k * (BAR_H + GAP)
        v, prev = item["value"], item.get("previous")
        bars.append({
            "label": item["label"], "y": y, "text_y": y + BAR_H - 4,
            "width": round((x(v) - LABEL_W) if v is not None else 0, 1),
            "color": COLORS.get(item["status"], "#607d8b"),
            "value_text": f"{v:.3g} {unit}" if v is not None else item["status"],
            "value_x": x(v or 0) + 4,
            "prev_x": x(prev) if prev is not None else None,
            "title": f"{item['label']}: {v if v is not None else item['status']} {unit}"
                     + (f" (previous sweep {prev:.3g})" if prev is not None else ""),
        })
    height = GAP + len(items) * (BAR_H + GAP) + 18
    return {"width": CHART_W, "height": height, "bars": bars, "label_w": LABEL_W,
            "floor_x": x(floor) if floor else None, "floor_text": f"floor {floor:g} {unit}" if floor else "",
            "axis_y": height - 16, "bar_h": BAR_H}


def charts(summary: dict[str, Any]) -> dict[str, Any]:
    prev = summary.get("previous") or {}
    node_floors = set((summary["floors"]["node_busbw_gbps"] or {}).values())
    node_items = [{"label": n["node"], "value": n["busbw_gbps"], "status": n["verdict"],
                   "previous": (prev.get("nodes", {}).get(n["node"]) or {}).get("busbw_gbps")}
                  for n in summary["nodes"]]
    pair_items = [{"label": f"r{p['round']} {p['a']}+{p['b']}", "value": p["busbw_gbps"],
                   "status": p["status"],
                   "previous": (prev.get("pairs", {}).get(f"{p['a']}+{p['b']}") or {}).get("busbw_gbps")}
                  for p in summary["pairs"]]
    return {
        "nodes": bar_chart(node_items, node_floors.pop() if len(node_floors) == 1 else None, "GB/s"),
        "pairs": bar_chart(pair_items, summary["floors"]["pair_busbw_gbps"], "GB/s"),
    }


def notes(summary: dict[str, Any]) -> list[str]:
    """What a reader must know about how much was really tested."""
    out = []
    if summary["collective"] == "gloo":
        out.append("All-reduce ran with gloo on the CPU: its bandwidths are CPU/loopback numbers, not GPU or "
                   "fabric numbers.")

    def nodes_where(pred) -> list[str]:
        return [n["node"] for n in summary["nodes"] if any(pred(t) for t in n["tests"])]

    cpu = nodes_where(lambda t: t["test"] == "stress" and t["data"].get("device") == "cpu")
    if cpu:
        out.append(f"No GPU was stressed on {', '.join(cpu)}: the CPU stand-in ran instead (see the stress rows).")
    no_health = nodes_where(lambda t: t["test"] == "health" and t["status"] == "skip")
    if no_health:
        out.append(f"The health suite did not run on {', '.join(no_health)} (see the health rows).")
    return out


def render_html(summary: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    after = {n["node"]: n["verdict"] for n in summary["nodes"]}
    view = {
        "charts": charts(summary),
        "notes": notes(summary),
        "changes": [(node, p["verdict"], after[node]) for node, p in summary["previous"]["nodes"].items()
                    if p["verdict_changed"]],
    }
    return env.get_template("burnin/report.html.j2").render(s=summary, view=view, colors=COLORS)


def write(summary: dict[str, Any], root: Path) -> dict[str, Path]:
    out = root / summary["sweep_id"]
    out.mkdir(parents=True, exist_ok=True)
    html, js = out / "report.html", out / "summary.json"
    summary = {**summary, "report": str(html)}
    write_atomic(js, json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    write_atomic(html, render_html(summary))
    latest = root / "latest"
    tmp = root / ".latest.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(summary["sweep_id"], tmp)
    tmp.replace(latest)
    return {"html": html, "json": js, "dir": out}
