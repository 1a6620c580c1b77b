"""The replay's report as a page (`--out DIR/report.html`): jinja2, autoescaped, no scripts, no
network. Charts are inline SVG laid out here (the template only formats): detection time per
fault class and policy (p50 bar, p95 tick), GPU-hours lost per policy, ETTR per policy. Then the
tables of replay.json: targets, detection, job harm, drains, repair, cost, what grew. The first
line is also the page title.

Input: the dict fleet_replay.py writes as replay.json (args, results per policy, compare,
watched, errors, timeline, assumptions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

HERE = Path(__file__).resolve().parent
TEMPLATE = "report.html.j2"

POLICY_NAMES = {"a": "a: slurmadm", "b": "b: no enforcement", "c": "c: NHC-like"}
POLICY_COLORS = {"a": "#1565c0", "b": "#8e24aa", "c": "#ef8f00"}
RED, GREEN = "#c62828", "#2e7d32"

LABEL_W = 150   # room left of the bars for their labels
PLOT_W = 520    # the bars' scale
RIGHT = 120     # room right of the bars for the value label
BAR_H = 14
GAP = 4         # between bars of one group
GROUP_GAP = 12  # between groups
TOP = 8
AXIS_H = 34     # the ticks and the unit under the bars


def headline(rep: dict[str, Any]) -> str:
    a = rep["args"]
    targets = rep["compare"]["targets"]
    met = sum(1 for v in targets.values() if v)
    policies = ",".join(rep["results"])
    head = (f"fleet replay: {a['nodes']} nodes, {a['minutes']:g} min at {a['compression']:g}x, "
            f"policies {policies}")
    if not targets:
        return head + ": no targets (policy a did not run)"
    return head + f": {met}/{len(targets)} targets met"


def _unit(seconds: float) -> tuple[str, float]:
    """The unit site times read best in: (name, seconds per unit)."""
    if seconds >= 2 * 3600:
        return "site hours", 3600.0
    if seconds >= 120:
        return "site minutes", 60.0
    return "site seconds", 1.0


def _nice(top: float) -> tuple[float, list[float]]:
    """An axis maximum at or above `top` and its ticks (0 and four steps of 1, 2, 2.5 or 5 x 10^k)."""
    if top <= 0:
        return 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]
    import math

    raw = top / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return step * 4, [step * i for i in range(5)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}".rstrip("0").rstrip(".")


def bar_chart(groups: list[dict[str, Any]], *, top: float, unit: str, ticks: list[float] | None = None,
              label: str) -> dict[str, Any]:
    """Horizontal bars in groups: each group {label, bars: [{policy, value (None: no bar), p95
    (optional tick), text (the value label), title}]}, scaled to `top`."""
    if ticks is None:
        top, ticks = _nice(top)
    scale = PLOT_W / top if top else 0.0
    rows, y = [], TOP
    for g in groups:
        first_y = y
        for b in g["bars"]:
            v = b.get("value")
            w = 0.0 if v is None else max(round(v * scale, 2), 1.0 if v > 0 else 0.0)
            p95 = b.get("p95")
            rows.append({"y": y, "w": w, "color": POLICY_COLORS.get(b["policy"], "#607d8b"),
                         "policy": b["policy"], "missing": v is None, "text": b["text"], "title": b["title"],
                         "text_x": LABEL_W + w + 6, "p95_x": None if p95 is None else LABEL_W + round(p95 * scale, 2)})
            y += BAR_H + GAP
        g_h = y - GAP - first_y
        rows[-len(g["bars"])]["group"] = {"label": g["label"], "y": first_y + g_h / 2 + 4}
        y += GROUP_GAP - GAP
    plot_bottom = y - GROUP_GAP + GAP + 4
    return {"width": LABEL_W + PLOT_W + RIGHT, "height": plot_bottom + AXIS_H, "left": LABEL_W, "plot_w": PLOT_W,
            "bar_h": BAR_H, "rows": rows, "plot_bottom": plot_bottom, "label": label, "unit": unit,
            "ticks": [{"x": LABEL_W + round(t * scale, 2), "text": _fmt(t)} for t in ticks]}


def detection_chart(rep: dict[str, Any]) -> dict[str, Any] | None:
    results = rep["results"]
    classes = sorted({c for r in results.values() for c, row in r["per_class"].items() if row["signal"]})
    if not classes:
        return None
    worst = max([row.get("p95_s") or 0 for r in results.values() for row in r["per_class"].values()] + [0])
    unit, per = _unit(worst)
    groups = []
    for cls in classes:
        bars = []
        for p, r in results.items():
            row = r["per_class"].get(cls)
            if row is None:
                continue
            looked = row["injected"] - row["already_out"]
            if row["p50_s"] is None:
                text = "not detected" if looked else "node already out"
                bars.append({"policy": p, "value": None, "text": text,
                             "title": f"{cls}, policy {p}: {text} ({row['injected']} injected)"})
                continue
            p50, p95 = row["p50_s"] / per, row["p95_s"] / per
            mech = ", ".join(f"{m} {n}" for m, n in sorted(row["mechanisms"].items()))
            bars.append({"policy": p, "value": p50, "p95": p95 if p95 > p50 else None,
                         "text": f"{_fmt(p50)} ({row['detected']}/{looked})",
                         "title": f"{cls}, policy {p}: p50 {_fmt(p50)}, p95 {_fmt(p95)} {unit}; "
                                  f"{row['detected']} of {looked} detected by {mech}"})
        groups.append({"label": cls, "bars": bars})
    return bar_chart(groups, top=worst / per, unit=f"injection to drain, {unit} (bar p50, tick p95)",
                     label="Detection time per fault class")


def cost_charts(rep: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    results = rep["results"]
    lost = {p: r["cost"]["gpu_hours_lost"] for p, r in results.items()}
    lost_bars = [{"policy": p, "value": v, "text": f"{v:,.1f} GPU-h", "title": f"policy {p}: {v:,.2f} GPU-hours lost"}
                 for p, v in lost.items()]
    lost_chart = bar_chart([{"label": POLICY_NAMES.get(b["policy"], b["policy"]), "bars": [b]} for b in lost_bars],
                           top=max(lost.values(), default=0), unit="GPU-hours lost in killed runs (site time)",
                           label="GPU-hours lost per policy")
    ettr_bars = []
    for p, r in results.items():
        e = r["cost"]["ettr"]
        ettr_bars.append({"policy": p, "value": e, "text": "-" if e is None else f"{e:.3f}",
                          "title": f"policy {p}: ETTR {'-' if e is None else f'{e:.4f}'}"})
    ettr_chart = bar_chart([{"label": POLICY_NAMES.get(b["policy"], b["policy"]), "bars": [b]} for b in ettr_bars],
                           top=1.0, ticks=[0.0, 0.25, 0.5, 0.75, 1.0], unit="ETTR (completed / (completed + lost))",
                           label="ETTR per policy")
    return lost_chart, ettr_chart


def render_html(rep: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    lost_chart, ettr_chart = cost_charts(rep)
    targets = rep["compare"]["targets"]
    signal: dict[str, bool] = {}
    for res in rep["results"].values():
        for cls, row in res["per_class"].items():
            signal[cls] = signal.get(cls, False) or bool(row["signal"])
    return env.get_template(TEMPLATE).render(
        r=rep, title=headline(rep), ok=bool(targets) and all(targets.values()),
        charts=[c for c in (detection_chart(rep), lost_chart, ettr_chart) if c is not None],
        names=POLICY_NAMES, colors=POLICY_COLORS,
        classes=sorted(signal), signal=signal)
