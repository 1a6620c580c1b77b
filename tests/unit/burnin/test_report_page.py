"""The burn-in report as people see it: rendered from a real sweep's summary and opened in a
headless Chromium (Debian's `chromium`, installed by scripts/install-system-deps.sh) at 1400 and
420 pixels wide.

The fixture tests/fixtures/burnin/sweep-nvlink-down.json is the summary.json of a real dev-cluster
sweep (`slurmadm dev-cluster gpu-fault b200-002 --gpu 1 --kind nvlink-down --value 2`, then
`slurmadm burnin run` after a clean sweep): one node failed, two got slower than the previous
sweep, all on the CPU stand-in. Its floors are raised here (0.3 GB/s per node, 0.5 per pair, still
below every bar) so the floor line crosses the bars, the case where it used to hide, and b200-003
is made 4 % slower than its previous sweep, the case where the previous mark covered the label.

Two views of the same page: a screenshot per width (kept in $SLURMADM_REPORT_SHOTS when set, for
a person to look at; checked here for the banner's colour), and the page's layout measured by
the browser itself: a copy of the page with a test-only script that writes the measurements
into the DOM, read back with `--dump-dom`. The report itself has no script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from slurmadm.burnin import report

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "burnin" / "sweep-nvlink-down.json"
WIDTHS = (1400, 420)

def measure_script(body: str) -> str:
    """A script for the end of a page: `body` (JavaScript, with box(el) and overlap(a, b) at hand)
    fills `out`, which lands in <pre id="measure"> as JSON."""
    return "\n<script>\n(function () {\n" + _MEASURE_HELPERS + body + _MEASURE_END


_MEASURE_HELPERS = r"""  function box(el) { var r = el.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, h: r.height}; }
  function overlap(a, b) { return a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b; }
"""
_MEASURE_END = r"""  var pre = document.createElement("pre"); pre.id = "measure"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def measured(page: Path, name: str, width: int, tmp: Path, script: str) -> dict:
    """`page` with `script` at its end, opened in headless Chromium at `width`: what it measured."""
    out = page.with_name(f"{name}-{width}.html")
    out.write_text(page.read_text().replace("</body>", script + "</body>"))
    dom = browse(out, width, tmp, "--dump-dom", "--virtual-time-budget=5000").stdout
    return json.loads(re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S).group(1).replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"'))


# Measures what a reader would notice; results land in <pre id="measure"> as JSON.
MEASURE = measure_script(r"""
  var out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
             title: document.title, first_text: document.body.innerText.trim().split("\n")[0],
             charts: []};
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var c = {covered: 0, prev: 0, bars: [], floor_after_bars: null, floor_stroke: null, ticks: [],
             label_px: null, unit: "", clipped_labels: 0};
    var rects = Array.from(svg.querySelectorAll("rect.bar"));
    svg.querySelectorAll("g").forEach(function (g) {
      var val = g.querySelector("text.val"), prev = g.querySelector("line.prev"), rect = g.querySelector("rect.bar");
      c.bars.push({status: rect.getAttribute("class").replace("bar bar-", ""), fill: rect.getAttribute("fill")});
      if (prev) { c.prev++; if (overlap(box(val), box(prev))) c.covered++; }
    });
    var floor = svg.querySelector(":scope > line.floor");
    if (floor) {
      var last = rects[rects.length - 1];
      c.floor_after_bars = !!(last.compareDocumentPosition(floor) & Node.DOCUMENT_POSITION_FOLLOWING);
      var st = getComputedStyle(floor);
      c.floor_stroke = st.stroke; c.floor_width = parseFloat(st.strokeWidth);
      var fb = box(floor); c.floor_crosses = rects.filter(function (r) { var b = box(r); return b.l < fb.l && fb.l < b.r; }).length;
    }
    svg.querySelectorAll("text.tick").forEach(function (t) { c.ticks.push(t.textContent); });
    var lbl = svg.querySelector("text.lbl"); c.label_px = box(lbl).h;
    var sb = box(svg);
    svg.querySelectorAll("text.lbl").forEach(function (t) { if (box(t).l < sb.l - 1) c.clipped_labels++; });
    c.viewbox = svg.getAttribute("viewBox");
    out.charts.push(c);
  });
  out.tables_unscrollable = Array.from(document.querySelectorAll("table")).filter(function (t) {
    return !t.closest(".scroll") && box(t).r > window.innerWidth + 1; }).length;
  out.links = Array.from(document.querySelectorAll("#nodes a, #pairs a")).map(function (a) { return a.getAttribute("href"); });
""")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is missing: scripts/install-system-deps.sh installs Debian's chromium"
    return exe


