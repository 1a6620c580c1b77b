"""The burn-in report at the reference size (issue 27): 128 nodes, the real pair plan's 64 pairs a
round over four scalable units, two sweeps so there is a previous one and a trend
(tests/unit/burnin/sweep128.py: the real sweep logic, fake Slurm, real store). Three nodes fail
phase 1, one node's pairs are slow (bisected and drained), one node is a straggler and one warns.

What must hold for the admin reading it: the verdict first; each table leads with what needs a
look and keeps every row in a closed <details>; the passed nodes named by one hostlist; the bar
charts of 128 and 126 bars keep one readable label per bar (none overlapping, >= 9 px); the
distribution charts keep their height when 124 alike nodes meet at the median (a count instead of
a 124-dot tower), nothing in them overlapping. Measured in a headless Chromium at 1400 and 420
pixels as test_report_page.py does, plus a screenshot (kept in $SLURMADM_REPORT_SHOTS when set)."""

from __future__ import annotations

import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from slurmadm.burnin import report
from slurmadm.site import parse_site

from tests.unit.burnin.sweep128 import NODES, big_sweep
from tests.unit.burnin.test_report_page import browse, measure_script, measured, png_pixels
from tests.unit.burnin.test_sweep_logic import EXAMPLE, FakeSlurm, fleet

pytestmark = pytest.mark.unit

FAILS = {"b200-007": "ecc-uncorrected: GPU2 volatile uncorrected ECC=1",
         "b200-050": "nvlink: GPU1 2/18 NVLinks inactive", "b200-101": "gpu-count: 7 of 8 GPUs"}

MEASURE = measure_script(r"""
  var out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
             height: document.documentElement.scrollHeight, first_text: document.body.innerText.trim().split("\n")[0],
             charts: [], dists: [], shown: {}};
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var labels = Array.from(svg.querySelectorAll("text.lbl")), c = {bars: svg.querySelectorAll("rect.bar").length,
      overlaps: 0, min_px: 99, height: box(svg).h};
    labels.forEach(function (t) { c.min_px = Math.min(c.min_px, box(t).h); });
    for (var i = 1; i < labels.length; i++) if (overlap(box(labels[i - 1]), box(labels[i]))) c.overlaps++;
    out.charts.push(c);
  });
  document.querySelectorAll("svg.dist").forEach(function (svg) {
    var texts = Array.from(svg.querySelectorAll("text")), sb = box(svg), c = {id: svg.id, height: sb.h, overlaps: [],
      clipped: 0, dots: svg.querySelectorAll("circle").length,
      counts: Array.from(svg.querySelectorAll("text.count")).map(function (t) { return t.textContent; })};
    for (var i = 0; i < texts.length; i++) {
      var bi = box(texts[i]);
      if (bi.l < sb.l - 1 || bi.r > sb.r + 1 || bi.t < sb.t - 1) c.clipped++;
      for (var j = i + 1; j < texts.length; j++)
        if (overlap(bi, box(texts[j]))) c.overlaps.push(texts[i].textContent + " / " + texts[j].textContent);
    }
    out.dists.push(c);
  });
  ["nodes", "nodes-all", "pairs", "pairs-all", "grid", "grid-all", "trend", "trend-all"].forEach(function (id) {
    var t = document.getElementById(id); out.shown[id] = t ? (t.checkVisibility ? t.checkVisibility() : box(t).h > 0) : null; });
""")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("report128")
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp}/s.db")
    site = parse_site(text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp}/audit.jsonl"))
    slurm = FakeSlurm(fleet(128))
    first, _ = big_sweep(site, tmp, slurm, 1, slow={"b200-090": 800.0}, fails={})
    slurm.resume(["b200-090"])  # held for a re-test by the first: the second re-qualifies it
    _, summary = big_sweep(site, tmp, slurm, 2, slow={"b200-090": 800.0, "b200-091": 915.0}, fails=FAILS,
                           bad_link="b200-033", prior={"b200-090": first.runs["b200-090"].reason})
    return Path(summary["report"]), summary


