"""`slurmadm jobs failures` and `report reliability` end to end on a fake sacct and a real store."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.slurm.sacct import sacct_time
from slurmadm.store import Store
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit


@pytest.fixture
def env(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(edited(put("store.path", str(tmp_path / "s.db")), put("store.audit_log", str(tmp_path / "a.jsonl"))))
    now = time.time()
    end = now - 3600
    rows = [f"51|51|train|alice|ml|gpu|normal|FAILED|1:0|0:0|None|{sacct_time(end - 7200)}|{sacct_time(end - 7200)}|"
            f"{sacct_time(end)}|7200|b200-017|billing=8,cpu=8,gres/gpu=8,node=1",
            f"52|52|train|bob|bio|gpu|normal|NODE_FAIL|0:0|0:0|None|{sacct_time(end - 3600)}|{sacct_time(end - 3600)}|"
            f"{sacct_time(end)}|3600|b200-018|billing=8,cpu=8,gres/gpu=4,node=1",
            f"53|53|ok|bob|bio|gpu|normal|COMPLETED|0:0|0:0|None|{sacct_time(end - 3600)}|{sacct_time(end - 3600)}|"
            f"{sacct_time(end)}|3600|b200-019|billing=8,cpu=8,gres/gpu=8,node=1"]
    out = tmp_path / "sacct.out"
    out.write_text("\n".join(rows) + "\n")
    sacct = tmp_path / "bin" / "sacct"
    sacct.parent.mkdir()
    sacct.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'slurm 22.05.8'; exit 0; }}\ncat {out}\n")
    sacct.chmod(0o755)
    with Store(tmp_path / "s.db") as store:
        for node in ("b200-017", "b200-018"):
            for t in range(int(end - 9000), int(end + 600), 1200):
                store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity,"
                                 " detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                                 (t, "r", node, "periodic", "xid", "pass", "drain", "", None, 1.0))
        store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity,"
                         " detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (end - 30, "r", "b200-018", "periodic", "xid", "fail", "drain",
                          "GPU2 XID 79 FALLEN (RESTART_BM)", None, 1.0))
        store.db.commit()
    return {"site": str(site), "PATH": f"{sacct.parent}:/usr/bin:/bin", "tmp": tmp_path}


def invoke(env, *args):
    return CliRunner().invoke(cli, [*args[:2], "--site", env["site"], *args[2:]], env={"PATH": env["PATH"]})


def test_failures_table_and_json(env):
    r = invoke(env, "jobs", "failures", "--since", "1d")
    assert r.exit_code == 1, r.output  # a run failed for the infrastructure
    assert "infrastructure: b200-018 GPU2 Xid 79" in r.output and "user: exit 1, no node signal" in r.output
    r = invoke(env, "jobs", "failures", "--since", "1d", "--json", "--project", "ml")
    data = json.loads(r.output)
    assert [f["line"] for f in data["failures"]] == ["user: exit 1, no node signal"]
    assert data["failures"][0]["gpu_hours"] == 16.0 and data["summary"] == {"user": {"runs": 1, "gpu_hours": 16.0}}
    assert r.exit_code == 0


def test_report_reliability_json_and_html(env):
    page = env["tmp"] / "r.html"
    r = invoke(env, "report", "reliability", "--since", "2d", "--json", "--html", str(page))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["totals"]["lost_infrastructure"] == pytest.approx(4.0)
    assert data["totals"]["lost_user"] == pytest.approx(16.0) and data["totals"]["completed"] == pytest.approx(8.0)
    assert page.read_text().startswith("<!DOCTYPE html>")


def test_slurmdbd_down_is_one_line_exit_3(env):
    bad = env["tmp"] / "bin" / "sacct"
    bad.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'slurm 22.05.8'; exit 0; }\n"
                   "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1\n")
    for args in (("jobs", "failures"), ("report", "reliability")):
        r = invoke(env, *args)
        assert r.exit_code == 3 and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(cli, ["jobs", "failures", "--site", env["site"]], env={"PATH": str(env["tmp"])})
    assert r.exit_code == 3 and "sacct: command not found" in r.output