def browse(page: Path, width: int, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-extensions", f"--user-data-dir={tmp / 'profile'}", f"--window-size={width},2400",
            *args, page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def png_pixels(path: Path, max_rows: int) -> tuple[int, int, list[list[bytes]]]:
    """Width, height and the first `max_rows` rows of RGB pixels of an 8-bit PNG (enough for
    Chromium's screenshots)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(min(height, max_rows)):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([bytes(line[k:k + 3]) for k in range(0, stride, bpp)])
        prev = line
    return width, height, rows


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    s = json.loads(FIXTURE.read_text())
    s["floors"]["node_busbw_gbps"] = {n: 0.3 for n in s["floors"]["node_busbw_gbps"]}
    s["floors"]["pair_busbw_gbps"] = 0.5
    # b200-003 a little slower than last time: the previous mark lands right where the value
    # label starts when the label is placed at the bar's end
    now = next(n for n in s["nodes"] if n["node"] == "b200-003")["busbw_gbps"]
    s["previous"]["nodes"]["b200-003"].update(busbw_gbps=now * 1.04, change=-0.04 / 1.04, slower=False)
    out = tmp_path_factory.mktemp("report") / "20261201-084209"
    out.mkdir()
    (out / "report.html").write_text(report.render_html(s))
    return out / "report.html"


@pytest.mark.parametrize("width", WIDTHS)
def test_report_reads_well_in_a_real_browser(page, width, tmp_path):
    m = measured(page, "measure", width, tmp_path, MEASURE)

    verdict = report.verdict(json.loads(FIXTURE.read_text()))["text"]
    assert verdict.startswith("1/4 FAIL: b200-002 nvlink: GPU1 2/18 NVLinks inactive (links 0,1) → drained")
    assert m["title"].startswith(verdict) and m["first_text"] == verdict  # the verdict comes first
    assert m["scroll"] <= m["inner"], "the page itself must not run off the screen sideways"
    assert m["tables_unscrollable"] == 0
    nodes, pairs = m["charts"]
    for c in (nodes, pairs):
        assert c["viewbox"].startswith("0 0 ")
        assert c["ticks"][0] == "0" and c["ticks"][-1] == "bus bandwidth, GB/s" and len(c["ticks"]) >= 4
        assert c["floor_after_bars"] is True and c["floor_width"] >= 2 and c["floor_stroke"] != "rgb(255, 255, 255)"
        assert c["floor_crosses"] == len(c["bars"])  # the floor line runs through every bar, drawn over them
        assert c["covered"] == 0  # no previous-sweep mark on a value label
        assert c["label_px"] >= 9  # still readable at 420 px: the chart scrolls rather than shrinks
        assert c["clipped_labels"] == 0
    # colour by the bar's own test: b200-002 failed nvlink, its all-reduce passed: its bar is green
    assert [b["status"] for b in nodes["bars"]] == ["pass"] * 4
    assert {b["fill"] for b in nodes["bars"]} == {report.COLORS["pass"]}
    assert nodes["prev"] == 4 and pairs["prev"] == 0  # the pairs had no counterpart last sweep
    assert m["links"][0] == "jobs/slurmadm-burnin.20261201-084209.b200-001.out"

    shot = tmp_path / f"report-{width}.png"
    browse(page, width, tmp_path, f"--screenshot={shot}")
    w, h, rows = png_pixels(shot, 120)
    assert (w, h) == (width, 2400)
    # the banner is the first thing on the page: its red edge sits in the top rows at the left
    red = bytes.fromhex(report.COLORS["fail"][1:])
    top = [px for row in rows for px in row[:80]]
    assert sum(1 for px in top if all(abs(a - b) <= 12 for a, b in zip(px, red))) > 200
    keep = os.environ.get("SLURMADM_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


def test_the_page_loads_nothing_from_anywhere(page):
    html = page.read_text()
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "url(" not in html