class Tables(HTMLParser):
    """Rows (lists of cell texts) of every table by id, and whether it sits in a <details>."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.in_details: dict[str, bool] = {}
        self.items: dict[str, list[str]] = {}
        self._table = self._list = None
        self._details = 0
        self._row: list[str] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "details":
            self._details += 1
        elif tag == "table" and a.get("id"):
            self._table = a["id"]
            self.rows[self._table], self.in_details[self._table] = [], self._details > 0
        elif tag == "ul" and a.get("id"):
            self._list, self.items[a["id"]] = a["id"], []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "li"):
            self._text = []

    def handle_endtag(self, tag):
        if tag == "details":
            self._details -= 1
        elif tag == "table":
            self._table = None
        elif tag == "ul":
            self._list = None
        elif tag == "td" and self._row is not None:
            self._row.append(" ".join("".join(self._text).split()))
        elif tag == "li" and self._list:
            self.items[self._list].append(" ".join("".join(self._text).split()))
        elif tag == "tr" and self._table and self._row:
            self.rows[self._table].append(self._row)
            self._row = None

    def handle_data(self, data):
        self._text.append(data)


def test_the_tables_lead_with_what_needs_a_look_and_keep_every_row(sweep):
    path, summary = sweep
    assert len(summary["nodes"]) == 128
    # round 1 pairs within each scalable unit the 125 nodes that passed phase 1 (the clean first sweep: 64)
    assert len([p for p in summary["pairs"] if p["round"] == 1]) == 15 + 15 + 16 + 15
    verdict = report.verdict(summary)["text"]
    assert verdict.startswith("4/128 FAIL: b200-007 ecc-uncorrected") and "; and 1 more" in verdict
    html = path.read_text()
    t = Tables()
    t.feed(html)
    # nodes: the 6 that are not a plain pass first, in the open; all 128 in a closed <details>
    assert [r[0] for r in t.rows["nodes"]] == ["b200-007", "b200-033", "b200-050", "b200-090", "b200-091", "b200-101"]
    assert [r[1] for r in t.rows["nodes"]] == ["fail", "fail", "fail", "straggler", "warn", "fail"]
    assert not t.in_details["nodes"] and t.in_details["nodes-all"]
    assert [r[0] for r in t.rows["nodes-all"]] == NODES
    text = " ".join(re.sub(r"<[^>]+>", "", html).split())
    assert "the other 122 passed: b200-[001-006,008-032,034-049,051-089,092-100,102-128]" in text
    # pairs: the failed and slower ones first; every pair test under <details>
    bad = [r for r in t.rows["pairs"]]
    assert bad and all("b200-033" in r[2] for r in bad), bad
    assert {r[3] for r in bad} >= {"fail"}
    assert len(t.rows["pairs-all"]) == len(summary["pairs"]) and t.in_details["pairs-all"]
    # the grid and the trend: only rows with something to see in the open
    assert [r[0] for r in t.rows["grid"]] == ["b200-007", "b200-033", "b200-050", "b200-101"]
    assert len(t.rows["grid-all"]) == 128 and t.in_details["grid-all"]
    assert [r[0] for r in t.rows["trend"]] == ["b200-090", "b200-091"]
    assert len(t.rows["trend-all"]) >= 124 and t.in_details["trend-all"]
    # nodes left out of the pairs for one reason: one line with their hostlist
    assert t.items["not-paired"] == ["b200-[007,050,101]: failed phase 1 (health): not paired, so a bad node "
                                     "cannot fail a pair"]
    # tests per node: the six open to read, the 122 passed ones inside one closed <details>
    before, after = html.split('<details id="other-nodes-tests">')
    assert len(re.findall(r"<details( open)?><summary><b>b200-", before)) == 6
    assert after.split("</details>\n</details>")[0].count("<details") == 122


@pytest.mark.parametrize("width", (1400, 420))
def test_128_nodes_read_well_in_a_real_browser(sweep, width, tmp_path):
    path, _ = sweep
    m = measured(path, "measure128", width, tmp_path, MEASURE)
    assert m["first_text"].startswith("4/128 FAIL: b200-007")
    assert m["scroll"] <= m["inner"], "the page itself must not run off the screen sideways"
    assert m["shown"] == {"nodes": True, "nodes-all": False, "pairs": True, "pairs-all": False, "grid": True,
                          "grid-all": False, "trend": True, "trend-all": False}  # every row there, folded away
    nodes, pairs = m["charts"]
    assert nodes["bars"] == 128 and pairs["bars"] > 64
    for c in (nodes, pairs):
        assert c["overlaps"] == 0, c  # one label per bar, none on the next
        assert c["min_px"] >= 9, c  # readable, at 420 px too (the chart scrolls rather than shrinks)
        assert c["height"] <= 16 * (c["bars"] + 6), c  # dense bars: not the 24 px a bar of a small sweep
    by_id = {d["id"]: d for d in m["dists"]}
    tflops = by_id["dist-hgx-b200-stress-tflops"]
    assert tflops["dots"] == 124  # every passed node still drawn
    for d in m["dists"]:
        assert d["overlaps"] == [] and d["clipped"] == 0, d
        assert d["height"] <= 260, d  # capped stacks: 124 alike nodes are not a 1,600 px tower
    assert by_id["dist-hgx-b200-stress-copy"]["counts"] == ["124 nodes"]

    shot = tmp_path / f"report128-{width}.png"
    browse(path, width, tmp_path, f"--screenshot={shot}")
    w, h, rows = png_pixels(shot, 120)
    assert (w, h) == (width, 2400)
    red = bytes.fromhex(report.COLORS["fail"][1:])  # the failing banner is the first thing on the page
    top = [px for row in rows for px in row[:80]]
    assert sum(1 for px in top if all(abs(a - b) <= 12 for a, b in zip(px, red))) > 200
    keep = os.environ.get("SLURMADM_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
