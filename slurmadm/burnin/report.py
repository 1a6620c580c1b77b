"""The sweep report: `<report_dir>/<sweep id>/report.html` (jinja2, autoescaped, no scripts, no
network: bandwidth charts are inline SVG laid out here and drawn by the template), `summary.json`,
and the jobs' output under `jobs/`. `<report_dir>/latest` points at the newest sweep.

What the page must get right for the admin reading it the next morning (and what
tests/unit/burnin/test_report*.py check, the page itself in a headless Chromium):

- the verdict first, in one line that is also the page title (`verdict()`);
- honest charts: a bar takes the colour of its own test, the axis starts at zero with ticks and
  units, the floor is drawn over the bars, the previous sweep's mark never covers a value label,
  nothing about a previous sweep when there was none, a viewBox so the chart shrinks;
- slowdowns beyond `burnin.slowdown_warn_percent` since the previous sweep are warnings
  (`slowdowns()`, also in `burnin status`);
- why a node is missing from the pair tests, the health checks' measured values per node, job
  ids linked to their output files, times with their time zone;
- at the reference size (128 nodes, 64 pairs a round; tests/unit/burnin/test_report_at_128.py):
  past BIG nodes each table leads with what needs a look and keeps every row in a closed
  <details>, the passed nodes are one hostlist, bar charts past DENSE_AT bars are denser with one
  readable label per bar, and a distribution chart's stacks close up past STACK_MAX under a count.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path
from typing import Any

import jinja2

from ..files import write_atomic
from ..hostlist import compress, fold
from ..resources import templates_dir
from .fleet import METRICS
from .fleet import describe as fleet_describe

# Chart geometry (SVG user units; the viewBox scales it to the page width).
CHART_W = 860
VALUE_W = 150  # room right of the plot for "370 GB/s ▼23%"
BAR_H = 16
GAP = 8
DENSE_AT = 32  # more bars than this: the dense layout
DENSE_BAR_H = 10  # with the gap a 14 px row: an 11 px label box (~13 px) never meets the next
DENSE_GAP = 4
DENSE_MIN_W = 720  # its 11 px labels no smaller than ~10 px on a phone: the chart scrolls sideways
TOP = 20  # room above the bars for the floor label
AXIS_H = 34  # room below the bars for tick labels and the unit
CHAR_W = 7.0  # approximate width of one 12 px label character
MIN_W = 600  # narrower screens scroll the chart sideways rather than shrink its text below ~10 px
COLORS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#ad1457", "warn": "#ef8f00", "skip": "#9e9e9e",
          "skipped": "#9e9e9e", "none": "#9e9e9e"}
DEFAULT_SLOWDOWN_PERCENT = 10.0
BIG = 16  # a sweep of more nodes: tables show what needs a look first, every row under <details>


# ------------------------------------------------------------------------------ comparison


def compare(summary: dict[str, Any], previous: dict[str, Any] | None,
            slowdown_percent: float | None = None) -> dict[str, Any]:
    """Per node and per pair: last sweep's verdict and bandwidth next to this one's; `slower`
    marks a drop of more than `slowdown_percent` (default: the summary's own setting)."""
    if not previous:
        return {"sweep_id": None, "nodes": {}, "pairs": {}}
    pct = _pct(summary) if slowdown_percent is None else slowdown_percent
    prev_nodes = {n["node"]: n for n in previous.get("nodes", [])}
    prev_pairs = {f"{p['a']}+{p['b']}": p for p in previous.get("pairs", [])}
    nodes = {}
    for n in summary["nodes"]:
        p = prev_nodes.get(n["node"])
        if p is None:
            continue
        change = _change(n.get("busbw_gbps"), p.get("busbw_gbps"))
        nodes[n["node"]] = {"verdict": p["verdict"], "busbw_gbps": p.get("busbw_gbps"), "change": change,
                            "verdict_changed": p["verdict"] != n["verdict"], "slower": _slower(change, pct)}
    pairs = {}
    for pr in summary["pairs"]:
        key = f"{pr['a']}+{pr['b']}"
        p = prev_pairs.get(key) or prev_pairs.get(f"{pr['b']}+{pr['a']}")
        if p is not None:
            change = _change(pr.get("busbw_gbps"), p.get("busbw_gbps"))
            pairs[key] = {"status": p["status"], "busbw_gbps": p.get("busbw_gbps"), "change": change,
                          "slower": _slower(change, pct)}
    return {"sweep_id": previous.get("sweep_id"), "started": previous.get("started"), "nodes": nodes, "pairs": pairs}


def _pct(summary: dict[str, Any]) -> float:
    value = summary.get("slowdown_warn_percent")
    return float(value) if isinstance(value, (int, float)) else DEFAULT_SLOWDOWN_PERCENT


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or not before:
        return None
    return (now - before) / before


def _slower(change: float | None, pct: float) -> bool:
    return change is not None and change < 0 and -change * 100 > pct


def slowdowns(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes and pairs whose bus bandwidth dropped more than the site's percentage since the
    previous sweep (a warning, not a failure: the floor decides failures)."""
    prev = summary.get("previous") or {}
    pct = _pct(summary)
    out = []
    for n in summary.get("nodes", []):
        p = (prev.get("nodes") or {}).get(n["node"])
        if p and _slower(p.get("change"), pct):
            out.append({"kind": "node", "what": n["node"], "nodes": [n["node"]], "now": n.get("busbw_gbps"),
                        "before": p["busbw_gbps"], "change": p["change"]})
    for pr in summary.get("pairs", []):
        p = (prev.get("pairs") or {}).get(f"{pr['a']}+{pr['b']}")
        if p and _slower(p.get("change"), pct):
            out.append({"kind": "pair", "what": f"{pr['a']}+{pr['b']}", "nodes": [pr["a"], pr["b"]],
                        "now": pr.get("busbw_gbps"), "before": p["busbw_gbps"], "change": p["change"]})
    for w in out:
        label = "single-node busbw" if w["kind"] == "node" else "pair busbw"
        w["text"] = (f"{w['what']}: {label} {w['now']:.3g} GB/s, {w['change'] * 100:+.0f}% since the previous sweep "
                     f"({w['before']:.3g} GB/s; warns past -{pct:g}%)")
    return out


def warnings(summary: dict[str, Any]) -> list[str]:
    """One line per slowdown: what `burnin status` and `burnin run` print."""
    return [w["text"] for w in slowdowns(summary)]


# ------------------------------------------------------------------------------ the verdict


def _cpu_only(node: dict[str, Any]) -> bool:
    return any(t["test"] == "stress" and (t.get("data") or {}).get("device") == "cpu" for t in node["tests"])


def node_level(node: dict[str, Any], slow: set[str]) -> str:
    """pass | warn | straggler | fail | skipped for the counts: a node that passed but is slow
    against the fleet (burnin/fleet.py level `slow`) is a straggler, counted apart from failures;
    one that passed but got slower, is below the fleet's warn line, or has a warning other than
    the labelled CPU stand-in, is a warning."""
    if node["verdict"] != "pass":
        return node["verdict"] if node["verdict"] in ("fail", "skipped") else "skipped"
    fleet_level = (node.get("fleet") or {}).get("level")
    if fleet_level == "slow":
        return "straggler"
    if fleet_level == "warn":
        return "warn"
    other_warn = any(t["status"] == "warn" and not (t["test"] == "stress" and (t.get("data") or {}).get("device")
                                                    == "cpu") for t in node["tests"])
    return "warn" if node["node"] in slow or other_warn else "pass"


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """The banner: one line (also the page title) with the counts, e.g.
    `1/4 FAIL: b200-002 nvlink: GPU1 links 0,1 down → drained; 3 pass (CPU stand-in only, GPUs not stressed)`."""
    nodes = summary["nodes"]
    slow_list = slowdowns(summary)
    slow_nodes = {w["what"] for w in slow_list if w["kind"] == "node"}
    levels = {n["node"]: node_level(n, slow_nodes) for n in nodes}
    counts = {k: sum(1 for v in levels.values() if v == k) for k in ("pass", "warn", "straggler", "fail", "skipped")}
    total = len(nodes)
    parts = []
    failed = [n for n in nodes if levels[n["node"]] == "fail"]
    if failed:
        shown = []
        for n in failed[:3]:
            what = n["detail"] if n["failed_test"] in ("health", "") else f"{n['failed_test']}: {n['detail']}"
            action = (n.get("action") or "").split(":")[0] or "no action"
            shown.append(f"{n['node']} {_short(what, 70)} → {action}")
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        parts.append(f"{len(failed)}/{total} FAIL: " + "; ".join(shown) + more)
    links = summary.get("links") or []
    if links:
        parts.append(f"{len(links)} bad link(s): " + ", ".join(f"{lk['a']}↔{lk['b']}" for lk in links[:3]))
    stragglers = [n for n in nodes if levels[n["node"]] == "straggler"]
    if stragglers:
        shown = []
        for n in stragglers[:3]:
            w = n["fleet"].get("worst")
            action = (n.get("action") or "").split(":")[0] or f"slow {n.get('slow_streak') or 1} sweep(s) in a row"
            shown.append(f"{n['node']} {fleet_describe(w) if w else 'slow'} → {action}")
        more = f"; and {len(stragglers) - 3} more" if len(stragglers) > 3 else ""
        parts.append(f"{len(stragglers)}/{total} STRAGGLER: " + "; ".join(shown) + more)
    warned = [n for n in nodes if levels[n["node"]] == "warn"]
    slow_by_node = {w["what"]: w for w in slow_list if w["kind"] == "node"}
    slow_pairs = [w for w in slow_list if w["kind"] == "pair"]
    if warned:
        shown = []
        for n in warned[:3]:
            w = slow_by_node.get(n["node"])
            fw = (n.get("fleet") or {}).get("worst")
            if w:
                shown.append(f"{n['node']} busbw {w['change'] * 100:+.0f}% since the previous sweep")
            elif fw:
                shown.append(f"{n['node']} {fleet_describe(fw)}")
            else:
                t = next(t for t in n["tests"] if t["status"] == "warn")
                shown.append(f"{n['node']} {t['test']}: {_short(t['detail'], 60)}")
        more = f"; and {len(warned) - 3} more" if len(warned) > 3 else ""
        parts.append(f"{len(warned)}/{total} WARN: " + "; ".join(shown) + more)
    if slow_pairs:
        parts.append(f"{len(slow_pairs)} pair(s) slower: " + ", ".join(
            f"{w['what']} {w['change'] * 100:+.0f}%" for w in slow_pairs[:3]))
    passed = [n for n in nodes if levels[n["node"]] == "pass"]
    if passed:
        caveat = " (CPU stand-in only, GPUs not stressed)" if all(_cpu_only(n) for n in passed) else ""
        parts.append(f"{len(passed)}/{total} pass{caveat}" if parts else f"{len(passed)}/{total} PASS{caveat}")
    if counts["skipped"]:
        parts.append(f"{counts['skipped']} skipped")
    if not total:
        parts = ["no node tested"]
    level = "fail" if failed or links else "warn" if (warned or stragglers or slow_pairs or counts["skipped"]) \
        else "pass"
    text = "; ".join(parts)
    if summary.get("status") not in (None, "done"):
        text = f"{str(summary['status']).upper()}: {text}"
        level = "fail" if level == "fail" else "warn"
    return {"text": text, "level": level, "counts": counts, "total": total, "levels": levels}


# ------------------------------------------------------------------------------ charts


def nice_ticks(top: float, target: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 x 10^k) up to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def bar_chart(items: list[dict[str, Any]], floor: float | None, unit: str) -> dict[str, Any] | None:
    """SVG geometry for horizontal bars. Items: label, value, status (of the bar's own test),
    previous (or None), slower (bool), floor (optional per-item floor, when they differ)."""
    values = [v for i in items for v in (i["value"], i.get("previous")) if v is not None]
    if not values:
        return None
    item_floors = [i["floor"] for i in items if i.get("floor") is not None]
    ticks = nice_ticks(max(values + ([floor] if floor else []) + item_floors) * 1.02)
    top = ticks[-1]
    label_w = max(60, int(max(len(i["label"]) for i in items) * CHAR_W) + 14)
    plot_x, plot_w = label_w, CHART_W - label_w - VALUE_W

    def x(v: float) -> float:
        return round(plot_x + v / top * plot_w, 1)

    # past DENSE_AT bars (128 nodes, 64 pairs a round) thinner bars and 11 px labels: one
    # label per 13 px row still reads, and 128 bars stay a page tall, not three
    dense = len(items) > DENSE_AT
    bar_h, gap = (DENSE_BAR_H, DENSE_GAP) if dense else (BAR_H, GAP)
    bars = []
    for k, item in enumerate(items):
        y = TOP + gap + k * (bar_h + gap)
        v, prev = item["value"], item.get("previous")
        change = _change(v, prev)
        value_text = f"{_num(v)} {unit}" if v is not None else f"no result ({item['status']})"
        delta = ""
        if change is not None:
            delta = f"{'▼' if change < 0 else '▲'}{abs(change) * 100:.0f}%"
        end = max(x(v) if v is not None else plot_x, x(prev) if prev is not None else plot_x)
        bars.append({
            "label": item["label"], "y": y, "text_y": y + bar_h - (1 if dense else 4), "mid_y": y + bar_h / 2,
            "width": round((x(v) - plot_x) if v is not None else 0, 1),
            "status": item["status"], "color": COLORS.get(item["status"], "#607d8b"),
            "value_text": value_text, "delta": delta, "slower": bool(item.get("slower")),
            # the label starts right of both the bar's end and the previous mark: never covered
            "value_x": round(end + 8, 1),
            "prev_x": x(prev) if prev is not None else None,
            "floor_x": x(item["floor"]) if item.get("floor") is not None and floor is None else None,
            "title": f"{item['label']}: {value_text}, test {item['status']}"
                     + (f"; previous sweep {_num(prev)} {unit} ({delta})" if prev is not None else ""),
        })
    axis_y = TOP + gap + len(items) * (bar_h + gap)
    return {
        "width": CHART_W, "height": axis_y + AXIS_H, "bars": bars, "plot_x": plot_x, "plot_w": plot_w,
        "plot_end": plot_x + plot_w, "top_y": TOP, "axis_y": axis_y, "bar_h": bar_h, "unit": unit,
        "dense": dense, "mark_pad": 1 if dense else 3,
        "ticks": [{"x": x(t), "text": _num(t)} for t in ticks],
        "floor_x": x(floor) if floor else None, "floor_text": f"floor {_num(floor)} {unit}" if floor else "",
        "has_previous": any(b["prev_x"] is not None for b in bars),
        "statuses": sorted({b["status"] for b in bars}, key=lambda s: list(COLORS).index(s) if s in COLORS else 99),
        "min_width": DENSE_MIN_W if dense else MIN_W,
    }


def charts(summary: dict[str, Any]) -> dict[str, Any]:
    prev = summary.get("previous") or {}
    node_floors = summary["floors"]["node_busbw_gbps"] or {}
    distinct = set(node_floors.values())
    node_items = []
    for n in summary["nodes"]:
        test = next((t for t in n["tests"] if t["test"] == "allreduce-node"), None)
        p = (prev.get("nodes") or {}).get(n["node"]) or {}
        node_items.append({"label": n["node"], "value": n["busbw_gbps"],
                           "status": test["status"] if test else "none", "previous": p.get("busbw_gbps"),
                           "slower": p.get("slower", False), "floor": node_floors.get(n["node"])})
    pair_items = []
    for pr in summary["pairs"]:
        p = (prev.get("pairs") or {}).get(f"{pr['a']}+{pr['b']}") or {}
        pair_items.append({"label": f"r{pr['round']} {pr['a']}+{pr['b']}", "value": pr["busbw_gbps"],
                           "status": pr["status"], "previous": p.get("busbw_gbps"), "slower": p.get("slower", False)})
    return {
        "nodes": bar_chart(node_items, distinct.pop() if len(distinct) == 1 else None, "GB/s"),
        "pairs": bar_chart(pair_items, summary["floors"]["pair_busbw_gbps"], "GB/s"),
    }


# ------------------------------------------------------------------------------ fleet distributions

DIST_H_ROW = 13  # vertical step between stacked dots
DIST_R = 5
STACK_MAX = 8  # dots a column shows at full step; more close up under a count
COUNT_W = 64  # room a "128 nodes" count takes


def dist_charts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One strip chart per metric and profile (burnin/fleet.py groups): every node's value as a
    share of the fleet median on one axis, dots stacked where they meet, the median, warn and
    slow lines drawn, the node coloured by its fleet level; warn and slow nodes labelled."""
    fl = summary.get("fleet") or {}
    cfg = fl.get("settings") or {}
    levels = {n["node"]: n.get("fleet") or {} for n in summary.get("nodes") or []}
    out = []
    for g in fl.get("groups") or []:
        if g["unit"] or not g["median"]:
            continue
        m = METRICS.get(g["metric"])
        if m is None or m.kind == "count":  # error counts have no share of a median to chart
            continue
        warn_p, fail_p = cfg.get("warn_percent", 92.0), cfg.get("fail_percent", 85.0)
        lines = [(100.0, "median"), (warn_p, "warn"), (fail_p, "slow")] if m.higher_is_better else \
            [(100.0, "median"), (200 - warn_p, "warn"), (200 - fail_p, "slow")]
        shares = {n: v / g["median"] * 100 for n, v in g["values"].items()}
        lo = min([*shares.values(), *(x for x, _ in lines)]) - 3
        hi = max([*shares.values(), *(x for x, _ in lines)]) + 3
        ticks = [t for t in range(int(math.floor(lo / 5) * 5), int(math.ceil(hi / 5) * 5) + 1, 5)]
        lo, hi = ticks[0], ticks[-1]
        plot_x, plot_w = 30, CHART_W - 60

        def x(v: float, plot_x: float = plot_x, plot_w: float = plot_w, lo: float = lo, hi: float = hi) -> float:
            return round(plot_x + (v - lo) / (hi - lo) * plot_w, 1)

        stacks: dict[int, int] = {}
        dots = []
        for node, share in sorted(shares.items(), key=lambda kv: kv[1]):
            col = int(x(share) // (2 * DIST_R))
            k = stacks.get(col, 0)
            stacks[col] = k + 1
            entry = (levels.get(node) or {}).get("metrics", {}).get(g["metric"]) or {}
            level = entry.get("level") or "none"
            dots.append({"node": node, "share": round(share, 1), "x": x(share), "k": k, "col": col, "level": level,
                         "color": {"slow": COLORS["fail"], "warn": COLORS["warn"], "ok": COLORS["pass"]}
                         .get(level, COLORS["none"]),
                         "title": f"{node}: {_num(g['values'][node])} {m.unit} = {share:.0f}% of the fleet median"
                                  f" {_num(g['median'])} ({level})"})
        rows = max([d["k"] for d in dots] + [0]) + 1
        # 128 alike nodes meet at the median: past STACK_MAX a column's dots close up (they
        # overlap) and its count is written over it, so the chart keeps its height
        step = DIST_H_ROW if rows <= STACK_MAX else DIST_H_ROW * (STACK_MAX - 1) / (rows - 1)
        shown = min(rows, STACK_MAX)
        top = 22 + (14 if rows > STACK_MAX else 0)
        base_y = top + shown * DIST_H_ROW + 4
        for d in dots:
            d["y"] = round(base_y - DIST_R - d["k"] * step, 1)
        counts, run = [], []  # one count over each run of full columns closer than a label's width
        for col in [*sorted(c for c, n in stacks.items() if n > STACK_MAX), None]:
            if run and (col is None or (col - run[-1]) * 2 * DIST_R > COUNT_W):
                mine = [d for d in dots if d["col"] in run]
                xs = [d["x"] for d in mine]
                counts.append({"x": round((min(xs) + max(xs)) / 2, 1), "y": round(top - 23, 1),
                               "text": f"{len(mine)} nodes"})
                run = []
            if col is not None:
                run.append(col)
        labelled = [d for d in dots if d["level"] in ("warn", "slow")]
        label_y = base_y + 44
        for i, d in enumerate(labelled):
            d["label_y"] = label_y + i * 15
            d["label"] = f"{d['node']} {d['share']:.0f}%"
        height = label_y + len(labelled) * 15 + 6
        out.append({
            "id": f"dist-{g['profile']}-{g['metric']}", "metric": g["metric"], "label": m.label, "unit": m.unit,
            "profile": g["profile"], "nodes": g["nodes"], "median": _num(g["median"]), "mad": _num(g["mad"]),
            "judged": g["judged"], "higher_is_better": m.higher_is_better,
            "width": CHART_W, "height": height, "plot_x": plot_x, "plot_end": plot_x + plot_w, "top_y": top,
            "axis_y": base_y, "r": DIST_R, "dots": dots, "labelled": labelled, "min_width": MIN_W, "counts": counts,
            "ticks": [{"x": x(t), "text": f"{t}%"} for t in ticks],
            "lines": [{"x": x(v), "kind": kind, "text": "median" if kind == "median" else f"{kind} {v:g}%"}
                      for v, kind in lines],
        })
    return out


def trend_table(summary: dict[str, Any]) -> dict[str, Any]:
    """Per node, the last sweeps' shares of the fleet median per metric, oldest first
    (summary["trend"], written by the sweep from the store)."""
    trend = summary.get("trend") or {}
    metrics = [m for m in METRICS if any(m in (t.get("shares") or {}) for rows in trend.values() for t in rows)]
    rows = []
    for node, hist in trend.items():
        cells = {}
        for m in metrics:
            cells[m] = [{"sweep": t["sweep_id"], "share": (t.get("shares") or {}).get(m),
                         "level": ((t.get("levels") or {}).get(m) or "none")} for t in hist]
        rows.append({"node": node, "cells": cells})
    return {"metrics": metrics, "rows": rows, "sweeps": max((len(v) for v in trend.values()), default=0)}


# ------------------------------------------------------------------------------ tables and notes


def notes(summary: dict[str, Any]) -> list[str]:
    """What a reader must know about how much was really tested."""
    out = []
    if summary["collective"] == "gloo":
        out.append("All-reduce ran with gloo on the CPU: its bandwidths are CPU/loopback numbers, not GPU or "
                   "fabric numbers.")

    def nodes_where(pred) -> list[str]:
        return [n["node"] for n in summary["nodes"] if any(pred(t) for t in n["tests"])]

    cpu = nodes_where(lambda t: t["test"] == "stress" and (t.get("data") or {}).get("device") == "cpu")
    if cpu:
        out.append(f"No GPU was stressed on {compress(cpu)}: the CPU stand-in ran instead (see the stress rows).")
    no_health = nodes_where(lambda t: t["test"] == "health" and t["status"] == "skip")
    if no_health:
        out.append(f"The health suite did not run on {compress(no_health)} (see the health rows).")
    return out


def not_paired(summary: dict[str, Any]) -> dict[str, str]:
    """Nodes of the sweep that appear in no pair test, and why."""
    paired = {x for p in summary["pairs"] for x in (p["a"], p["b"])}
    out = {}
    for n in summary["nodes"]:
        if n["node"] in paired:
            continue
        if n["verdict"] == "fail" and n["failed_test"] != "allreduce-pair":
            out[n["node"]] = f"failed phase 1 ({n['failed_test']}): not paired, so a bad node cannot fail a pair"
        elif n["verdict"] == "skipped":
            out[n["node"]] = f"not tested in phase 1: {n['detail'] or 'skipped'}"
        elif summary.get("pair_note"):
            out[n["node"]] = summary["pair_note"]
        else:
            out[n["node"]] = "no partner that passed phase 1"
    return out


def _cell(status: str, value: Any, unit: str, detail: str) -> dict[str, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{_num(float(value))} {unit}".strip()
    else:
        text = _short(detail, 40)
    return {"status": status, "text": text, "title": detail}


def check_grid(summary: dict[str, Any]) -> dict[str, Any]:
    """Nodes x (burn-in tests, then each health check) with status and the measured value."""
    tests: list[str] = []
    checks: list[str] = []
    rows = []
    for n in summary["nodes"]:
        cells: dict[str, dict[str, Any]] = {}
        for t in n["tests"]:
            if t["test"] == "health":
                for c in (t.get("data") or {}).get("checks") or []:
                    cid = str(c.get("check_id") or c.get("check") or c.get("id") or "?")
                    if cid not in checks:
                        checks.append(cid)
                    cells["check:" + cid] = _cell(str(c.get("status", "?")), c.get("value"), "",
                                                  str(c.get("detail") or ""))
                if not (t.get("data") or {}).get("checks"):
                    if "health" not in tests:
                        tests.append("health")
                    cells["test:health"] = _cell(t["status"], None, "", t.get("detail") or "")
                continue
            if t["test"] not in tests:
                tests.append(t["test"])
            cells["test:" + t["test"]] = _cell(t["status"], t.get("value"), t.get("unit") or "", t.get("detail") or "")
        rows.append({"node": n["node"], "cells": cells})
    columns = [{"key": "test:" + t, "name": t, "kind": "burn-in"} for t in tests] + \
              [{"key": "check:" + c, "name": c, "kind": "health"} for c in checks]
    return {"columns": columns, "rows": rows}


def fmt_time(value: Any) -> str:
    """An ISO time for people, with its time zone (`2026-11-30 01:30:00 UTC+01:00`); a time
    recorded without one (older sweeps) says `local time`."""
    if not value:
        return ""
    try:
        t = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if t.tzinfo is None:
        return t.strftime("%Y-%m-%d %H:%M:%S") + " (local time)"
    off = t.utcoffset() or dt.timedelta(0)
    mins = int(off.total_seconds() // 60)
    zone = "UTC" if mins == 0 else f"UTC{'+' if mins > 0 else '-'}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"
    name = t.tzname()
    extra = f" {name}" if name and name not in ("UTC", zone) and not name.startswith(("+", "-", "UTC")) else ""
    return t.strftime("%Y-%m-%d %H:%M:%S") + f" {zone}{extra}"


def output_link(path: str | None) -> str | None:
    """A job's output file relative to the report (which sits in the sweep's directory)."""
    if not path:
        return None
    p = Path(path)
    if p.is_absolute():
        return None
    return p.as_posix()


def big_view(summary: dict[str, Any], levels: dict[str, str], grid: dict[str, Any],
             trend: dict[str, Any]) -> dict[str, Any]:
    """A sweep of more than BIG nodes (the reference site's 128, 64 pairs a round): each table
    first shows what needs a look (a node not a plain pass, a pair not passed or slower, a grid
    row with a result other than pass, a trend row warned or slow), every row stays on the page
    in a closed <details> under it, and the passed nodes are named by one hostlist."""
    nodes = summary["nodes"]
    big = len(nodes) > BIG
    attention = [n for n in nodes if levels.get(n["node"]) != "pass"]
    quiet = [n for n in nodes if levels.get(n["node"]) == "pass"]
    pairs_prev = (summary.get("previous") or {}).get("pairs") or {}
    return {
        "big": big, "attention_nodes": attention, "quiet_rows": quiet, "quiet_count": len(quiet),
        "quiet_nodes": compress(n["node"] for n in quiet),
        "pair_attention": [p for p in summary["pairs"] if p["status"] != "pass"
                           or (pairs_prev.get(f"{p['a']}+{p['b']}") or {}).get("slower")],
        "grid_attention": [r for r in grid["rows"] if any(c["status"] != "pass" for c in r["cells"].values())],
        "trend_attention": [r for r in trend["rows"]
                            if any(c["level"] in ("warn", "slow") for cells in r["cells"].values() for c in cells)],
    }


def render_html(summary: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = fmt_time
    env.filters["link"] = output_link
    after = {n["node"]: n["verdict"] for n in summary["nodes"]}
    prev = summary.get("previous") or {"sweep_id": None, "nodes": {}, "pairs": {}}
    summary = {**summary, "previous": prev}
    v = verdict(summary)
    grid = check_grid(summary)
    trend = trend_table(summary)
    view = {
        "verdict": v,
        "charts": charts(summary),
        "notes": notes(summary),
        "slowdowns": slowdowns(summary),
        "not_paired": {g.hostlist: g.key for g in fold(not_paired(summary).items())},
        "grid": grid,
        "dists": dist_charts(summary),
        "trend": trend,
        "has_previous": bool(prev.get("sweep_id")),
        "changes": [(g.hostlist, g.key[0], g.key[1]) for g in
                    fold((node, (p["verdict"], after[node])) for node, p in prev["nodes"].items()
                         if p["verdict_changed"])],
        **big_view(summary, v["levels"], grid, trend),
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
