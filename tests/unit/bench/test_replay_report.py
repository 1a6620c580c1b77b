"""The replay's page (bench/replay/html.py, `--out DIR/report.html`): self-contained, its charts
laid out from replay.json's figures, and read in a headless Chromium at 1400 and 420 pixels the
way `report reliability --html` is (tests/unit/report/test_reliability.py): measured by the
browser, then a screenshot (kept in $SLURMADM_REPORT_SHOTS when set) checked for the banner."""

from __future__ import annotations

import os
import shutil

import pytest

from bench.replay import html
from bench.replay import measure as m
from bench.replay.schedule import Fault
from tests.unit.burnin.test_report_page import browse, measure_script, measured, png_pixels

pytestmark = pytest.mark.unit

C = 2000.0


def fault(t, node, cls, kind="xid", injector="gpu", duration=40.0):
    return Fault(t, node, kind, injector, "3", "", duration, cls)


FAULTS = [(fault(10, "b200-001", "faulty-gpu"), True), (fault(25, "b200-002", "gpu-hbm", "row-remap-failed"), True),
          (fault(40, "b200-003", "network", "down", "ib"), True), (fault(55, "b200-004", "psu", "psu-failed", "bmc"), True),
          (fault(70, "b200-005", "software", "exit", "user", 0), False)]
RUNS = [m.Run("j1", ("b200-001",), 5, 12, "FAILED"), m.Run("j2", ("b200-006",), 5, 60, "COMPLETED"),
        m.Run("j3", ("b200-002", "b200-003"), 20, 45, "FAILED"), m.Run("j4", ("b200-007",), 30, 90, "COMPLETED")]


def observed(policy, drains, runs=RUNS):
    return m.Observed(policy, C, 120.0, FAULTS, drains, [m.Return(d.t_s + 30, d.node, "ladder") for d in drains],
                      runs, [])


def replay(policies=("a", "b", "c")) -> dict:
    drains = {
        "a": [m.Drain(14, "b200-001", "slurmadm: xid: GPU3 Xid 79"), m.Drain(31, "b200-002", "slurmadm: row-remap: x"),
              m.Drain(52, "b200-003", "slurmadm: infiniband: mlx5_0 down"),
              m.Drain(66, "b200-004", "slurmadm: bmc-psu: PSU2 failure")],
        "b": [],
        "c": [m.Drain(20, "b200-001", "slurmadm: xid: GPU3 Xid 79"), m.Drain(60, "b200-003", "slurmadm: infiniband: x")],
    }
    results = {p: m.measure(observed(p, drains[p], RUNS + ([m.Run("j5", ("b200-001", "b200-005"), 22, 90, "FAILED")]
                                                           if p != "a" else [])))
               for p in policies}
    args = {"nodes": 8, "minutes": 2.0, "seed": 1, "compression": C, "rate_scale": 1.0, "jobs": "jobs-8.csv",
            "faults": "faults-8.csv"}
    return {"args": args, "results": results, "compare": m.compare(results), "errors": {p: [] for p in policies},
            "watched": {"a": {"slurmctld": {"rss_kib": {"samples": 9, "before": 100.0, "after": 140.0, "grew": True}}}},
            "timeline": {}, "assumptions": m.__doc__}


