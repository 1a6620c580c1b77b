"""`slurmadm report reliability` (slurmadm/report/): the day's GPU-hours add up, out-of-service
time by cause, MTBF/MTTR/ETTR, the costliest nodes; the page in a headless Chromium."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time

import pytest

from slurmadm.jobs import failures
from slurmadm.report import html, reliability
from slurmadm.site import parse_site
from slurmadm.slurm.sacct import JobRun
from slurmadm.store import Store
from tests.unit.burnin.test_report_page import browse, measure_script, measured, png_pixels
from tests.unit.repair.test_leaf import INCIDENTS
from tests.unit.siteedit import edited

pytestmark = pytest.mark.unit

DAY0 = dt.datetime(2026, 11, 30).timestamp()  # local midnight
H = 3600.0


def run(job, state, node, start_h, end_h, gpus=8, account="ml", **kw):
    start, end = DAY0 + start_h * H, DAY0 + end_h * H
    return JobRun(job_id=job, name="j", user="alice", account=account, partition="gpu", qos="normal", state=state,
                  cancelled_by=kw.pop("by", ""), exit_code=kw.pop("exit_code", 0), signal=0, derived_exit=0,
                  reason="", submit=start, start=start, end=end, elapsed_s=end - start, nodes=node, gpus=gpus)


def result(store, node, ts, status="pass", detail="", check="xid"):
    store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                     " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (ts, "r", node, "periodic", check, status, "drain", detail, None, 1.0))


def event(store, ts, action, node, reason, detail="{}"):
    store.db.execute("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (?,?,?,?,?,?)",
                     (ts, "test", action, node, reason, detail))


@pytest.fixture(scope="module")
def site():
    return parse_site(edited(lambda d: None))


@pytest.fixture
def rep(tmp_path, site):
    with Store(tmp_path / "s.db") as store:
        if not store.db.execute("SELECT 1 FROM sqlite_master WHERE name='incidents'").fetchone():
            store.db.executescript(INCIDENTS)
        for node in ("b200-017", "b200-018"):
            for h in range(48):
                result(store, node, DAY0 + h * H + 60)
        # b200-017: GPU3 falls off the bus at 10:00 on day 1; incident opened, rebooting 11:00, closed 14:00
        result(store, "b200-017", DAY0 + 10 * H, "fail", "GPU3 XID 79 FALLEN_OFF_THE_BUS (RESTART_BM)")
        store.db.execute("INSERT INTO incidents (id, node, part_kind, part_key, slot, class, state, opened_ts, "
                         "updated_ts, closed_ts) VALUES ('r1', 'b200-017', 'gpu', 'SER3', '3', 'RESTART_BM', "
                         "'closed', ?, ?, ?)", (DAY0 + 10 * H, DAY0 + 14 * H, DAY0 + 14 * H))
        store.db.execute("INSERT INTO incident_events (incident_id, ts, kind, state) VALUES ('r1', ?, 'step', "
                         "'rebooting')", (DAY0 + 11 * H,))
        # b200-020: drained by health for 2 h (no incident); b200-030: BMC firmware maintenance for 1 h
        event(store, DAY0 + 30 * H, "node.drain", "b200-020", "slurmadm: ecc-uncorrected: GPU2 uncorrected 3")
        event(store, DAY0 + 32 * H, "node.resume", "b200-020", "clean")
        event(store, DAY0 + 40 * H, "bmc.drain", "b200-030", "firmware")
        event(store, DAY0 + 41 * H, "node.resume", "b200-030", "done")
        store.db.commit()
        runs = [run("1", "COMPLETED", "b200-018", 1, 9),
                run("2", "FAILED", "b200-017", 2, 10, exit_code=0),           # died with its GPU: infrastructure
                run("2", "COMPLETED", "b200-018", 15, 20),                      # its requeued run
                run("3", "FAILED", "b200-018", 25, 27, gpus=4, exit_code=1),  # the user's
                run("4", "CANCELLED", "b200-018", 28, 29, gpus=2, by="1000")]
        attributed = failures.attribute_all(store, runs)
        assert [a.line for a in attributed] == ["infrastructure: b200-017 GPU3 Xid 79 (incident r1)",
                                                "user: exit 1, no node signal"]
        yield reliability.build(site, runs, attributed, store, DAY0, DAY0 + 48 * H)


def test_every_days_gpu_hours_add_up(rep):
    assert [d["day"] for d in rep["days"]] == ["2026-11-30", "2026-12-01"]
    for d in rep["days"]:
        assert d["total"] == pytest.approx(1024 * 24)
        parts = sum(d.get(k, 0.0) for k in ("completed", "lost_infrastructure", "lost_user", "lost_unknown", "other",
                                            "out_of_service", "idle"))
        assert parts == pytest.approx(d["total"])
    d0, d1 = rep["days"]
    assert d0["completed"] == pytest.approx(8 * 8 + 8 * 5) and d0["lost_infrastructure"] == pytest.approx(8 * 8)
    assert d1["lost_user"] == pytest.approx(4 * 2) and d1["other"] == pytest.approx(2)
    assert d0["out_drained:RESTART_BM"] == pytest.approx(8) and d0["out_repair"] == pytest.approx(8 * 3)
    assert d1["out_drained:ecc-uncorrected"] == pytest.approx(16) and d1["out_maintenance"] == pytest.approx(8)
    assert rep["weeks"][0]["week"] == "2026-W49" and rep["weeks"][-1]["total"] > 0


def test_mtbf_mttr_ettr_and_the_costliest_nodes(rep):
    assert rep["mtbf_hours"]["node"] == {"b200-017": 48.0}
    assert rep["mtbf_hours"]["class"] == {"RESTART_BM": 48.0 * 128}
    assert rep["mtbf_hours"]["model"] == {"b200": 48.0 * 128}
    assert rep["mttr_hours"] == {"RESTART_BM": 4.0}
    e = rep["ettr"]
    # job 2: 8 h lost + 5 h done over 18 h of wall time; jobs 1, 3 (lost), 4 (its own cancel: productive)
    assert e["wall_gpu_hours"] == pytest.approx(8 * 8 + 8 * 18 + 4 * 2 + 2 * 1)
    assert e["productive_gpu_hours"] == pytest.approx(8 * 8 + 8 * 5 + 2 * 1)
    assert any("checkpoint" in a for a in e["assumptions"])
    top = rep["costliest_nodes"][0]
    assert top["node"] == "b200-017" and top["lost_gpu_hours"] == pytest.approx(64)
    assert top["out_of_service_gpu_hours"] == pytest.approx(32) and top["incidents"] == 1
    assert reliability.today(rep)["total"] == pytest.approx(1024 * 24)


MEASURE = measure_script(r"""
  var out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, title: document.title,
             first_text: document.body.innerText.trim().split("\n")[0],
             parts: document.querySelectorAll("svg.chart rect.part").length,
             scripts: document.querySelectorAll("script").length};
