"""The report: comparison with the previous sweep, chart geometry, a self-contained page."""

from __future__ import annotations

import pytest

from slurmadm.burnin import report

pytestmark = pytest.mark.unit


def summary(**over):
    base = {
        "sweep_id": "20261130-013000", "status": "done", "cluster": "b200", "site": "/etc/slurmadm/site.toml",
        "started": "2026-11-30T01:30:00", "finished": "2026-11-30T02:10:00", "duration_s": 2400.0,
        "collective": "nccl", "reservation": "slurmadm_burnin", "qos": "burnin", "account": "ops-burnin",
        "floors": {"pair_busbw_gbps": 40.0, "node_busbw_gbps": {"b200-001": 300.0, "b200-002": 300.0}},
        "selection": {"chosen": {"b200-001": "idle", "b200-002": "idle"}, "skipped": {"b200-003": "busy"},
                      "in_window": True},
        "nodes": [
            {"node": "b200-001", "why": "idle", "verdict": "pass", "detail": "", "failed_test": "", "job_id": "11",
             "busbw_gbps": 480.0, "action": "", "reason": "", "prior_reason": "", "tests": []},
            {"node": "b200-002", "why": "idle", "verdict": "fail", "detail": "busbw 120 GB/s < floor 300",
             "failed_test": "allreduce-node", "job_id": "12", "busbw_gbps": 120.0, "action": "drained",
             "reason": "slurmadm: burnin-allreduce-node: busbw 120 GB/s < floor 300 [burnin]", "prior_reason": "",
             "tests": [{"test": "stress", "status": "pass", "detail": "8 GPUs", "value": 700.0, "unit": "TFLOPS",
                        "duration_s": 600.0, "data": {"device": "cuda"}}]},
        ],
        "pairs": [{"a": "b200-001", "b": "b200-002", "kind": "intra-unit", "round": 1, "status": "fail",
                   "busbw_gbps": 12.0, "algbw_gbps": 12.0, "detail": "busbw 12 GB/s < floor 40", "job_id": "13"}],
        "links": [], "pair_note": "", "exit_code": 1,
    }
    base.update(over)
    return base


def test_comparison_with_the_previous_sweep():
    before = summary(sweep_id="20261129-013000", nodes=[
        {**summary()["nodes"][0], "busbw_gbps": 400.0},
        {**summary()["nodes"][1], "verdict": "pass", "busbw_gbps": 470.0}],
        pairs=[{**summary()["pairs"][0], "a": "b200-002", "b": "b200-001", "busbw_gbps": 48.0}])
    cmp = report.compare(summary(), before)
    assert cmp["sweep_id"] == "20261129-013000"
    assert cmp["nodes"]["b200-001"] == {"verdict": "pass", "busbw_gbps": 400.0, "change": pytest.approx(0.2),
                                        "verdict_changed": False}
    assert cmp["nodes"]["b200-002"]["verdict_changed"] is True
    assert cmp["pairs"]["b200-001+b200-002"]["change"] == pytest.approx(-0.75)  # same pair, either order
    assert report.compare(summary(), None) == {"sweep_id": None, "nodes": {}, "pairs": {}}


def test_bar_chart_scales_to_the_largest_value_and_marks_floor_and_previous():
    chart = report.bar_chart([{"label": "a", "value": 100.0, "status": "pass", "previous": 50.0},
                              {"label": "b", "value": None, "status": "skip", "previous": None}], 40.0, "GB/s")
    plot = report.CHART_W - report.LABEL_W - report.VALUE_W
    a, b = chart["bars"]
    assert a["width"] == pytest.approx(plot / 1.1, abs=0.1)  # 10 % headroom above the largest
    assert a["prev_x"] == pytest.approx(report.LABEL_W + plot * 50 / 110, abs=0.1)
    assert chart["floor_x"] == pytest.approx(report.LABEL_W + plot * 40 / 110, abs=0.1)
    assert b["width"] == 0 and b["value_text"] == "skip"
    assert report.bar_chart([{"label": "x", "value": None, "status": "skip"}], None, "GB/s") is None


def test_page_is_self_contained_and_says_why(tmp_path):
    s = summary()
    s["previous"] = report.compare(s, summary(sweep_id="20261129-013000", nodes=[
        {**summary()["nodes"][1], "verdict": "pass", "busbw_gbps": 470.0}]))
    html = report.render_html(s)
    assert "slurmadm: burnin-allreduce-node: busbw 120 GB/s &lt; floor 300 [burnin]" in html
    assert html.count("<svg") == 2 and "<rect" in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "b200-002: <span class=\"pass\">pass</span> &rarr; <span class=\"fail\">fail</span>" in html
    assert "busy" in html  # the node left out, and why


def test_notes_say_what_was_not_really_tested():
    s = summary(collective="gloo")
    s["nodes"][0]["tests"] = [{"test": "stress", "status": "warn", "data": {"device": "cpu"}},
                              {"test": "health", "status": "skip", "data": {}}]
    notes = report.notes(s)
    assert any("gloo on the CPU" in n for n in notes)
    assert any("No GPU was stressed on b200-001" in n for n in notes)
    assert any("health suite did not run on b200-001" in n for n in notes)