def test_the_page_says_the_targets_first_and_lays_out_a_bar_per_class_and_policy():
    rep = replay()
    page = html.render_html(rep)
    assert "<script" not in page and " src=" not in page and " href=" not in page  # self-contained
    title = html.headline(rep)
    assert title == "fleet replay: 8 nodes, 2 min at 2000x, policies a,b,c: 4/4 targets met"
    assert f"<title>{title}</title>" in page and 'class="banner ok"' in page
    det = html.detection_chart(rep)
    groups = [r["group"]["label"] for r in det["rows"] if "group" in r]
    assert groups == ["faulty-gpu", "gpu-hbm", "network", "psu"]  # software has no node signal: no bars
    assert len(det["rows"]) == 4 * 3
    by = {(g, r["policy"]): r for g, r in zip([x for x in groups for _ in range(3)], det["rows"])}
    assert by[("psu", "c")]["missing"] and by[("psu", "c")]["text"] == "not detected"
    assert by[("faulty-gpu", "b")]["w"] == 0
    # 4 replay s at 2000x = 8000 site s: the chart reads in site hours
    assert "site hours" in det["unit"] and by[("faulty-gpu", "a")]["text"].startswith("2.22 (1/1)")
    assert det["ticks"][0]["text"] == "0" and det["ticks"][-1]["x"] == html.LABEL_W + html.PLOT_W
    lost, ettr = html.cost_charts(rep)
    assert [r["policy"] for r in lost["rows"]] == ["a", "b", "c"]
    assert lost["rows"][0]["w"] < lost["rows"][2]["w"] and ettr["ticks"][-1]["text"] == "1"
    assert 'id="grew"' in page and "slurmctld" in page


def test_a_missed_target_turns_the_banner_red_and_names_it():
    rep = replay(("a",))
    rep["results"]["a"]["drains"]["false"] = 1
    rep["compare"] = m.compare(rep["results"])
    page = html.render_html(rep)
    assert html.headline(rep).endswith("2/3 targets met")  # one false drain, and no policy c to compare
    assert 'class="banner"' in page and "NOT met</span>: no false drain" in page


MEASURE = measure_script(r"""
  var out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, title: document.title,
             first_text: document.body.innerText.trim().split("\n")[0],
             charts: document.querySelectorAll("svg.chart").length,
             bars: document.querySelectorAll("svg.chart rect.bar").length,
             p95: document.querySelectorAll("svg.chart line.p95").length,
             scripts: document.querySelectorAll("script").length, overlaps: 0, label_px: 100};
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var labels = Array.from(svg.querySelectorAll("text.lbl, text.val, text.miss")).map(box);
    for (var i = 0; i < labels.length; i++) for (var j = i + 1; j < labels.length; j++)
      if (overlap(labels[i], labels[j])) out.overlaps++;
    svg.querySelectorAll("text.lbl").forEach(function (t) { out.label_px = Math.min(out.label_px, box(t).h); });
  });
  out.tables_unscrollable = Array.from(document.querySelectorAll("table")).filter(function (t) {
    return !t.closest(".scroll") && box(t).r > window.innerWidth + 1; }).length;
""")


@pytest.mark.parametrize("width", (1400, 420))
def test_the_page_reads_well_in_a_real_browser(width, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.fail("chromium is missing: scripts/install-system-deps.sh installs Debian's chromium")
    rep = replay()
    rep["results"]["a"]["drains"]["false"] = 1  # a missed target: the red banner the screenshot looks for
    rep["compare"] = m.compare(rep["results"])
    page = tmp_path / "report.html"
    page.write_text(html.render_html(rep))
    got = measured(page, "measure", width, tmp_path, MEASURE)
    title = html.headline(rep)
    assert got["title"] == title and got["first_text"] == title
    assert got["scroll"] <= got["inner"], "the page itself must not run off the screen sideways"
    assert got["tables_unscrollable"] == 0
    assert got["charts"] == 3
    # detection: a, c detected some of the 4 classes (b never drains); lost: a, c (b lost too); ETTR: 3
    assert got["bars"] >= 4 + 2 + 3 and got["p95"] == 0  # one fault per class: p95 = p50, no tick
    assert got["overlaps"] == 0, "a value label overlaps another label"
    assert got["label_px"] >= 9  # readable at 420 px: the chart scrolls rather than shrinks
    shot = tmp_path / f"replay-{width}.png"
    browse(page, width, tmp_path, f"--screenshot={shot}")
    w, h, rows = png_pixels(shot, 80)
    assert (w, h) == (width, 2400)
    red = bytes.fromhex(html.RED[1:])  # the banner's edge: a target was missed
    top = [px for row in rows for px in row]
    assert sum(1 for px in top if all(abs(a - b) <= 12 for a, b in zip(px, red))) > 100
    keep = os.environ.get("SLURMADM_REPORT_SHOTS")
    if keep:
        shutil.copy(shot, keep)