""")


@pytest.mark.parametrize("width", (1400, 420))
def test_the_page_reads_well_in_a_real_browser(rep, width, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.fail("chromium is missing: scripts/install-system-deps.sh installs Debian's chromium")
    page = tmp_path / "reliability.html"
    page.write_text(html.render_html(rep))
    text = page.read_text()
    assert "<script" not in text and " src=" not in text and " href=" not in text  # self-contained
    m = measured(page, "measure", width, tmp_path, MEASURE)
    title = html.headline(rep)
    assert title.startswith("2 days, 128 nodes: 64.0 GPU-h lost to infrastructure")
    assert m["title"] == title and m["first_text"] == title
    assert m["scroll"] <= m["inner"], "the page itself must not run off the screen sideways"
    assert m["parts"] >= 2 * 4  # two days, each stacked from at least four parts
    shot = tmp_path / f"reliability-{width}.png"
    browse(page, width, tmp_path, f"--screenshot={shot}")
    w, h, rows = png_pixels(shot, 80)
    assert (w, h) == (width, 2400)
    red = bytes.fromhex("c62828")  # the banner's edge: GPU-hours were lost to the infrastructure
    top = [px for row in rows for px in row]
    assert sum(1 for px in top if all(abs(a - b) <= 12 for a, b in zip(px, red))) > 100
    keep = os.environ.get("SLURMADM_REPORT_SHOTS")
    if keep:
        shutil.copy(shot, keep)


def test_the_exporter_carries_the_days_figures():
    from slurmadm.exporter.cache import Reading
    from slurmadm.exporter.head import cost_metrics

    day = {"day": "2026-12-01", "gpu_hours": {"completed": 10.0, "lost_infrastructure": 2.5, "idle": 100.0},
           "ettr": 0.8, "failed_runs": {"infrastructure": 1}}
    got = {m.name: m for m in cost_metrics(Reading(day, time.time(), False, "", 0.1))}
    hours = {s.labels["kind"]: s.value / 3600 for s in got["slurmadm_gpu_time_today_seconds"].samples}
    assert hours == {"completed": 10.0, "lost_infrastructure": 2.5, "idle": 100.0}
    assert got["slurmadm_ettr_today"].samples[0].value == 0.8
    assert got["slurmadm_failed_job_runs_today"].samples[0].labels == {"verdict": "infrastructure"}
    assert list(cost_metrics(Reading(None, 0.0, True, "sacct: no answer", 0.0))) == []


def test_a_day_without_failures_counts_every_verdict_as_zero():
    """The dashboard's "failed job runs by verdict" and its alerts read 0 on a quiet day, not "no data"."""
    from slurmadm.exporter.cache import Reading
    from slurmadm.exporter.head import cost_metrics
    from slurmadm.report.reliability import _verdict_counts

    counts = _verdict_counts([])
    assert counts == {"infrastructure": 0, "unknown": 0, "user": 0}
    day = {"day": "2026-12-01", "gpu_hours": {"idle": 100.0}, "ettr": None, "failed_runs": counts}
    got = {m.name: m for m in cost_metrics(Reading(day, time.time(), False, "", 0.1))}
    assert {s.labels["verdict"]: s.value for s in got["slurmadm_failed_job_runs_today"].samples} == counts
    assert "slurmadm_ettr_today" not in got  # no GPU job ran: no ratio to give


