"""The report: comparison with the previous sweep, chart geometry, a self-contained page."""

from __future__ import annotations

from pathlib import Path

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
                                        "verdict_changed": False, "slower": False}
    assert cmp["nodes"]["b200-002"]["verdict_changed"] is True
    assert cmp["pairs"]["b200-001+b200-002"]["change"] == pytest.approx(-0.75)  # same pair, either order
    assert cmp["pairs"]["b200-001+b200-002"]["slower"] is True  # past the default 10 %
    assert cmp["nodes"]["b200-002"]["slower"] is True  # 470 -> 120
    assert report.compare(summary(), None) == {"sweep_id": None, "nodes": {}, "pairs": {}}


def test_bar_chart_axis_starts_at_zero_with_round_ticks_and_marks_floor_and_previous():
    chart = report.bar_chart([{"label": "a", "value": 100.0, "status": "pass", "previous": 130.0},
                              {"label": "b", "value": None, "status": "skip", "previous": None}], 40.0, "GB/s")
    a, b = chart["bars"]
    ticks = [t["text"] for t in chart["ticks"]]
    assert ticks[0] == "0" and ticks[-1] == "150" and len(ticks) == 4  # 0, 50, 100, 150
    plot_x, plot_w = chart["plot_x"], chart["plot_w"]
    assert chart["ticks"][0]["x"] == plot_x and chart["ticks"][-1]["x"] == pytest.approx(plot_x + plot_w)
    assert a["width"] == pytest.approx(plot_w * 100 / 150, abs=0.1)
    assert a["prev_x"] == pytest.approx(plot_x + plot_w * 130 / 150, abs=0.1)
    assert chart["floor_x"] == pytest.approx(plot_x + plot_w * 40 / 150, abs=0.1)
    # the value label starts right of the previous mark when the node got slower: never covered
    assert a["value_x"] > a["prev_x"] + 4 and a["delta"] == "▼23%"
    assert b["width"] == 0 and b["value_text"] == "no result (skip)"
    assert chart["has_previous"] is True and chart["statuses"] == ["pass", "skip"]
    assert report.bar_chart([{"label": "x", "value": None, "status": "skip"}], None, "GB/s") is None


@pytest.mark.parametrize("top,last", [(0.37, 0.4), (4.6, 5), (480, 500), (1234, 1250), (3, 3)])
def test_nice_ticks(top, last):
    ticks = report.nice_ticks(top)
    assert ticks[0] == 0 and ticks[-1] >= top and ticks[-1] == pytest.approx(last)
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1


def test_a_bar_takes_the_colour_of_its_own_test_not_the_node_verdict():
    s = summary()
    s["nodes"][1]["busbw_gbps"] = 470.0  # b200-002 failed its health test, not the bandwidth
    s["nodes"][1]["failed_test"] = "health"
    s["nodes"][1]["tests"].append({"test": "allreduce-node", "status": "pass", "detail": "", "value": 470.0,
                                   "unit": "GB/s", "duration_s": 3.0, "data": {}})
    s["previous"] = report.compare(s, None)
    bars = {b["label"]: b for b in report.charts(s)["nodes"]["bars"]}
    assert bars["b200-002"]["status"] == "pass" and bars["b200-002"]["color"] == report.COLORS["pass"]
    assert bars["b200-001"]["status"] == "none"  # no allreduce-node result: grey, not green


def test_verdict_banner_counts_and_names_the_failure():
    s = summary()
    s["previous"] = report.compare(s, None)
    v = report.verdict(s)
    assert v["level"] == "fail" and v["counts"] == {"pass": 1, "warn": 0, "straggler": 0, "fail": 1, "skipped": 0}
    assert v["text"] == ("1/2 FAIL: b200-002 allreduce-node: busbw 120 GB/s < floor 300 → drained; "
                         "1/2 pass")
    s["status"] = "interrupted"
    assert report.verdict(s)["text"].startswith("INTERRUPTED: 1/2 FAIL")


def test_slowdowns_beyond_the_site_percentage_are_warnings():
    now = summary(slowdown_warn_percent=20.0, nodes=[{**summary()["nodes"][0], "busbw_gbps": 370.0}], pairs=[])
    before = summary(nodes=[{**summary()["nodes"][0], "busbw_gbps": 480.0}])
    now["previous"] = report.compare(now, before)
    assert now["previous"]["nodes"]["b200-001"]["slower"] is True  # -23 % past 20 %
    w = report.slowdowns(now)
    assert [x["what"] for x in w] == ["b200-001"]
    assert "b200-001: single-node busbw 370 GB/s, -23% since the previous sweep" in w[0]["text"]
    v = report.verdict(now)
    assert v["level"] == "warn" and v["counts"]["warn"] == 1
    assert v["text"].startswith("1/1 WARN: b200-001 busbw -23% since the previous sweep")
    html = report.render_html(now)
    assert 'id="slowdowns"' in html and "-23% since the previous sweep" in html
    now["slowdown_warn_percent"] = 30.0
    now["previous"] = report.compare(now, before)
    assert report.slowdowns(now) == [] and report.verdict(now)["level"] == "pass"


def test_no_previous_sweep_means_no_previous_columns_or_legend():
    s = summary()
    s["previous"] = report.compare(s, None)
    html = report.render_html(s)
    assert "previous sweep</th>" not in html and "<th>previous</th>" not in html
    assert "mk prev-mk" not in html and 'class="prev"' not in html
    assert "No earlier sweep in the store" in html


