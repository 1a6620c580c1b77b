"""Checks in observe mode (`[health.checks.<id>] on_fail = "observe"`, health/observe.py): run
and recorded everywhere, acted on as warnings; `slurmadm health observe` says which nodes each
would have drained, and whether that is more of the fleet than the drain breaker allows."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.health import observe
from slurmadm.site import load_site
from slurmadm.store import Store
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit
NOW = time.time()


@pytest.fixture()
def site(tmp_path, monkeypatch):
    text = edited(put("store", {"path": f"{tmp_path}/slurmadm.db", "audit_log": f"{tmp_path}/audit.jsonl"}),
                  put("health.checks.nvlink", {"on_fail": "observe"}),
                  put("health.checks.pcie-link", {"on_fail": "observe"}))
    path = tmp_path / "site.toml"
    path.write_text(text)
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    with Store(f"{tmp_path}/slurmadm.db") as s, s.transaction() as db:
        rows = [(NOW - 3 * 86400, "nvlink", "b200-007", "fail", "GPU1 2 of 18 links down"),
                (NOW - 3600, "nvlink", "b200-007", "fail", "GPU1 3 of 18 links down"),
                (NOW - 60, "nvlink", "b200-007", "pass", "18/18 links"),
                (NOW - 7200, "nvlink", "b200-012", "error", "timed out after 5 s"),
                (NOW - 20 * 86400, "nvlink", "b200-030", "fail", "old: outside the window"),
                (NOW - 600, "ecc-uncorrected", "b200-001", "fail", "GPU5 volatile DBE=2")]
        rows += [(NOW - 300, "pcie-link", f"b200-{i:03d}", "fail", "GPU0 PCIe Gen5 x8 < x16") for i in range(1, 41)]
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,'periodic',?,?,'critical',?,NULL,1.0)",
                       [(ts, f"r{i}", node, cid, status, detail) for i, (ts, cid, node, status, detail) in enumerate(rows)])
    return path


def run(*args):
    return CliRunner().invoke(cli, ["health", "observe", *args], catch_exceptions=False)


def test_the_report_names_the_nodes_each_observed_check_would_have_drained(site):
    assert observe.observed(load_site(site)) == ["nvlink", "pcie-link"]
    res = run("--json")
    assert res.exit_code == 0, res.output
    rows = {r["check_id"]: r for r in json.loads(res.stdout)}
    assert list(rows) == ["nvlink", "pcie-link"]
    nv = rows["nvlink"]
    # b200-007 failed twice in the week (a pass since does not undo a drain); b200-012 could not
    # run it (an error, counted apart); b200-030's failure is older than --since
    assert nv["would_drain"] == ["b200-007"] and (nv["fails"], nv["errors"]) == (2, 1) and not nv["over_breaker"]
    n7 = nv["nodes"][0]
    assert (n7["node"], n7["fails"], n7["detail"]) == ("b200-007", 2, "GPU1 3 of 18 links down")
    assert n7["first"] == pytest.approx(NOW - 3 * 86400) and n7["last"] == pytest.approx(NOW - 3600)
    assert nv["nodes"][1]["node"] == "b200-012" and nv["nodes"][1]["fails"] == 0 and nv["nodes"][1]["last"] is None
    # 40 of the site's nodes at once: more than the drain breaker's share, a false positive to fix first
    pc = rows["pcie-link"]
    assert pc["would_drain_count"] == 40 and pc["over_breaker"] and pc["share"] == pytest.approx(40 / pc["fleet"])
    assert "more than the breaker's 10%" in observe.verdict(pc)
    assert observe.verdict(nv).startswith(f"would have drained 1 of {nv['fleet']} node(s) (b200-007)")


def test_people_get_one_line_per_check_and_its_nodes(site):
    res = run("--since", "30d")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "nvlink (on_fail observe)" in out and "b200-030" in out  # 20 days ago is within 30
    assert "would have drained 40 of" in out and "b200-[001-040]" in out
    assert "b200-017" not in out  # 40 nodes that agree are one row
    assert [(g["nodes"], g["count"]) for g in observe.fold(json.loads(run("--json").stdout)[1]["nodes"])] == [
        ("b200-[001-040]", 40)]


def test_any_check_can_be_asked_for_and_bad_input_is_one_line(site):
    res = run("--check", "ecc-uncorrected", "--json")
    (row,) = json.loads(res.stdout)
    assert (row["check_id"], row["on_fail"], row["would_drain"]) == ("ecc-uncorrected", "drain", ["b200-001"])
    bad = CliRunner().invoke(cli, ["health", "observe", "--check", "no-such"])
    assert bad.exit_code == 2 and "unknown check id(s) no-such" in bad.output and "Traceback" not in bad.output
    bad = CliRunner().invoke(cli, ["health", "observe", "--since", "last tuesday"])
    assert bad.exit_code == 2 and "--since" in bad.output


def test_a_site_with_no_check_in_observe_mode_says_how_to_put_one_there(tmp_path, monkeypatch):
    path = tmp_path / "site.toml"
    path.write_text(edited(put("store", {"path": f"{tmp_path}/slurmadm.db", "audit_log": f"{tmp_path}/a.jsonl"})))
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    res = run()
    assert res.exit_code == 0 and 'on_fail = "observe"' in res.stdout
    assert json.loads(run("--json").stdout) == []


# --------------------------------------------------------------------- --what-if: a threshold replayed
@pytest.fixture()
def temps(tmp_path, monkeypatch):
    """A week of thermal runs (the hottest GPU core each) on 20 nodes; 2 nodes run hot at times."""
    path = tmp_path / "site.toml"
    path.write_text(edited(put("store", {"path": f"{tmp_path}/slurmadm.db", "audit_log": f"{tmp_path}/a.jsonl"})))
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    rows = []
    for i in range(1, 21):
        node = f"b200-{i:03d}"
        for k, temp in enumerate([78, 80, 81, 82]):
            rows.append((NOW - 3600 * (k + 1), "thermal", node, "pass", temp + (i % 3)))  # 78..85 C
    rows += [(NOW - 1800, "thermal", "b200-005", "fail", 90), (NOW - 900, "thermal", "b200-006", "pass", 86),
             (NOW - 20 * 86400, "thermal", "b200-007", "fail", 99),  # outside --since 7d
             (NOW - 600, "thermal", "b200-008", "error", 120),  # could not run: no reading to replay
             (NOW - 300, "thermal", "gone-001", "fail", 99),  # no longer a node of the site
             (NOW - 500, "nccl-allreduce", "b200-003", "pass", 640.0),
             (NOW - 400, "nccl-allreduce", "b200-004", "fail", 280.0)]
    with Store(f"{tmp_path}/slurmadm.db") as s, s.transaction() as db:
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,'periodic',?,?,'critical','',?,1.0)",
                       [(ts, f"r{i}", node, cid, st, v) for i, (ts, cid, node, st, v) in enumerate(rows)])
    return path


def test_a_stricter_threshold_is_replayed_on_the_stored_values(temps):
    res = run("--what-if", "max_gpu_temp_c=85", "--what-if", "health.models.*.nccl_busbw_floor_gbps=300", "--json")
    assert res.exit_code == 0, res.output
    th, nc = json.loads(res.stdout)
    assert (th["check_id"], th["op"], th["proposed"], th["current"]) == ("thermal", ">", 85.0, [87.0])
    # at 87 C (now) only b200-005's 90 C run fails; at 85 C b200-006's 86 C too; b200-007 (20 days
    # ago), b200-008 (an error: no reading) and gone-001 (not a node of the site) are not replayed
    assert th["would_drain"] == ["b200-005", "b200-006"] and th["drains_now"] == ["b200-005"]
    assert th["nodes_seen"] == 20 and th["runs"] == 82 and not th["over_breaker"]
    n5 = th["nodes"][0]
    assert (n5["node"], n5["runs"], n5["would_fail"], n5["fail_now"], n5["worst"]) == ("b200-005", 5, 1, 1, 90.0)
    assert n5["last"] == pytest.approx(NOW - 1800)
    assert "would have drained 2 of 128 node(s) (b200-[005-006]); at the current threshold 1" in \
        observe.what_if_verdict(th)
    # a floor fails below it: 280 GB/s under 300
    assert (nc["check_id"], nc["op"], nc["would_drain"], nc["drains_now"]) == ("nccl-allreduce", "<",
                                                                                ["b200-004"], ["b200-004"])


def test_a_threshold_that_would_drain_much_of_the_fleet_is_flagged(temps):
    res = run("--what-if", "max_gpu_temp_c=80")
    assert res.exit_code == 0, res.output
    # every one of the 20 nodes had a run over 80 C: 20 of 128 is over the breaker's 10%
    assert "would have drained 20 of 128 node(s) (b200-[001-020])" in res.stdout
    assert "more than the breaker's 10%" in res.stdout
    assert "HBM temperature is not replayed" in res.stdout
    assert "... and 10 more node(s)" in res.stdout  # 10 rows for people, the hottest first
    assert "b200-005" in res.stdout
    data = json.loads(run("--what-if", "max_gpu_temp_c=80", "--json").stdout)[0]
    assert data["over_breaker"] and len(data["nodes"]) == 20


@pytest.mark.parametrize("arg, said", [
    ("max_gpu_temp=80", "KEY=VALUE with KEY one of max_gpu_temp_c"),
    ("max_gpu_temp_c", "KEY=VALUE"),
    ("max_gpu_temp_c=hot", "'hot' is not a number"),
    ("max_gpu_temp_c=nan", "'nan' is not a threshold"),
    ("max_gpu_temp_c=-3", "'-3' is not a threshold"),
])
def test_a_bad_what_if_is_one_line_and_exit_2(temps, arg, said):
    res = run("--what-if", arg)
    assert res.exit_code == 2 and said in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_what_if_and_check_do_not_mix(temps):
    res = run("--what-if", "max_gpu_temp_c=80", "--check", "thermal")
    assert res.exit_code == 2 and "leave out --check" in res.output