def test_the_windows_rma_cases_are_in_the_report(tmp_path, site):
    """Issue 35: the time from fault to RMA, the vendor's turnaround and RMAs per GPU model, in the
    report's JSON, its terminal line and its page; a window without cases says nothing of them."""
    import json as _json

    with Store(tmp_path / "s.db") as store:
        empty = reliability.build(site, [], [], store, DAY0, DAY0 + 48 * H)
        assert empty["rma"]["cases"] == 0 and html.rma_line(empty) == ""
        times = {"open": [DAY0 + 20 * H, DAY0 + 22 * H], "shipped": [DAY0 + 22 * H, DAY0 + 40 * H],
                 "replaced": [DAY0 + 40 * H, None]}
        store.db.execute("INSERT INTO rma_cases (ticket, node, kind, slot, part_key, model, class, state, fault_ts, "
                         "opened, updated, bundle, times, note) VALUES ('NV-1', 'b200-017', 'gpu', '3', 'SER3', "
                         "'NVIDIA B200', 'RESTART_BM', 'replaced', ?, ?, ?, '', ?, '')",
                         (DAY0 + 10 * H, DAY0 + 20 * H, DAY0 + 40 * H, _json.dumps(times)))
        store.db.commit()
        rep = reliability.build(site, [], [], store, DAY0, DAY0 + 48 * H)
    f = rep["rma"]
    assert (f["cases"], f["open"]) == (1, 1) and f["per_gpu_model"] == {"NVIDIA B200": 1}
    assert f["fault_to_rma"]["median_s"] == 10 * H and f["vendor_turnaround"]["median_s"] == 18 * H
    line = html.rma_line(rep)
    assert line == ("RMA: 1 case(s), 1 open; fault to RMA median 10.0 h over 1; vendor turnaround median 18.0 h "
                    "over 1; GPUs per model: NVIDIA B200 1")
    assert f'<p id="rma">{line}</p>' in html.render_html(rep)
    assert 'id="rma"' not in html.render_html(empty)