def test_job_ids_link_to_their_output_relative_to_the_report():
    s = summary()
    s["nodes"][0]["output"] = "jobs/slurmadm-burnin.20261130-013000.b200-001.out"
    s["pairs"][0]["output"] = "jobs/slurmadm-burnin.20261130-013000.r1.b200-001+b200-002.out"
    s["previous"] = report.compare(s, None)
    html = report.render_html(s)
    assert '<a href="jobs/slurmadm-burnin.20261130-013000.b200-001.out">11</a>' in html
    assert '<a href="jobs/slurmadm-burnin.20261130-013000.r1.b200-001+b200-002.out">13</a>' in html
    assert report.output_link("/abs/path.out") is None  # only paths relative to the report


def test_times_carry_their_time_zone():
    assert report.fmt_time("2026-11-30T01:30:00+00:00") == "2026-11-30 01:30:00 UTC"
    assert report.fmt_time("2026-11-30T01:30:00+05:30") == "2026-11-30 01:30:00 UTC+05:30"
    assert report.fmt_time("2026-11-30T01:30:00") == "2026-11-30 01:30:00 (local time)"


def test_nodes_missing_from_the_pair_tests_say_why():
    s = summary(pairs=[])
    s["nodes"].append({**s["nodes"][0], "node": "b200-003", "verdict": "skipped", "detail": "job did not start"})
    why = report.not_paired(s)
    assert "failed phase 1 (allreduce-node)" in why["b200-002"]
    assert why["b200-003"] == "not tested in phase 1: job did not start"


def test_grid_of_nodes_by_checks_carries_measured_values():
    s = summary()
    s["nodes"][0]["tests"] = [{"test": "health", "status": "pass", "detail": "2 checks passed", "value": None,
                               "unit": "", "duration_s": 1.0, "data": {"checks": [
                                   {"check_id": "thermal", "status": "pass", "detail": "max 41 C", "value": 41.0},
                                   {"check_id": "nvlink", "status": "pass", "detail": "144 links up", "value": None}]}}]
    grid = report.check_grid(s)
    assert [c["name"] for c in grid["columns"]] == ["stress", "thermal", "nvlink"]
    cells = grid["rows"][0]["cells"]
    assert cells["check:thermal"]["text"] == "41" and cells["check:nvlink"]["text"] == "144 links up"
    assert "test:stress" not in cells and grid["rows"][1]["cells"]["test:stress"]["text"] == "700 TFLOPS"


def test_page_is_self_contained_and_says_why(tmp_path):
    s = summary()
    s["previous"] = report.compare(s, summary(sweep_id="20261129-013000", nodes=[
        {**summary()["nodes"][1], "verdict": "pass", "busbw_gbps": 470.0}]))
    html = report.render_html(s)
    assert "slurmadm: burnin-allreduce-node: busbw 120 GB/s &lt; floor 300 [burnin]" in html
    assert html.count("<svg") == 2 and "<rect" in html and html.count("viewBox=") == 2
    assert '<meta name="viewport"' in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "b200-002: <span class=\"pass\">pass</span> &rarr; <span class=\"fail\">fail</span>" in html
    assert "busy" in html  # the node left out, and why
    title = html[html.index("<title>") + 7: html.index("</title>")]
    assert title.startswith("1/2 FAIL: b200-002") and report.verdict(s)["text"].replace("<", "&lt;") in html


def test_data_is_autoescaped(tmp_path):
    s = summary()
    s["nodes"][1]["detail"] = "<img src=x onerror=alert(1)>"
    s["previous"] = report.compare(s, None)
    html = report.render_html(s)
    assert "<img" not in html and "&lt;img src=x" in html


def test_notes_say_what_was_not_really_tested():
    s = summary(collective="gloo")
    s["nodes"][0]["tests"] = [{"test": "stress", "status": "warn", "data": {"device": "cpu"}},
                              {"test": "health", "status": "skip", "data": {}}]
    notes = report.notes(s)
    assert any("gloo on the CPU" in n for n in notes)
    assert any("No GPU was stressed on b200-001" in n for n in notes)
    assert any("health suite did not run on b200-001" in n for n in notes)


def test_burnin_status_lists_the_slowdowns_of_each_sweep(tmp_path):
    from click.testing import CliRunner

    from slurmadm.burnin import history
    from slurmadm.cli import cli
    from slurmadm.store import Store

    site = tmp_path / "site.toml"
    example = (Path(__file__).resolve().parents[3] / "site.example.toml").read_text()
    site.write_text(example.replace('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{tmp_path}/s.db"')
                    .replace('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{tmp_path}/a.jsonl"'))
    now = summary(nodes=[{**summary()["nodes"][0], "busbw_gbps": 370.0}], pairs=[])
    now["previous"] = report.compare(now, summary(nodes=[{**summary()["nodes"][0], "busbw_gbps": 480.0}]))
    with Store(tmp_path / "s.db") as store:
        history.start_sweep(store, now["sweep_id"], pid=1, host="h", actor="root", nodes="b200-001")
        history.finish_sweep(store, now["sweep_id"], status="done", summary=now, report="")
        rows = history.sweeps(store)
    assert rows[0]["warnings"] and "b200-001: single-node busbw 370 GB/s, -23%" in rows[0]["warnings"][0]
    r = CliRunner().invoke(cli, ["burnin", "status", "--site", str(site)])
    assert r.exit_code == 0, r.output
    header, row = r.output.splitlines()[:2]
    assert header.split()[-2:] == ["warn", "straggler"] and row.split()[-2:] == ["1", "0"]
    assert "slower: b200-001: single-node busbw 370 GB/s" in r.output
