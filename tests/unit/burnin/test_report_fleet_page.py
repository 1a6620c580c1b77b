"""The report's fleet section in a headless Chromium (as test_report_page.py): the banner counts
the straggler apart from failures, one distribution chart per metric with every node's position
(the straggler's dot red, labelled, nothing overlapping, nothing clipped), the trend table.

The page is rendered from the summary the sweep logic writes after two sweeps over eight nodes
(fake Slurm, real store; tests/unit/burnin/test_straggler_sweep.py), the second of which drains
b200-008 as a straggler."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from slurmadm.burnin import report
from slurmadm.site import parse_site

from tests.unit.burnin.test_report_page import browse, measure_script, measured, png_pixels
from tests.unit.burnin.test_straggler_sweep import one_sweep
from tests.unit.burnin.test_sweep_logic import EXAMPLE, FakeSlurm, fleet

pytestmark = pytest.mark.unit

MEASURE = measure_script(r"""
  var out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, title: document.title,
             counts: document.querySelector(".counts").innerText, dists: []};
  document.querySelectorAll("svg.dist").forEach(function (svg) {
    var sb = box(svg), labels = Array.from(svg.querySelectorAll("text.name")), c = {id: svg.id, dots: [], clipped: 0,
      overlaps: 0, refs: [], label_px: labels.length ? box(labels[0]).h : null, labels: labels.map(function (t) { return t.textContent; })};
    svg.querySelectorAll("g.node").forEach(function (g) {
      var d = g.querySelector("circle"), b = box(d);
      c.dots.push({node: g.dataset.node, level: g.dataset.level, fill: d.getAttribute("fill"), cx: (b.l + b.r) / 2});
    });
    var texts = Array.from(svg.querySelectorAll("text"));
    texts.forEach(function (t) { var b = box(t); if (b.l < sb.l - 1 || b.r > sb.r + 1 || b.b > sb.b + 1) c.clipped++; });
    for (var i = 0; i < labels.length; i++) for (var j = i + 1; j < labels.length; j++)
      if (overlap(box(labels[i]), box(labels[j]))) c.overlaps++;
    svg.querySelectorAll("line.ref").forEach(function (l) { c.refs.push(l.getAttribute("class")); });
    out.dists.push(c);
  });
  out.trend = Array.from(document.querySelectorAll("#trend tr")).map(function (r) { return r.innerText; });
""")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("fleet-report")
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp}/s.db")
    site = parse_site(text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp}/audit.jsonl"))
    slurm = FakeSlurm(fleet(40))
    first, _ = one_sweep(site, tmp, slurm, 1, {"b200-008": 800.0})
    slurm.resume(["b200-008"])  # held for a re-test by the first: the second re-qualifies it
    _, summary = one_sweep(site, tmp, slurm, 2, {"b200-008": 800.0, "b200-007": 915.0},
                           prior={"b200-008": first.runs["b200-008"].reason})
    return Path(summary["report"]), summary


def test_banner_counts_the_straggler_apart(page):
    _, summary = page
    v = report.verdict(summary)
    assert v["counts"]["straggler"] == 1 and v["counts"]["fail"] == 0 and v["counts"]["warn"] == 1
    assert v["text"].startswith("1/8 STRAGGLER: b200-008 stress-tflops 800 = 80% of fleet median 1002 → drained; "
                                "1/8 WARN: b200-007 stress-tflops 915 = 91% of fleet median 1002")


@pytest.mark.parametrize("width", (1400, 420))
def test_distribution_charts_in_a_real_browser(page, width, tmp_path):
    path, summary = page
    m = measured(path, "measure-fleet", width, tmp_path, MEASURE)
    assert m["scroll"] <= m["inner"]
    assert "1 straggler" in m["counts"] and "0 fail" in m["counts"]
    ids = [c["id"] for c in m["dists"]]
    assert ids == ["dist-hgx-b200-stress-tflops", "dist-hgx-b200-stress-copy", "dist-hgx-b200-gpu-clock",
                   "dist-hgx-b200-gpu-temp", "dist-hgx-b200-allreduce-node", "dist-hgx-b200-thermal"]
    tflops = m["dists"][0]
    assert len(tflops["dots"]) == 8
    dots = {d["node"]: d for d in tflops["dots"]}
    assert dots["b200-008"]["level"] == "slow" and dots["b200-008"]["fill"] == report.COLORS["fail"]
    assert dots["b200-007"]["level"] == "warn" and dots["b200-007"]["fill"] == report.COLORS["warn"]
    assert dots["b200-008"]["cx"] < dots["b200-007"]["cx"] < dots["b200-001"]["cx"]  # position on the axis
    assert tflops["labels"] == ["b200-008 80%", "b200-007 91%"]
    assert tflops["refs"] == ["ref ref-median", "ref ref-warn", "ref ref-slow"]
    for c in m["dists"]:
        assert c["clipped"] == 0 and c["overlaps"] == 0, c
    assert tflops["label_px"] >= 9  # readable at 420 px: the chart scrolls rather than shrinks
    # the trend: b200-008's share in both sweeps, oldest first
    row = next(r for r in m["trend"] if r.startswith("b200-008"))
    assert "80% 80%" in row

    shot = tmp_path / f"fleet-{width}.png"
    browse(path, width, tmp_path, f"--screenshot={shot}")
    w, h, rows = png_pixels(shot, 120)
    assert (w, h) == (width, 2400)
    orange = bytes.fromhex(report.COLORS["warn"][1:])  # the banner: stragglers warn, nothing failed
    top = [px for row in rows for px in row[:80]]
    assert sum(1 for px in top if all(abs(a - b) <= 12 for a, b in zip(px, orange))) > 200
    keep = os.environ.get("SLURMADM_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
